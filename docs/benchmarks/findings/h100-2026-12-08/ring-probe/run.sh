#!/usr/bin/env bash
# ring-probe.c (uploads through a ring, without pinstage), then shallower-upload-rings.sh on the
# same machine. From the repository root.
set -u
d=docs/benchmarks/findings/h100-2026-12-07/unmeasured
r=/tmp/ring-probe-run; rm -rf $r; mkdir -p $r
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; lscpu | grep -E 'Model name|^CPU\(s\)|NUMA node\(s\)'; git log --oneline -1; } > $r/machine.txt 2>&1
gcc -O2 -pthread $d/ring-probe.c -ldl -o /tmp/ring-probe || exit 1
/tmp/ring-probe 30 > $r/ring-probe.txt 2>&1; echo "probe rc=$?" >> $r/machine.txt
tar czf $OUT/ring-probe-run.tgz -C /tmp ring-probe-run
cat $r/machine.txt $r/ring-probe.txt
bash $d/shallower-upload-rings.sh
