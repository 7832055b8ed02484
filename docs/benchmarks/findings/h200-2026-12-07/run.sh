#!/usr/bin/env bash
# On an H200: the conditions run of the tree (the targets). On anything else: see below.
set -u
t0=$(date +%s)
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$name" in
*H200*)
  r=/tmp/cond; rm -rf $r; mkdir -p $r
  pack() { tar czf $OUT/cond.tgz -C /tmp cond 2>/dev/null; }
  { nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current,clocks.sm --format=csv 2>&1
    lscpu | grep -E 'Model name|^CPU\(s\)|NUMA node\(s\)'; echo "engine.c $(sha1sum src/engine.c | cut -c1-12)"; } > $r/machine.txt
  cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DPINSTAGE_TEST_DRIVER=real > $r/build.log 2>&1 && cmake --build build-gpu -j 16 >> $r/build.log 2>&1 || { tail -20 $r/build.log; exit 1; }
  python3 -m pip install --no-build-isolation --quiet --target /tmp/site ./python > $r/pip.log 2>&1 || echo pipfail >> $r/times.txt
  echo "built +$(( $(date +%s) - t0 ))s" >> $r/times.txt
  build-gpu/tools/pinstage-bench --quiet --conditions --processes 10 -o $r/conditions.txt --json $r/conditions.json; echo "conditions rc=$? +$(( $(date +%s) - t0 ))s" >> $r/times.txt; pack
  PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 python3 bench/peers.py --fresh 10 --sizes 4915200,64M --paths pinstage,torch-copy-in --budget 1 -o $r/peers_fresh.json 2> $r/peers.log
  echo "peers rc=$? +$(( $(date +%s) - t0 ))s" >> $r/times.txt
  python3 bench/conditions.py $r/conditions.json $r/peers_fresh.json --plot $r/conditions.png > $r/conditions-targets.txt 2> $r/plot.log
  pack; cat $r/times.txt
  echo "met: $(grep -c '| yes |' $r/conditions-targets.txt), missed: $(grep -c '| \*\*no\*\* |' $r/conditions-targets.txt)"
  grep '\*\*no\*\*' $r/conditions-targets.txt | cut -c1-220
  grep 'fresh' $r/conditions-targets.txt | cut -c1-220
  ;;
