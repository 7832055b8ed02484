#!/usr/bin/env bash
# (1) gpu-check on HEAD. (2) Uploads through three rings, fresh processes rotating:
# head = 4 slots of at most 8 MiB; u8 = 8 slots (8 MiB); u8c2 = 8 slots of at most 2 MiB.
set -u
t0=$(date +%s)
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
r=/tmp/uring; rm -rf $r; mkdir -p $r
pack() { tar czf $OUT/uring.tgz -C /tmp uring 2>/dev/null; }
{ echo "$name"; lscpu | grep -E 'Model name|^CPU\(s\)'; echo "engine.c $(sha1sum src/engine.c | cut -c1-12), adapt.c $(sha1sum src/adapt.c | cut -c1-12)"; } > $r/machine.txt
for v in head u8 u8c2; do rm -rf /tmp/t-$v; mkdir /tmp/t-$v; tar cf - --exclude=./build-gpu --exclude=./.git --exclude=./build --exclude=./build-tsan --exclude=./build-asan --exclude=./.scratch --exclude=./gpu-check-out . | tar xf - -C /tmp/t-$v; done
sed -i 's/^#define PS_ENGINE_SLOTS 4$/#define PS_ENGINE_SLOTS 8/' /tmp/t-u8/src/policy.h /tmp/t-u8c2/src/policy.h
sed -i 's/^#define PS_ENGINE_MAX_CHUNK ((size_t)8 << 20)$/#define PS_ENGINE_MAX_CHUNK ((size_t)2 << 20)/' /tmp/t-u8c2/src/policy.h
for v in u8 u8c2; do echo "$v: $(grep -E '^#define PS_ENGINE_(SLOTS|MAX_CHUNK) ' /tmp/t-$v/src/policy.h | tr '\n' ' ')" >> $r/machine.txt; done
for v in head u8 u8c2; do
  ( cmake -S /tmp/t-$v -B /tmp/b-$v -DCMAKE_BUILD_TYPE=Release > $r/build-$v.log 2>&1 && cmake --build /tmp/b-$v -j 5 --target pinstage-bench >> $r/build-$v.log 2>&1 ) &
done
wait
echo "built +$(( $(date +%s) - t0 ))s" >> $r/machine.txt
GPU_CHECK_DIR=/tmp/gc scripts/gpu-check > $r/gpu-check.log 2>&1; echo "gpu-check rc=$? +$(( $(date +%s) - t0 ))s" >> $r/machine.txt
pack
for v in head u8 u8c2; do
  for c in 4M:8 2M:8; do
    t=$(echo $c | tr -d ':')
    /tmp/b-$v/tools/pinstage-bench --quiet --sizes 64M --direction h2d --paths engine,floor --engine $c --budget 1.5 --json $r/engine$t-$v.json -o $r/engine$t-$v.txt
  done
done
bin() { case $1 in *-p3) echo "/tmp/b-${1%-p3}/tools/pinstage-bench --pool-threads 3";; *) echo "/tmp/b-$1/tools/pinstage-bench";; esac; }
for round in 1 2 3; do
  o="head u8 u8c2 head-p3 u8-p3"; [ $round = 2 ] && o="u8-p3 u8c2 head u8 head-p3"; [ $round = 3 ] && o="head-p3 u8-p3 u8 u8c2 head"
  for v in $o; do
    $(bin $v) --quiet --sizes 4915200,64M --direction h2d --paths auto,floor --budget 2 --json $r/auto-$v-$round.json -o $r/auto-$v-$round.txt
  done
  pack; echo "round $round +$(( $(date +%s) - t0 ))s" >> $r/machine.txt
done
echo "rings done +$(( $(date +%s) - t0 ))s" >> $r/machine.txt
pack
python3 - <<'PY'
import json,glob,collections
res=collections.defaultdict(list)
for f in sorted(glob.glob('/tmp/uring/*-*.json')):
    k=f.split('/')[-1][:-5]
    kind,v=k.split('-')[0],'-'.join(k.split('-')[1:-1]) if k.startswith('auto') else k.split('-')[1]
    m={(x['direction'],x['bytes'],x['path']):x for x in json.load(open(f))['results']}
    for (d,b,p),x in sorted(m.items()):
        if p in('auto','engine'):
            fl=m[(d,b,'floor')]['median_us']
            res[(kind,v,d,b)].append('%.3f (%.1f us, mean %.3f)'%(fl/x['median_us'],x['median_us'],fl/x['mean_us']))
for k,v in sorted(res.items()): print(*k, ' | '.join(v))
PY
tail -25 $r/gpu-check.log; cat $r/machine.txt
echo "$name; all done +$(( $(date +%s) - t0 ))s"
