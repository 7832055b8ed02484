#!/usr/bin/env bash
# On the H200, right after gpu-check on the same machine (its build-gpu is the tree at 87c99b0):
# the tree with PROBE_SPACING 0 (probes paced as before the spacing) against it, 64 and 256 MiB,
# alternating head, ns, head, ns. Files p-<build>-<n>.json (n counts the files written before).
t0=$(date +%s); r=/tmp/probe; rm -rf $r /tmp/t-ns; mkdir -p $r /tmp/t-ns
tar cf - --exclude=./build-gpu --exclude=./.git --exclude=./build --exclude=./build-tsan --exclude=./build-asan --exclude=./.scratch --exclude=./gpu-check-out . | tar xf - -C /tmp/t-ns
sed -i 's/^#define PROBE_SPACING 32u$/#define PROBE_SPACING 0u/' /tmp/t-ns/src/adapt.c
(cmake -S /tmp/t-ns -B /tmp/b-ns -DCMAKE_BUILD_TYPE=Release && cmake --build /tmp/b-ns -j 16 --target pinstage-bench) > $r/build.log 2>&1
for v in head ns head ns; do
  b=build-gpu; [ $v = ns ] && b=/tmp/b-ns; n=$(ls $r | grep -c "^p-$v")
  timeout 40 $b/tools/pinstage-bench --quiet --sizes 64M,256M --direction both --paths auto,floor --budget 3 --json $r/p-$v-$n.json -o $r/p-$v-$n.txt
done
