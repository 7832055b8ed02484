#!/usr/bin/env bash
set -u
r=/tmp/dma-probe-run; rm -rf $r; mkdir -p $r
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; lscpu | grep -E 'Model name|^CPU\(s\)'; } > $r/machine.txt 2>&1
gcc -O2 -pthread docs/benchmarks/findings/h100-2026-12-07/dma-probe/dma-probe.c -ldl -o /tmp/dma-probe || exit 1
/tmp/dma-probe 30 > $r/dma-probe.txt 2>&1; echo "probe rc=$?" >> $r/times.txt
tar czf $OUT/dma-probe-run.tgz -C /tmp dma-probe-run
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release > $r/build.log 2>&1 && cmake --build build-gpu -j 16 --target pinstage-bench >> $r/build.log 2>&1
B=build-gpu/tools/pinstage-bench
for i in 1 2; do $B --quiet --sizes 64M --direction both --paths pageable,auto,resident,floor --json $r/bench64-$i.json -o $r/bench64-$i.txt; done
tar czf $OUT/dma-probe-run.tgz -C /tmp dma-probe-run
cat $r/machine.txt $r/dma-probe.txt; grep -E "^(h2d|d2h)" $r/bench64-*.txt
