#!/usr/bin/env bash
# Downloads of 64 MiB: the ring's slots (4, main; 8) against the chunk, the footprint kept at 32 MiB or doubled.
set -u
r=/tmp/download-slots; rm -rf $r; mkdir -p $r
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; lscpu | grep -E 'Model name|^CPU\(s\)'; git log --oneline -1; } > $r/machine.txt 2>&1
rm -rf /tmp/t-s8; mkdir /tmp/t-s8; tar cf - --exclude=./build-gpu --exclude=./.git --exclude=./build --exclude=./build-tsan --exclude=./.scratch . | tar xf - -C /tmp/t-s8
sed -i 's/^#define PS_ENGINE_SLOTS 4$/#define PS_ENGINE_SLOTS 8/' /tmp/t-s8/src/policy.h; grep -n "define PS_ENGINE_SLOTS" /tmp/t-s8/src/policy.h >> $r/machine.txt
( cmake -S . -B /tmp/b-main -DCMAKE_BUILD_TYPE=Release > $r/build-main.log 2>&1 && cmake --build /tmp/b-main -j 8 --target pinstage-bench >> $r/build-main.log 2>&1 ) &
( cmake -S /tmp/t-s8 -B /tmp/b-s8 -DCMAKE_BUILD_TYPE=Release > $r/build-s8.log 2>&1 && cmake --build /tmp/b-s8 -j 8 --target pinstage-bench >> $r/build-s8.log 2>&1 ) &
wait
for round in 1 2 3; do
  for cfg in main:4M:8 main:8M:8 s8:4M:8 s8:8M:8 s8:2M:8; do
    v=${cfg%%:*}; e=${cfg#*:}
    /tmp/b-$v/tools/pinstage-bench --quiet --sizes 64M --direction d2h --paths engine,floor --engine $e --budget 1.5 --json $r/$v-${e/:/x}-$round.json -o $r/$v-${e/:/x}-$round.txt
  done
done
tar czf $OUT/download-slots.tgz -C /tmp download-slots
python3 - <<'PY'
import json,glob,collections
res=collections.defaultdict(list)
for f in sorted(glob.glob('/tmp/download-slots/*.json')):
    n=f.split('/')[-1][:-5]; k=n.rsplit('-',1)[0]
    m={x['path']:x['median_us'] for x in json.load(open(f))['results']}
    res[k].append('%.3f (%.0f)'%(m['floor']/m['engine'], m['engine']))
for k,v in sorted(res.items()): print(k, ' '.join(v))
PY
