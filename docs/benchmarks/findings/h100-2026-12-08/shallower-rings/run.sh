#!/usr/bin/env bash
# Shallower upload rings: head (4 slots) against 3 and 2 slots (s3, s2), and head with uniform 4 MiB
# upload chunks, no ramp at either end (nr), fresh processes. Prepared on
# 2026-12-07 after whole-upload/, not run (the session's device time ran out). From the repository root.
set -u
t0=$(date +%s)
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
r=/tmp/slots; rm -rf $r; mkdir -p $r
pack() { tar czf $OUT/slots.tgz -C /tmp slots 2>/dev/null; }
{ echo "$name"; lscpu | grep -E 'Model name|^CPU\(s\)'; echo "engine.c $(sha1sum src/engine.c | cut -c1-12)"; } > $r/machine.txt
for v in head s3 s2 nr; do rm -rf /tmp/t-$v; mkdir /tmp/t-$v; tar cf - --exclude=./build-gpu --exclude=./.git --exclude=./build --exclude=./build-tsan --exclude=./build-asan --exclude=./gpu-check-out . | tar xf - -C /tmp/t-$v; done
sed -i 's/^#define PS_ENGINE_SLOTS 4$/#define PS_ENGINE_SLOTS 3/' /tmp/t-s3/src/policy.h
sed -i 's/^#define PS_ENGINE_SLOTS 4$/#define PS_ENGINE_SLOTS 2/' /tmp/t-s2/src/policy.h
sed -i 's/if (s->n < 2 || first >= chunk || (s->fits \&\& !ramp_if_fits)) return;/if (s->n < 2 || first >= chunk || dir == PS_H2D || (s->fits \&\& !ramp_if_fits)) return;/' /tmp/t-nr/src/engine.c
for v in s3 s2; do diff src/policy.h /tmp/t-$v/src/policy.h >> $r/machine.txt; done
diff src/engine.c /tmp/t-nr/src/engine.c >> $r/machine.txt
for v in head s3 s2 nr; do
  ( cmake -S /tmp/t-$v -B /tmp/b-$v -DCMAKE_BUILD_TYPE=Release > $r/build-$v.log 2>&1 && cmake --build /tmp/b-$v -j 5 --target pinstage-bench >> $r/build-$v.log 2>&1 ) &
done
wait
echo "built +$(( $(date +%s) - t0 ))s" >> $r/machine.txt
for round in 1 2 3 4; do
  o="head s3 s2 nr"; [ $round = 2 ] && o="nr s2 s3 head"; [ $round = 3 ] && o="s3 nr head s2"; [ $round = 4 ] && o="s2 head nr s3"
  for v in $o; do
    /tmp/b-$v/tools/pinstage-bench --quiet --sizes 4915200,64M --direction h2d --paths auto,floor --budget 2 --json $r/auto-$v-$round.json -o $r/auto-$v-$round.txt
  done
  pack; echo "round $round +$(( $(date +%s) - t0 ))s" >> $r/machine.txt
done
for v in head s3 s2 nr; do
  /tmp/b-$v/tools/pinstage-bench --quiet --cold --sizes 64M --direction h2d --paths auto,floor --budget 2 --json $r/cold-$v-1.json -o $r/cold-$v-1.txt
done
pack
# Timelines of 64 MiB uploads through auto, with every worker and with 3 (4 copying threads): when
# each thread joined, how long its blocks took, whether the DMA queue ran dry.
for v in head s2; do for p in 0 3; do a=""; [ $p != 0 ] && a="--pool-threads $p"
  PINSTAGE_TRACE=/tmp/trace-$v-p$p.bin /tmp/b-$v/tools/pinstage-bench --quiet --sizes 64M --direction h2d --paths auto,floor --budget 1 $a --json $r/traced-$v.p$p-1.json -o $r/traced-$v.p$p-1.txt
  /tmp/b-$v/tools/pinstage-bench --trace /tmp/trace-$v-p$p.bin > $r/trace-$v-p$p-summary.txt 2>&1
done; done
pack
python3 - <<'PY'
import json,glob,collections
res=collections.defaultdict(list)
for f in sorted(glob.glob('/tmp/slots/*-*.json')):
    kind,v,rnd=f.split('/')[-1][:-5].split('-')
    if kind=='traced': continue
    m={(x['direction'],x['bytes'],x['path']):x for x in json.load(open(f))['results']}
    for (d,b,p),x in sorted(m.items()):
        if p=='auto':
            res[(kind,b,v)].append('%.3f(%s)'%(m[(d,b,'floor')]['median_us']/x['median_us'], x.get('engine_threads','-')))
for k,v in sorted(res.items()): print(*k, ' '.join(v))
PY
cat $r/machine.txt
echo "$name; all done +$(( $(date +%s) - t0 ))s"
