#!/usr/bin/env bash
# One call: the seed's sizes by 0.1.0 (the code behind docs/benchmarks.md's best-case tables) and by HEAD,
# side by side on the same machine, three rounds alternating; then what HEAD's 147 KiB upload spends.
set -u
t0=$(date +%s); left() { echo $(( ${BUDGET:-540} - ($(date +%s) - t0) )); }
r=/tmp/r24; rm -rf $r; mkdir -p $r/seed $r/diag
pack() { tar czf $OUT/r24.tgz -C /tmp r24 2>/dev/null; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader; lscpu | grep -E 'Model name|^CPU\(s\)'; } > $r/machine.txt 2>&1
( cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DPINSTAGE_TEST_DRIVER=real > $r/build.log 2>&1 && cmake --build build-gpu -j 16 --target pinstage-bench >> $r/build.log 2>&1 ) &
( cmake -S .scratch/v010 -B /tmp/b010 -DCMAKE_BUILD_TYPE=Release > $r/build010.log 2>&1 && cmake --build /tmp/b010 -j 16 --target pinstage-bench >> $r/build010.log 2>&1 ) &
wait
B=build-gpu/tools/pinstage-bench; O=/tmp/b010/tools/pinstage-bench
[ -x $B ] && [ -x $O ] || { tail -20 $r/build.log $r/build010.log; exit 1; }
echo "built +$(( $(date +%s) - t0 ))s" > $r/times.txt
S="--quiet --sizes 150528,196608,4915200 --paths pageable,pageable-async,builtin,engine,resident,floor"
for round in 1 2 3; do
  $O $S --json $r/seed/v010-$round.json -o $r/seed/v010-$round.txt
  $B $S --json $r/seed/head-$round.json -o $r/seed/head-$round.txt
  echo "round $round +$(( $(date +%s) - t0 ))s" >> $r/times.txt; pack
done
# HEAD at 147 KiB: adaptation off, the engine by thread count, the pool's spin long
D="--quiet --sizes 150528 --paths pageable,builtin,engine,floor"
PINSTAGE_ADAPTIVE=0 $B $D --json $r/diag/noadapt.json -o $r/diag/noadapt.txt
for t in 1 2 4 8 0; do $B $D --engine 0:$t --json $r/diag/engine-$t.json -o /dev/null; $O $D --engine 0:$t --json $r/diag/v010-engine-$t.json -o /dev/null; done
$B $D --pool-spin 10000 --json $r/diag/spin10ms.json -o /dev/null
PINSTAGE_TRACE=$r/diag/head.trace $B --quiet --sizes 150528 --direction h2d --paths engine --engine 0:0 --reps 200 -o /dev/null
$B --trace $r/diag/head.trace > $r/diag/head-trace.txt 2>&1
echo "diag +$(( $(date +%s) - t0 ))s" >> $r/times.txt; pack
cat $r/machine.txt $r/times.txt
python3 - $r <<'PY'
import json,sys,glob,statistics as st
r=sys.argv[1]
def rows(f):
    d=json.load(open(f)); return {(x['direction'],x['bytes'],x['path']):x['median_us'] for x in d['results']}
for v in ('v010','head'):
    fs=sorted(glob.glob(f'{r}/seed/{v}-*.json'))
    if not fs: continue
    R=[rows(f) for f in fs]
    print(v)
    for k in sorted(R[0]):
        print('  %s %8d %-15s %s'%(k[0],k[1],k[2],' '.join('%8.1f'%x.get(k,0) for x in R)))
for f in sorted(glob.glob(f'{r}/diag/*.json')):
    R=rows(f); print(f.split('/')[-1], ' '.join('%s/%s=%.1f'%(k[0],k[2],v) for k,v in sorted(R.items())))
PY
