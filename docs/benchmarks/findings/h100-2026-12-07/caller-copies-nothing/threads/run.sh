#!/usr/bin/env bash
# The device call right after ../run.sh on the same machine (2026-12-07 21:35 UTC), reusing its
# builds in /tmp/b-head and /tmp/b-nh: uploads through auto with fewer workers, fresh processes,
# three rounds in the order head, head-p3, nh, nh-p4, nh-p3 (-pN: --pool-threads N). Only the first
# eight JSON files came back (the device returns at most eight files a call); summary.txt is the
# script's printed table over all fifteen: auto's share of its process's floor, rounds 1, 2, 3.
ls /tmp/b-nh/tools/pinstage-bench /tmp/b-head/tools/pinstage-bench || exit 3; r=$OUT/p; mkdir -p $r; for round in 1 2 3; do for v in head:0 head:3 nh:0 nh:4 nh:3; do b=${v%:*}; p=${v#*:}; a=""; [ $p != 0 ] && a="--pool-threads $p"; /tmp/b-$b/tools/pinstage-bench --quiet --sizes 4915200,64M --direction h2d --paths auto,floor --budget 2 $a --json $r/$b-p$p-$round.json -o /dev/null; done; done; python3 - <<'PY'
import json,glob,collections,os
res=collections.defaultdict(list)
for f in sorted(glob.glob(os.environ['OUT']+'/p/*.json')):
    v,p,rnd=f.split('/')[-1][:-5].split('-')
    m={(x['direction'],x['bytes'],x['path']):x for x in json.load(open(f))['results']}
    for (d,b,pa),x in sorted(m.items()):
        if pa=='auto': res[(b,v+'-'+p)].append('%.3f'%(m[(d,b,'floor')]['median_us']/x['median_us']))
for k,v in sorted(res.items()): print(*k,' '.join(v))
PY
