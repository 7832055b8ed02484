#!/usr/bin/env bash
# 64 MiB: main's governor against the descent (working tree), and the descent with 8 slots; fixed threads beside.
# Run from the repository root at e6df622 with descent.patch applied (git apply descent.patch).
set -u
t0=$(date +%s)
r=/tmp/governor-slots; rm -rf $r; mkdir -p $r
pack() { tar czf $OUT/governor-slots.tgz -C /tmp governor-slots; }
stamp() { echo "$1 +$(( $(date +%s) - t0 ))s" >> $r/times.txt; pack; }
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; lscpu | grep -E 'Model name|^CPU\(s\)'; } > $r/machine.txt 2>&1
for v in main s8; do rm -rf /tmp/t-$v; mkdir /tmp/t-$v; tar cf - --exclude=./build-gpu --exclude=./.git --exclude=./build --exclude=./build-tsan . | tar xf - -C /tmp/t-$v; done
git show e6df622:src/governor.c > /tmp/t-main/src/governor.c; git show e6df622:src/governor.h > /tmp/t-main/src/governor.h
sed -i 's/^#define PS_ENGINE_SLOTS 4$/#define PS_ENGINE_SLOTS 8/' /tmp/t-s8/src/policy.h
{ grep -c descend /tmp/t-main/src/governor.c src/governor.c /tmp/t-s8/src/governor.c; grep -n "define PS_ENGINE_SLOTS" /tmp/t-s8/src/policy.h src/policy.h; } >> $r/machine.txt
( cmake -S . -B /tmp/b-var -DCMAKE_BUILD_TYPE=Release -DPINSTAGE_TEST_DRIVER=real > $r/build-var.log 2>&1 && cmake --build /tmp/b-var -j 8 >> $r/build-var.log 2>&1; echo "var rc=$?" >> $r/times.txt ) &
for v in main s8; do
  ( cmake -S /tmp/t-$v -B /tmp/b-$v -DCMAKE_BUILD_TYPE=Release > $r/build-$v.log 2>&1 && cmake --build /tmp/b-$v -j 4 --target pinstage-bench >> $r/build-$v.log 2>&1; echo "$v rc=$?" >> $r/times.txt ) &
done
wait
stamp built
for e in 4M:3 4M:4 4M:6 4M:8 4M:0; do
  /tmp/b-main/tools/pinstage-bench --quiet --sizes 64M --direction both --paths engine,floor --engine $e --budget 1 --json $r/fixed-$e.json -o $r/fixed-$e.txt
done
stamp fixed
for round in 1 2 3; do
  case $round in 1) o="main var s8";; 2) o="s8 var main";; 3) o="var main";; esac
  for v in $o; do
    /tmp/b-$v/tools/pinstage-bench --quiet --sizes 64M --direction both --paths auto,floor --budget 3 --json $r/auto-$v-$round.json -o $r/auto-$v-$round.txt
  done
  stamp "round $round"
done
ctest --test-dir /tmp/b-var --output-on-failure -j 1 > $r/ctest-real.log 2>&1; stamp "ctest rc=$?"
python3 - <<'PY'
import json,glob
for f in sorted(glob.glob('/tmp/governor-slots/*.json')):
    rows=json.load(open(f))['results']
    m={(x['direction'],x['path']):x['median_us'] for x in rows}
    print(f.split('/')[-1][:-5], ' '.join('%s %.3f (%.0f us)'%(d, m[(d,'floor')]/m[(d,p)], m[(d,p)]) for d in ('h2d','d2h') for p in ('engine','auto') if (d,p) in m))
PY
tail -3 $r/ctest-real.log; cat $r/times.txt
