#!/usr/bin/env bash
# The runs behind README.txt, on the GPU machine, with the Python module installed on PYTHONPATH
# (scripts/gpu-check puts it in gpu-check-out/python-site). Writes into $1 (default .).
set -u
out=${1:-.}
here=$(cd "$(dirname "$0")" && pwd)
root=$here/../../../..
mkdir -p "$out"
for e in "" OMP_WAIT_POLICY=PASSIVE GOMP_SPINCOUNT=10000 OMP_NUM_THREADS=8; do
  env $e python3 "$here/spin.py" > "$out/spin${e:+-${e/=/-}}.txt" 2>&1
done
python3 "$here/helpers.py" 14 0 > "$out/helpers.txt" 2>&1
PINSTAGE_CPUS=32 python3 "$here/helpers.py" 14 8 4 > "$out/helpers-PINSTAGE_CPUS-32.txt" 2>&1
peers() { python3 "$root/bench/peers.py" --fresh 3 --sizes 4915200 --paths pinstage,torch-copy-in --budget 0.5 "$@"; }
peers --settle 0 -o "$out/peers-settle-0.json" 2>> "$out/peers.log"
peers --after-op -o "$out/peers-after-op.json" 2>> "$out/peers.log"
for e in OMP_WAIT_POLICY=PASSIVE GOMP_SPINCOUNT=10000 OMP_NUM_THREADS=8; do
  env $e python3 "$root/bench/peers.py" --fresh 3 --sizes 4915200 --paths pinstage,torch-copy-in --budget 0.5 \
    --after-op -o "$out/peers-after-op-${e/=/-}.json" 2>> "$out/peers.log"
done
