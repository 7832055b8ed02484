#!/usr/bin/env bash
set -u
r=/tmp/pipe-probe-run; rm -rf $r; mkdir -p $r
pack() { tar czf $OUT/pipe-probe-run.tgz -C /tmp pipe-probe-run; }
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; lscpu | grep -E 'Model name|^CPU\(s\)|NUMA node\(s\)'; git log --oneline -1; } > $r/machine.txt 2>&1
gcc -O2 -pthread docs/benchmarks/findings/h100-2026-12-07/pipe-probe/pipe-probe.c -ldl -o /tmp/pipe-probe || exit 1
/tmp/pipe-probe 30 > $r/pipe-probe.txt 2>&1; echo "probe rc=$?" >> $r/times.txt; pack
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release > $r/build.log 2>&1 && cmake --build build-gpu -j 16 --target pinstage-bench >> $r/build.log 2>&1
B=build-gpu/tools/pinstage-bench
PINSTAGE_TRACE=$r/trace64.bin $B --quiet --sizes 64M --direction both --paths pageable,auto,resident,floor --json $r/bench64.json -o $r/bench64.txt
$B --trace $r/trace64.bin > $r/trace64-summary.txt 2>&1
pack
cat $r/machine.txt $r/pipe-probe.txt; grep -E "^(h2d|d2h)" $r/bench64.txt; head -40 $r/trace64-summary.txt
