#!/usr/bin/env bash
# From the repository root at b854a3a: 64 MiB downloads through auto, HEAD (8 slots of at most
# 4 MiB) against c2 (8 of at most 2 MiB, 16 MiB pinned: what landed next) and s16 (16 of at most
# 2 MiB, 32 MiB), alternating fresh processes; s16's suite on the real driver. c2's suite ran in a
# second call on the same warm machine:
#   cmake -S /tmp/t-c2 -B /tmp/b-c2r -DCMAKE_BUILD_TYPE=Release -DPINSTAGE_TEST_DRIVER=real
#   cmake --build /tmp/b-c2r -j 16 && ctest --test-dir /tmp/b-c2r --output-on-failure -j 1
set -u
t0=$(date +%s)
r=/tmp/slots16; rm -rf $r; mkdir -p $r
pack() { tar czf $OUT/slots16.tgz -C /tmp slots16; }
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; lscpu | grep -E 'Model name|^CPU\(s\)'; git log --oneline -1; } > $r/machine.txt 2>&1
for v in c2 s16; do rm -rf /tmp/t-$v; mkdir /tmp/t-$v; tar cf - --exclude=./build-gpu --exclude=./.git --exclude=./build --exclude=./build-tsan --exclude=./.scratch . | tar xf - -C /tmp/t-$v; done
sed -i 's|    size_t most = PS_ENGINE_MAX_FOOTPRINT / slots_for(dir);|    size_t most = dir == PS_D2H ? ((size_t)2 << 20) : PS_ENGINE_MAX_FOOTPRINT / slots_for(dir);|' /tmp/t-c2/src/engine.c
sed -i 's/^#define PS_ENGINE_D2H_SLOTS 8$/#define PS_ENGINE_D2H_SLOTS 16/; s/^#define PS_ENGINE_MAX_SLOTS 8$/#define PS_ENGINE_MAX_SLOTS 16/' /tmp/t-s16/src/policy.h
sed -i "s/<= 8 \* 64 \* K/<= 16 * 64 * K/" /tmp/t-s16/tests/test_engine.c
grep -n "size_t most" /tmp/t-c2/src/engine.c >> $r/machine.txt; grep -n "D2H_SLOTS\|MAX_SLOTS" /tmp/t-s16/src/policy.h >> $r/machine.txt
( cmake -S . -B /tmp/b-head -DCMAKE_BUILD_TYPE=Release > $r/build-head.log 2>&1 && cmake --build /tmp/b-head -j 5 --target pinstage-bench >> $r/build-head.log 2>&1 ) &
( cmake -S /tmp/t-c2 -B /tmp/b-c2 -DCMAKE_BUILD_TYPE=Release > $r/build-c2.log 2>&1 && cmake --build /tmp/b-c2 -j 5 --target pinstage-bench >> $r/build-c2.log 2>&1 ) &
( cmake -S /tmp/t-s16 -B /tmp/b-s16 -DCMAKE_BUILD_TYPE=Release -DPINSTAGE_TEST_DRIVER=real > $r/build-s16.log 2>&1 && cmake --build /tmp/b-s16 -j 6 >> $r/build-s16.log 2>&1 ) &
wait
echo "built +$(( $(date +%s) - t0 ))s" >> $r/machine.txt
for round in 1 2 3; do
  o="head c2 s16"; [ $round = 2 ] && o="s16 head c2"; [ $round = 3 ] && o="c2 s16 head"
  for v in $o; do
    /tmp/b-$v/tools/pinstage-bench --quiet --sizes 4915200,64M --direction d2h --paths auto,floor --budget 2 --json $r/auto-$v-$round.json -o $r/auto-$v-$round.txt
  done
done
pack
python3 - <<'PY'
import json,glob,collections
res=collections.defaultdict(list)
for f in sorted(glob.glob('/tmp/slots16/auto-*.json')):
    k=f.split('/')[-1][:-5].rsplit('-',1)[0]
    m={(x['direction'],x['bytes'],x['path']):x['median_us'] for x in json.load(open(f))['results']}
    for (d,b,p),us in sorted(m.items()):
        if p=='auto': res[(k,d,b)].append('%.3f'%(m[(d,b,'floor')]/us))
for k,v in sorted(res.items()): print(*k, ' '.join(v))
PY
echo "bench done +$(( $(date +%s) - t0 ))s"
ctest --test-dir /tmp/b-s16 --output-on-failure -j 1 > $r/ctest-real-s16.log 2>&1; echo "s16 ctest rc=$?" >> $r/machine.txt
pack; tail -3 $r/ctest-real-s16.log; echo "all done +$(( $(date +%s) - t0 ))s"
