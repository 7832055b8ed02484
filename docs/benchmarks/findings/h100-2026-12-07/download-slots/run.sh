#!/usr/bin/env bash
# download-slots.sh (the patch judged against main), then main's own suite on the real driver.
set -u
t0=$(date +%s)
bash docs/benchmarks/findings/h100-2026-12-07/download-slots/download-slots.sh 2>&1 | tail -45
echo "download-slots done +$(( $(date +%s) - t0 ))s"
r=/tmp/download-slots
( cmake -S . -B /tmp/b-main-real -DCMAKE_BUILD_TYPE=Release -DPINSTAGE_TEST_DRIVER=real && cmake --build /tmp/b-main-real -j 16 ) > $r/build-main-real.log 2>&1
ctest --test-dir /tmp/b-main-real --output-on-failure -j 1 > $r/ctest-real-main.log 2>&1; echo "main ctest rc=$?" >> $r/machine.txt
tar czf $OUT/download-slots.tgz -C /tmp download-slots
tail -3 $r/ctest-real-main.log; grep -A8 "a_winning\|follows_the" /tmp/b-main-real/Testing/Temporary/LastTest.log | head -20
echo "all done +$(( $(date +%s) - t0 ))s"
