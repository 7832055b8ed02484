#!/usr/bin/env bash
# Run from the repository root on a GPU machine: main against main with nh.patch (nh), the engine
# path at 64 MiB and auto in fresh processes, both directions. As run on 2026-12-07 21:33 UTC, then
# from unmeasured/caller-copies-nothing.sh and .patch; the paths are the files' committed places.
set -u
t0=$(date +%s)
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
r=/tmp/nohelp; rm -rf $r; mkdir -p $r
pack() { tar czf $OUT/nohelp.tgz -C /tmp nohelp 2>/dev/null; }
{ echo "$name"; lscpu | grep -E 'Model name|^CPU\(s\)'; echo "engine.c $(sha1sum src/engine.c | cut -c1-12)"; } > $r/machine.txt
for v in head nh; do rm -rf /tmp/t-$v; mkdir /tmp/t-$v; tar cf - --exclude=./build-gpu --exclude=./.git --exclude=./build --exclude=./build-tsan --exclude=./build-asan --exclude=./gpu-check-out . | tar xf - -C /tmp/t-$v; done
(cd /tmp/t-nh && { patch -p1 -s < docs/benchmarks/findings/h100-2026-12-07/caller-copies-nothing/nh.patch || git apply docs/benchmarks/findings/h100-2026-12-07/caller-copies-nothing/nh.patch; }) || exit 1
diff src/engine.c /tmp/t-nh/src/engine.c > $r/nh.diff
for v in head nh; do
  ( cmake -S /tmp/t-$v -B /tmp/b-$v -DCMAKE_BUILD_TYPE=Release > $r/build-$v.log 2>&1 && cmake --build /tmp/b-$v -j 8 --target pinstage-bench >> $r/build-$v.log 2>&1 ) &
done
wait
echo "built +$(( $(date +%s) - t0 ))s" >> $r/machine.txt
for round in 1 2; do
  o="head nh"; [ $round = 2 ] && o="nh head"
  for v in $o; do for c in 4M:8 4M:0; do
    t=$(echo $c | tr -d ':')
    /tmp/b-$v/tools/pinstage-bench --quiet --sizes 64M --direction both --paths engine,floor --engine $c --budget 1.5 --json $r/engine$t-$v-$round.json -o $r/engine$t-$v-$round.txt
  done; done
done
pack
for round in 1 2 3 4 5; do
  o="head nh"; [ $((round % 2)) = 0 ] && o="nh head"
  for v in $o; do
    /tmp/b-$v/tools/pinstage-bench --quiet --sizes 4915200,64M --direction both --paths auto,floor --budget 2 --json $r/auto-$v-$round.json -o $r/auto-$v-$round.txt
  done
  pack; echo "round $round +$(( $(date +%s) - t0 ))s" >> $r/machine.txt
done
python3 - <<'PY'
import json,glob,collections
res=collections.defaultdict(list)
for f in sorted(glob.glob('/tmp/nohelp/*-*.json')):
    kind,v,rnd=f.split('/')[-1][:-5].split('-')
    m={(x['direction'],x['bytes'],x['path']):x for x in json.load(open(f))['results']}
    for (d,b,p),x in sorted(m.items()):
        if p in('auto','engine'):
            fl=m[(d,b,'floor')]['median_us']
            res[(kind,d,b,v)].append('%.3f'%(fl/x['median_us']))
for k,v in sorted(res.items()): print(*k, ' '.join(v))
PY
cat $r/machine.txt
echo "$name; all done +$(( $(date +%s) - t0 ))s"
