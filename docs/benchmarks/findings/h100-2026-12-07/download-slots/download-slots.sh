#!/usr/bin/env bash
# From the repository root of a commit from ef8e532 to 241614f (the patch applies to those): 64 MiB
# downloads through the engine path at 8 threads with 2, 4 and 8 MiB chunks, main's 4 slots against
# 8 (s8: PS_ENGINE_SLOTS 8 for both directions, as governor-slots/ measured); then
# download-eight-slots.patch (8 slots of at most 4 MiB for downloads only, main's 32 MiB of pinned
# memory at most) against main through auto in alternating fresh processes, and the patch's suite
# on the real driver.
set -u
P=docs/benchmarks/findings/h100-2026-12-07/download-slots/download-eight-slots.patch
r=/tmp/download-slots; rm -rf $r; mkdir -p $r
pack() { tar czf $OUT/download-slots.tgz -C /tmp download-slots; }
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; lscpu | grep -E 'Model name|^CPU\(s\)'; } > $r/machine.txt 2>&1
for v in s8 patch; do rm -rf /tmp/t-$v; mkdir /tmp/t-$v; tar cf - --exclude=./build-gpu --exclude=./.git --exclude=./build --exclude=./build-tsan --exclude=./.scratch . | tar xf - -C /tmp/t-$v; done
sed -i 's/^#define PS_ENGINE_SLOTS 4$/#define PS_ENGINE_SLOTS 8/' /tmp/t-s8/src/policy.h
(cd /tmp/t-patch && patch -p1 < /tmp/t-patch/$P > /dev/null) || { echo "the patch does not apply"; exit 1; }
grep -n "define PS_ENGINE_SLOTS\|define PS_ENGINE_D2H_SLOTS" /tmp/t-s8/src/policy.h /tmp/t-patch/src/policy.h >> $r/machine.txt
( cmake -S . -B /tmp/b-main -DCMAKE_BUILD_TYPE=Release > $r/build-main.log 2>&1 && cmake --build /tmp/b-main -j 5 --target pinstage-bench >> $r/build-main.log 2>&1 ) &
( cmake -S /tmp/t-s8 -B /tmp/b-s8 -DCMAKE_BUILD_TYPE=Release > $r/build-s8.log 2>&1 && cmake --build /tmp/b-s8 -j 5 --target pinstage-bench >> $r/build-s8.log 2>&1 ) &
( cmake -S /tmp/t-patch -B /tmp/b-patch -DCMAKE_BUILD_TYPE=Release -DPINSTAGE_TEST_DRIVER=real > $r/build-patch.log 2>&1 && cmake --build /tmp/b-patch -j 6 >> $r/build-patch.log 2>&1 ) &
wait
for round in 1 2 3; do
  for cfg in main:4M:8 main:8M:8 s8:4M:8 s8:8M:8 s8:2M:8; do
    v=${cfg%%:*}; e=${cfg#*:}
    /tmp/b-$v/tools/pinstage-bench --quiet --sizes 64M --direction d2h --paths engine,floor --engine $e --budget 1.5 --json $r/$v-${e/:/x}-$round.json -o $r/$v-${e/:/x}-$round.txt
  done
done
pack
for round in 1 2 3; do
  o="main patch"; [ $round = 2 ] && o="patch main"
  for v in $o; do
    /tmp/b-$v/tools/pinstage-bench --quiet --sizes 4915200,64M --direction both --paths auto,floor --budget 2 --json $r/auto-$v-$round.json -o $r/auto-$v-$round.txt
  done
done
pack
ctest --test-dir /tmp/b-patch --output-on-failure -j 1 > $r/ctest-real-patch.log 2>&1; echo "ctest rc=$?" >> $r/machine.txt
pack
python3 - <<'PY'
import json,glob,collections
res=collections.defaultdict(list)
for f in sorted(glob.glob('/tmp/download-slots/*-[123].json')):
    k=f.split('/')[-1][:-5].rsplit('-',1)[0]
    rows=json.load(open(f))['results']
    m={(x['direction'],x['bytes'],x['path']):x['median_us'] for x in rows}
    for (d,b,p),us in sorted(m.items()):
        if p in ('engine','auto'): res[(k,d,b)].append('%.3f'%(m[(d,b,'floor')]/us))
for k,v in sorted(res.items()): print(*k, ' '.join(v))
PY
tail -3 $r/ctest-real-patch.log
