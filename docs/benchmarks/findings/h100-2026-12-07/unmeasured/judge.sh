#!/usr/bin/env bash
# The device call that judges the patch named by PATCH (every-eighth.patch when unset), from the
# repository root on a GPU machine: main (HEAD) against HEAD + the patch, and main with adaptation
# off; 4 KiB-147 KiB uploads and downloads beside the landed pageable copy, idle and under CPU
# load, three rounds (M P, P M, M P); the real-driver suite of the patched build; then, if time
# allows, a short conditions run (CONDITIONS=0 skips it). Results packed into $OUT/judge.tgz as they come.
set -u
here=$(cd "$(dirname "$0")" && pwd); PATCH=$(realpath ${PATCH:-$here/every-eighth.patch})
t0=$(date +%s)
r=/tmp/judge; rm -rf $r; mkdir -p $r/tiny
pack() { [ -n "${OUT:-}" ] && tar czf $OUT/judge.tgz -C /tmp judge 2>/dev/null; }
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; lscpu | grep -E 'Model name|^CPU\(s\)'; git log --oneline -1; } > $r/machine.txt 2>&1
# M is the tree the call runs in, copied as it is: the device tool's copy can carry older git
# metadata than its files, so git archive HEAD there may build an older main.
rm -rf /tmp/vM /tmp/vP && mkdir -p /tmp/vM /tmp/vP
tar c --exclude=./.git --exclude='./build*' --exclude=./gpu-check-out --exclude=./.scratch . | tar x -C /tmp/vM
cp -r /tmp/vM/. /tmp/vP
(cd /tmp/vP && git apply "$PATCH") || { echo "the patch does not apply"; exit 1; }
( cmake -S /tmp/vM -B /tmp/bM -DCMAKE_BUILD_TYPE=Release > $r/buildM.log 2>&1 && cmake --build /tmp/bM -j 8 --target pinstage-bench >> $r/buildM.log 2>&1 ) &
( cmake -S /tmp/vP -B /tmp/bP -DCMAKE_BUILD_TYPE=Release -DPINSTAGE_TEST_DRIVER=real > $r/buildP.log 2>&1 && cmake --build /tmp/bP -j 16 >> $r/buildP.log 2>&1 ) &
wait
M=/tmp/bM/tools/pinstage-bench; P=/tmp/bP/tools/pinstage-bench
[ -x $M ] && [ -x $P ] || { tail -20 $r/buildM.log $r/buildP.log; exit 1; }
echo "built +$(( $(date +%s) - t0 ))s" >> $r/times.txt
T="--quiet --sizes 4K,16K,64K,150528 --direction both --paths pageable,pageable-async,auto,resident --reps 200 --budget 1"
for round in 1 2 3; do
  if [ $round = 2 ]; then order="P M"; else order="M P"; fi
  for v in $order; do eval b=\$$v; for load in none cpu; do
    X=$([ $load = cpu ] && echo "--load cpu")
    $b $T $X --json $r/tiny/$v-$load-$round.json -o /dev/null
    [ $v = M ] && PINSTAGE_ADAPTIVE=0 $b $T $X --json $r/tiny/F-$load-$round.json -o /dev/null
  done; done
  echo "tiny round $round +$(( $(date +%s) - t0 ))s" >> $r/times.txt; pack
  [ $round = 1 ] && { ctest --test-dir /tmp/bP -j 1 --output-on-failure > $r/ctest-real.log 2>&1; echo "ctest rc=$? +$(( $(date +%s) - t0 ))s" >> $r/times.txt; pack; }
done
[ "${CONDITIONS:-1}" != 0 ] && [ $(( $(date +%s) - t0 )) -lt 300 ] && timeout 120 $P --quiet --conditions --processes 2 --sizes 4915200 --sweep 4K:256K \
  -o $r/conditions.txt --json $r/conditions.json
echo "end +$(( $(date +%s) - t0 ))s" >> $r/times.txt; pack
cat $r/machine.txt $r/times.txt; tail -3 $r/ctest-real.log
# pageable-async's median / auto's (above 1: auto faster), and auto's median in us; M main, P patched,
# F main with adaptation off.
python3 - $r/tiny <<'PY'
import json, glob, os, sys
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    rs = json.load(open(f))["results"]
    for d in ("h2d", "d2h"):
        m = {(x["bytes"], x["path"]): x for x in rs if x["direction"] == d}
        print(os.path.basename(f), d, " ".join(f"{b >> 10}K {m[(b, 'pageable-async')]['median_us'] / m[(b, 'auto')]['median_us']:.3f} ({m[(b, 'auto')]['median_us']:.2f} p{m[(b, 'auto')].get('pageable_share', 0):.2f})"
                                        for b in (4096, 16384, 65536, 150528) if (b, 'auto') in m))
PY
[ -f $r/conditions.json ] && python3 bench/conditions.py $r/conditions.json | grep -iE "cpu load" | cut -c1-220
