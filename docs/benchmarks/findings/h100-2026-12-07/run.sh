#!/usr/bin/env bash
# main at 535b832 through scripts/gpu-check; then the tiny-upload variants and the lazy lanes against main.
# .scratch/vZ: main with ../claim-lanes/unmeasured/lazy-lanes-over-abe158b.patch (its comment hunk left out);
# .scratch/vT2: main with tiny/variants.patch. Both were copies of the tree outside the repository.
set -u
t0=$(date +%s)
r=/tmp/r32; rm -rf $r; mkdir -p $r/seed $r/tiny
pack() { tar czf $OUT/r32.tgz -C /tmp r32 2>/dev/null; }
GPU_CHECK_DIR=$r/gpu-check GPU_CHECK_SOAK=200000 timeout 300 scripts/gpu-check > $r/gpu-check.out 2>&1; echo "gpu-check rc=$? +$(( $(date +%s) - t0 ))s" >> $r/times.txt
rm -rf $r/gpu-check/python-site; pack
( cmake -S .scratch/vZ -B /tmp/bZ -DCMAKE_BUILD_TYPE=Release > $r/buildZ.log 2>&1 && cmake --build /tmp/bZ -j 8 --target pinstage-bench >> $r/buildZ.log 2>&1 ) &
( cmake -S .scratch/vT2 -B /tmp/bT -DCMAKE_BUILD_TYPE=Release > $r/buildT.log 2>&1 && cmake --build /tmp/bT -j 8 --target pinstage-bench >> $r/buildT.log 2>&1 ) &
wait
L=build-gpu/tools/pinstage-bench; Z=/tmp/bZ/tools/pinstage-bench; X=/tmp/bT/tools/pinstage-bench
echo "built +$(( $(date +%s) - t0 ))s" >> $r/times.txt
T="--quiet --sizes 4K,16K,64K --direction h2d --paths pageable,pageable-async,auto,resident --reps 200 --budget 1"
for v in 0 1 2; do
  PS_EXP_TINY=$v $X $T --json $r/tiny/idle-v$v.json -o $r/tiny/idle-v$v.txt
  PS_EXP_TINY=$v $X $T --load cpu --json $r/tiny/cpu-v$v.json -o $r/tiny/cpu-v$v.txt
done
echo "tiny +$(( $(date +%s) - t0 ))s" >> $r/times.txt; pack
S="--quiet --sizes 150528,196608,4915200 --paths pageable,builtin,engine,floor"
for round in 1 2; do
  if [ $((round % 2)) = 1 ]; then order="L Z"; else order="Z L"; fi
  for v in $order; do eval b=\$$v; n=$([ $v = L ] && echo lanes || echo lazy); [ $(( $(date +%s) - t0 )) -lt 330 ] && $b $S --json $r/seed/$n-$round.json -o /dev/null; done
done
echo "end +$(( $(date +%s) - t0 ))s" >> $r/times.txt; pack
tail -25 $r/gpu-check.out; cat $r/times.txt
for f in $r/tiny/*.txt; do echo "== $f"; grep -E "^h2d" $f | cut -c1-90; done