*)
  # Anything else: (1) uploads through four rings: head = 4 slots, chunks of at most 8 MiB; u8 = 8
  # slots; u8c2 = 8 slots of at most 2 MiB. (2) The probe spacing:
  # head against nospace (PROBE_SPACING 0: probes as before), means and medians at 64 and 256 MiB,
  # back to back and paced. (3) head's suite on the real driver.
  r=/tmp/uring; rm -rf $r; mkdir -p $r
  pack() { tar czf $OUT/uring.tgz -C /tmp uring 2>/dev/null; }
  { echo "$name"; lscpu | grep -E 'Model name|^CPU\(s\)'; echo "engine.c $(sha1sum src/engine.c | cut -c1-12), adapt.c $(sha1sum src/adapt.c | cut -c1-12)"; } > $r/machine.txt
  for v in head u8 u8c2 nospace; do rm -rf /tmp/t-$v; mkdir /tmp/t-$v; tar cf - --exclude=./build-gpu --exclude=./.git --exclude=./build --exclude=./build-tsan --exclude=./.scratch --exclude=./gpu-check-out . | tar xf - -C /tmp/t-$v; done
  sed -i 's/^#define PS_ENGINE_SLOTS 4$/#define PS_ENGINE_SLOTS 8/' /tmp/t-u8/src/policy.h /tmp/t-u8c2/src/policy.h
  sed -i 's/^#define PS_ENGINE_MAX_CHUNK ((size_t)8 << 20)$/#define PS_ENGINE_MAX_CHUNK ((size_t)2 << 20)/' /tmp/t-u8c2/src/policy.h
  sed -i 's/^#define PROBE_SPACING 32u$/#define PROBE_SPACING 0u/' /tmp/t-nospace/src/adapt.c
  for v in u8 u8c2; do echo "$v: $(grep -E '^#define PS_ENGINE_(SLOTS|MAX_CHUNK) ' /tmp/t-$v/src/policy.h | tr '\n' ' ')" >> $r/machine.txt; done
  echo "nospace: $(grep -E '^#define PROBE_SPACING' /tmp/t-nospace/src/adapt.c)" >> $r/machine.txt
  for v in head u8 u8c2 nospace; do
    ( cmake -S /tmp/t-$v -B /tmp/b-$v -DCMAKE_BUILD_TYPE=Release > $r/build-$v.log 2>&1 && cmake --build /tmp/b-$v -j 3 --target pinstage-bench >> $r/build-$v.log 2>&1 ) &
  done
  ( cmake -S /tmp/t-head -B /tmp/b-real -DCMAKE_BUILD_TYPE=Release -DPINSTAGE_TEST_DRIVER=real > $r/build-real.log 2>&1 && cmake --build /tmp/b-real -j 6 >> $r/build-real.log 2>&1 ) &
  wait
  echo "built +$(( $(date +%s) - t0 ))s" >> $r/machine.txt
  for round in 1 2; do
    o="head nospace"; [ $round = 2 ] && o="nospace head"
    for v in $o; do
      /tmp/b-$v/tools/pinstage-bench --quiet --sizes 64M,256M --direction both --paths auto,floor --budget 4 --json $r/probe-$v-$round.json -o $r/probe-$v-$round.txt
      /tmp/b-$v/tools/pinstage-bench --quiet --paced 5000 --sizes 64M --direction both --paths auto,floor --budget 3 --json $r/paced-$v-$round.json -o $r/paced-$v-$round.txt
    done
  done
  pack; echo "probes done +$(( $(date +%s) - t0 ))s" >> $r/machine.txt
  ctest --test-dir /tmp/b-real --output-on-failure -j 1 > $r/ctest-real.log 2>&1; echo "head ctest rc=$?" >> $r/machine.txt
  pack
  for v in head u8 u8c2; do
    for c in 4M; do
      /tmp/b-$v/tools/pinstage-bench --quiet --sizes 64M --direction h2d --paths engine,floor --engine $c:8 --budget 1.5 --json $r/engine$c-$v.json -o $r/engine$c-$v.txt
    done
  done
  for round in 1 2 3; do
    o="head u8 u8c2"; [ $round = 2 ] && o="u8c2 head u8"; [ $round = 3 ] && o="u8 u8c2 head"
    for v in $o; do
      /tmp/b-$v/tools/pinstage-bench --quiet --sizes 4915200,64M --direction h2d --paths auto,floor --budget 2 --json $r/auto-$v-$round.json -o $r/auto-$v-$round.txt
    done
  done
  pack; echo "rings done +$(( $(date +%s) - t0 ))s" >> $r/machine.txt
  pack
  python3 - <<'PY'
import json,glob,collections
res=collections.defaultdict(list)
for f in sorted(glob.glob('/tmp/uring/*-*.json')):
    k=f.split('/')[-1][:-5]
    kind,v=k.split('-')[0],k.split('-')[1]
    m={(x['direction'],x['bytes'],x['path']):x for x in json.load(open(f))['results']}
    for (d,b,p),x in sorted(m.items()):
        if p in('auto','engine'):
            fl=m[(d,b,'floor')]['median_us']
            extra='' if kind in('auto',) or kind.startswith('engine') else ' mean %.3f share %.3f' % (fl/x['mean_us'], x.get('pageable_share',-1))
            res[(kind,v,d,b)].append('%.3f (%.1f us)%s'%(fl/x['median_us'],x['median_us'],extra))
for k,v in sorted(res.items()): print(*k, ' | '.join(v))
PY
  tail -3 $r/ctest-real.log; cat $r/machine.txt
  ;;
esac
echo "$name; all done +$(( $(date +%s) - t0 ))s"
