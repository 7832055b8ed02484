#!/usr/bin/env bash
# The ring probe and pinstage's engine taking turns on one machine, with the host's steal time
# (/proc/stat) over each step: whether the engine's 64 MiB uploads lose to the probe's on the same
# 4 slots of 4 MiB because of the engine or because of the machine at that moment. From the
# repository root.
set -u
t0=$(date +%s)
r=/tmp/interleaved; rm -rf $r; mkdir -p $r
pack() { tar czf $OUT/interleaved.tgz -C /tmp interleaved 2>/dev/null; }
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; lscpu | grep -E 'Model name|^CPU\(s\)|NUMA node\(s\)'; git log --oneline -1; } > $r/machine.txt 2>&1
gcc -O2 -pthread docs/benchmarks/findings/h100-2026-12-08/ring-probe/ring-probe.c -ldl -o /tmp/ring-probe || exit 1
cmake -S . -B /tmp/b-int -DCMAKE_BUILD_TYPE=Release > $r/build.log 2>&1 && cmake --build /tmp/b-int -j 16 --target pinstage-bench >> $r/build.log 2>&1 || exit 1
B=/tmp/b-int/tools/pinstage-bench
# cpu-line jiffies: user nice system idle iowait irq softirq steal
cpu() { awk '/^cpu /{print $2+$3+$4+$5+$6+$7+$8+$9, $9}' /proc/stat; }
step() { # name, command...
  local name=$1; shift
  local a b s
  a=$(cpu); s=$(date +%s.%N)
  "$@" > $r/$name.txt 2>&1
  b=$(cpu)
  python3 -c "import sys; a=list(map(int,'$a'.split())); b=list(map(int,'$b'.split())); t=b[0]-a[0]; print('%-22s %6.1fs steal %5.2f%%' % ('$name', $(date +%s.%N)-$s, 100.0*(b[1]-a[1])/t if t else 0))" >> $r/steps.txt
}
for round in 1 2 3; do
  step probe-$round /tmp/ring-probe 100 4,6 4 1
  step auto-$round $B --quiet --sizes 64M --direction h2d --paths auto,floor --budget 2 --json $r/auto-$round.json
  step engine5-$round $B --quiet --sizes 64M --direction h2d --paths engine,floor --engine 4M:5 --budget 2 --json $r/engine5-$round.json
  step engine7-$round $B --quiet --sizes 64M --direction h2d --paths engine,floor --engine 4M:7 --budget 2 --json $r/engine7-$round.json
  pack
done
PINSTAGE_TRACE=/tmp/int-trace.bin step traced-engine5 $B --quiet --sizes 64M --direction h2d --paths engine,floor --engine 4M:5 --budget 1 --json $r/traced-engine5.json
$B --trace /tmp/int-trace.bin > $r/trace-engine5-summary.txt 2>&1
pack
cat $r/steps.txt
for round in 1 2 3; do grep -E '^[0-9]' $r/probe-$round.txt; done
python3 - <<'PY'
import json,glob
for f in sorted(glob.glob('/tmp/interleaved/*.json')):
    m={x['path']:x for x in json.load(open(f))['results']}
    fl=m['floor']['median_us']
    for p,x in m.items():
        if p!='floor': print(f.split('/')[-1], p, 'median %.0f p10 %.0f p90 %.0f share %.3f p10-share %.3f threads %s' % (x['median_us'], x['p10_us'], x['p90_us'], fl/x['median_us'], fl/x['p10_us'], x.get('engine_threads','-')))
PY
echo "all done +$(( $(date +%s) - t0 ))s"
