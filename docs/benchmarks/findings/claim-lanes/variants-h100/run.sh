#!/usr/bin/env bash
# Which part of HEAD's pool costs the 147 KiB upload: variants of HEAD side by side with 0.1.0.
#  A HEAD; B one block per thread for one-chunk transfers; C B + seats by fetch_add; D C + no yield while spinning; E lanes; F lanes + B; G lanes + striped copy counters.
set -u
t0=$(date +%s)
r=/tmp/r25; rm -rf $r; mkdir -p $r/seed $r/trace
pack() { tar czf $OUT/r25.tgz -C /tmp r25 2>/dev/null; }
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; lscpu | grep -E 'Model name|^CPU\(s\)'; } > $r/machine.txt 2>&1
( cmake -S .scratch/v010 -B /tmp/b010 -DCMAKE_BUILD_TYPE=Release > $r/build010.log 2>&1 && cmake --build /tmp/b010 -j 2 --target pinstage-bench >> $r/build010.log 2>&1 ) &
for v in A B C D E F G; do ( cmake -S .scratch/v$v -B /tmp/b$v -DCMAKE_BUILD_TYPE=Release > $r/build$v.log 2>&1 && cmake --build /tmp/b$v -j 2 --target pinstage-bench >> $r/build$v.log 2>&1 ) & done
( cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DPINSTAGE_TEST_DRIVER=real > $r/buildreal.log 2>&1 && cmake --build build-gpu -j 4 >> $r/buildreal.log 2>&1 ) &
wait
for v in 010 A B C D E F G; do [ -x /tmp/b$v/tools/pinstage-bench ] || { tail -20 $r/build$v.log; exit 1; }; done
echo "built +$(( $(date +%s) - t0 ))s" > $r/times.txt
S="--quiet --sizes 150528,196608,4915200,67108864 --paths pageable,builtin,engine,floor"
for round in 1 2 3; do
  for v in 010 A B C D E F G; do /tmp/b$v/tools/pinstage-bench $S --json $r/seed/$v-$round.json -o /dev/null; done
  echo "round $round +$(( $(date +%s) - t0 ))s" >> $r/times.txt; pack
done
for v in A B C D E F G; do
  PINSTAGE_TRACE=$r/trace/$v.trace /tmp/b$v/tools/pinstage-bench --quiet --sizes 150528 --direction h2d --paths engine --engine 0:0 --reps 200 -o /dev/null
  /tmp/b$v/tools/pinstage-bench --trace $r/trace/$v.trace > $r/trace/$v.txt 2>&1
done
echo "trace +$(( $(date +%s) - t0 ))s" >> $r/times.txt; pack
timeout 200 ctest --test-dir build-gpu -j 1 --output-on-failure > $r/ctest-real.log 2>&1; echo "ctest (working tree, real driver) rc=$?" >> $r/times.txt
grep -E "tests passed|tests failed|Failed|Timeout" $r/ctest-real.log >> $r/times.txt; echo "ctest +$(( $(date +%s) - t0 ))s" >> $r/times.txt; pack
cat $r/machine.txt $r/times.txt
python3 - $r <<'PY'
import json,sys,glob,statistics,collections
r=sys.argv[1]; m=collections.defaultdict(list)
for f in sorted(glob.glob(r+'/seed/*.json')):
    v=f.split('/')[-1].split('-')[0]
    for x in json.load(open(f))['results']:
        m[(x['direction'],x['bytes'],x['path'],v)].append(x['median_us'])
vs=['010','A','B','C','D','E','F','G']
print('dir bytes path ' + ' '.join('%8s'%v for v in vs))
for key in sorted({k[:3] for k in m}):
    print('%s %8d %-9s'%key + ' '.join('%8.1f'%statistics.median(m[key+(v,)]) if m.get(key+(v,)) else '       -' for v in vs))
PY
