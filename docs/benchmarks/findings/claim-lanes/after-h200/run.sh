#!/usr/bin/env bash
# main (8931e2d) against the lanes commit at the seed's sizes, five rounds alternating; then gpu-check.
set -u
t0=$(date +%s)
r=/tmp/r26; rm -rf $r; mkdir -p $r/seed
pack() { tar czf $OUT/r26.tgz -C /tmp r26 2>/dev/null; }
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; lscpu | grep -E 'Model name|^CPU\(s\)'; } > $r/machine.txt 2>&1
( cmake -S .scratch/vA -B /tmp/bA -DCMAKE_BUILD_TYPE=Release > $r/buildA.log 2>&1 && cmake --build /tmp/bA -j 4 --target pinstage-bench >> $r/buildA.log 2>&1 ) &
( cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DPINSTAGE_TEST_DRIVER=real > $r/build.log 2>&1 && cmake --build build-gpu -j 12 >> $r/build.log 2>&1 ) &
wait
A=/tmp/bA/tools/pinstage-bench; L=build-gpu/tools/pinstage-bench
[ -x $A ] && [ -x $L ] || { tail -20 $r/build.log $r/buildA.log; exit 1; }
S="--quiet --sizes 150528,196608,4915200 --paths pageable,pageable-async,builtin,engine,resident,floor"
for round in 1 2 3 4 5; do
  $A $S --json $r/seed/main-$round.json -o $r/seed/main-$round.txt
  $L $S --json $r/seed/lanes-$round.json -o $r/seed/lanes-$round.txt
done
echo "seed rounds +$(( $(date +%s) - t0 ))s" >> $r/times.txt; pack
GPU_CHECK_SOAK=200000 GPU_CHECK_DIR=$r/gpu-check timeout ${GC_LIMIT:-420} bash scripts/gpu-check > $r/gpu-check.out 2>&1
echo "gpu-check rc=$? +$(( $(date +%s) - t0 ))s" >> $r/times.txt
rm -rf $r/gpu-check/python-site; pack
cat $r/machine.txt $r/times.txt; tail -45 $r/gpu-check.out
python3 - $r <<'PY'
import json,sys,glob,statistics,collections
r=sys.argv[1]; m=collections.defaultdict(list)
for f in sorted(glob.glob(r+'/seed/*.json')):
    v=f.split('/')[-1].split('-')[0]
    for x in json.load(open(f))['results']:
        m[(x['direction'],x['bytes'],x['path'],v)].append(x['median_us'])
print('dir bytes path     main(min med max)       lanes(min med max)')
for key in sorted({k[:3] for k in m}):
    a=m[key+('main',)]; b=m[key+('lanes',)]
    print('%s %8d %-14s'%key, '%6.1f %6.1f %6.1f'%(min(a),statistics.median(a),max(a)), '  %6.1f %6.1f %6.1f'%(min(b),statistics.median(b),max(b)))
PY
