#!/usr/bin/env bash
# Uploads that hold the whole transfer (fit.patch: 64 MiB fits the stage, every chunk open at once,
# as the simplest pipeline's) and fit with a caller that copies nothing (nh-on-fit.patch on top: fitnh),
# against head; fresh processes. As run on 2026-12-07 22:23 UTC from .scratch; the patches' paths are
# their committed places.
set -u
t0=$(date +%s)
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
r=/tmp/fit; rm -rf $r; mkdir -p $r
pack() { tar czf $OUT/fit.tgz -C /tmp fit 2>/dev/null; }
{ echo "$name"; lscpu | grep -E 'Model name|^CPU\(s\)'; echo "engine.c $(sha1sum src/engine.c | cut -c1-12)"; } > $r/machine.txt
for v in head fit fitnh; do rm -rf /tmp/t-$v; mkdir /tmp/t-$v; tar cf - --exclude=./build-gpu --exclude=./.git --exclude=./build --exclude=./build-tsan --exclude=./build-asan --exclude=./gpu-check-out . | tar xf - -C /tmp/t-$v; done
(cd /tmp/t-fit/src && patch -s -p1 < $OLDPWD/docs/benchmarks/findings/h100-2026-12-07/whole-upload/fit.patch) || exit 1
(cd /tmp/t-fitnh/src && patch -s -p1 < $OLDPWD/docs/benchmarks/findings/h100-2026-12-07/whole-upload/fit.patch && patch -s -p1 < $OLDPWD/docs/benchmarks/findings/h100-2026-12-07/whole-upload/nh-on-fit.patch) || exit 1
for v in head fit fitnh; do
  ( cmake -S /tmp/t-$v -B /tmp/b-$v -DCMAKE_BUILD_TYPE=Release > $r/build-$v.log 2>&1 && cmake --build /tmp/b-$v -j 5 --target pinstage-bench >> $r/build-$v.log 2>&1 ) &
done
wait
echo "built +$(( $(date +%s) - t0 ))s" >> $r/machine.txt
runs="head:0 fit:0 fit:3 fit:7 fitnh:0 fitnh:4 fitnh:8"
for round in 1 2 3; do
  o=$(echo $runs | tr ' ' '\n'); [ $round = 2 ] && o=$(echo "$o" | tac); [ $round = 3 ] && o=$(echo "$o" | awk 'NR%2==0' ; echo "$o" | awk 'NR%2==1')
  for v in $o; do b=${v%:*}; p=${v#*:}; a=""; [ $p != 0 ] && a="--pool-threads $p"
    /tmp/b-$b/tools/pinstage-bench --quiet --sizes 4915200,64M --direction h2d --paths auto,floor --budget 2 $a --json $r/auto-$b.p$p-$round.json -o $r/auto-$b.p$p-$round.txt
  done
  pack; echo "round $round +$(( $(date +%s) - t0 ))s" >> $r/machine.txt
done
for v in head fit fitnh; do
  /tmp/b-$v/tools/pinstage-bench --quiet --cold --sizes 64M --direction h2d --paths auto,floor --budget 2 --json $r/cold-$v.p0-1.json -o $r/cold-$v.p0-1.txt
done
pack
python3 - <<'PY'
import json,glob,collections
res=collections.defaultdict(list)
for f in sorted(glob.glob('/tmp/fit/*-*.json')):
    kind,v,rnd=f.split('/')[-1][:-5].split('-')
    m={(x['direction'],x['bytes'],x['path']):x for x in json.load(open(f))['results']}
    for (d,b,p),x in sorted(m.items()):
        if p=='auto':
            res[(kind,b,v)].append('%.3f(%s)'%(m[(d,b,'floor')]['median_us']/x['median_us'], x.get('engine_threads','-')))
for k,v in sorted(res.items()): print(*k, ' '.join(v))
PY
cat $r/machine.txt
echo "$name; all done +$(( $(date +%s) - t0 ))s"
