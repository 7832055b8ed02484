#!/usr/bin/env bash
# Where the CPU of concurrent transfers goes (concurrent-cpu.c): 1, 4 and 8 threads, 4.7 MiB and
# 64 MiB, both directions, through the driver's pageable path (pageable), pinstage as
# pinstage_buffer_upload/download run it (auto), and auto with 4 workers (pool4), with none
# (pool0: each caller copies alone) and with workers that park at once after a transfer (spin0),
# the tree with caller-nap.patch (nap: beside other transfers, a caller with nothing to copy
# naps after 20 us of waiting instead of spinning) and with seated-nap.patch too (nap2: so do the
# workers seated in its job). Two passes, the second in reverse order. Prepared, not run on a GPU
# (283 s on the emulated driver). From the repository root; output $OUT/concurrent-cpu.tgz.
set -u
t0=$(date +%s)
r=/tmp/concurrent-cpu; rm -rf $r; mkdir -p $r
pack() { tar czf $OUT/concurrent-cpu.tgz -C /tmp concurrent-cpu 2>/dev/null; }
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; lscpu | grep -E 'Model name|^CPU\(s\)|NUMA node\(s\)'; } > $r/machine.txt 2>&1
root=$PWD; here=docs/benchmarks/findings/h100-2026-12-08/unmeasured
for v in nap nap2; do
  rm -rf /tmp/t-$v; mkdir /tmp/t-$v
  tar cf - --exclude=./build-gpu --exclude=./.git --exclude=./build --exclude=./gpu-check-out . | tar xf - -C /tmp/t-$v
  ( cd /tmp/t-$v && patch -p1 < $root/$here/caller-nap.patch && if [ $v = nap2 ]; then patch -p1 < $root/$here/seated-nap.patch; fi ) >> $r/patch.log 2>&1 || { cat $r/patch.log; exit 1; }
done
for v in cc nap nap2; do
  src=.; [ $v != cc ] && src=/tmp/t-$v
  cmake -S $src -B /tmp/b-$v -DCMAKE_BUILD_TYPE=Release > $r/build-$v.log 2>&1 && cmake --build /tmp/b-$v -j 16 --target pinstage >> $r/build-$v.log 2>&1 || { tail $r/build-$v.log; exit 1; }
  gcc -O2 -pthread -Iinclude $here/concurrent-cpu.c -L/tmp/b-$v -lpinstage -Wl,-rpath,/tmp/b-$v -o /tmp/concurrent-cpu-$v || exit 1
done
variant() { # label: environment and probe
  case $1 in
  nap) echo PSX_NONE=1 /tmp/concurrent-cpu-nap ;; nap2) echo PSX_NONE=1 /tmp/concurrent-cpu-nap2 ;;
  pageable) echo PSX_ROUTE=pageable /tmp/concurrent-cpu-cc ;; auto) echo PSX_NONE=1 /tmp/concurrent-cpu-cc ;;
  pool4) echo PSX_POOL=4 /tmp/concurrent-cpu-cc ;; pool0) echo PSX_POOL=0 /tmp/concurrent-cpu-cc ;;
  spin0) echo PSX_SPIN=0 /tmp/concurrent-cpu-cc ;;
  esac
}
for pass in 1 2; do
  vs="pageable auto nap nap2 pool4 pool0 spin0"; [ $pass = 2 ] && vs="spin0 pool0 pool4 nap2 nap auto pageable"
  for size in 4915200 67108864; do
    for dir in h2d d2h; do
      for n in 1 4 8; do
        for v in $vs; do
          env $(variant $v) $n $size $dir 0.6 $v >> $r/pass-$pass.txt 2>&1
        done
      done
    done
    pack
  done
  echo "pass $pass +$(( $(date +%s) - t0 ))s" >> $r/machine.txt
done
pack
cat $r/machine.txt
cat $r/pass-1.txt $r/pass-2.txt
echo "all done +$(( $(date +%s) - t0 ))s"
