# After PyTorch's parallel CPU copy, how long do its OpenMP threads keep the CPUs, and what does
# that do to pinstage's upload in the same process?  usage: spin.py [BYTES]  (default 4915200)
# Run it under different OMP_WAIT_POLICY / GOMP_SPINCOUNT / OMP_NUM_THREADS settings (run.sh).
import os
import statistics as st
import sys
import time

import torch
import pinstage

n = int(sys.argv[1]) if len(sys.argv) > 1 else 4915200
env = {k: os.environ.get(k) for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS")}
print(f"env {env}, torch threads {torch.get_num_threads()}, bytes {n}")
print([x for x in torch.__config__.parallel_info().splitlines() if "OpenMP" in x or "backend" in x.lower()][:4])
dev = torch.device("cuda", 0)
src = torch.randint(0, 256, (n,), dtype=torch.uint8)
a = src.numpy()
d = torch.empty(n, dtype=torch.uint8, device=dev)
pinned = torch.empty(n, dtype=torch.uint8, pin_memory=True)
scratch = torch.empty(n, dtype=torch.uint8)
stream = torch.cuda.current_stream()
buf = pinstage.Buffer()
clock = time.perf_counter_ns


def copy_in():  # PyTorch's pinned copy-in: a parallel CPU copy, then one DMA
    pinned.copy_(src)
    d.copy_(pinned, non_blocking=True)
    stream.synchronize()


def cpu_op():  # PyTorch's parallel CPU copy alone
    scratch.copy_(src)


def ps():
    buf.upload(d, a)


def pageable():
    d.copy_(src)
    stream.synchronize()


def timed(fn, k):
    out = []
    for _ in range(k):
        t = clock()
        fn()
        out.append((clock() - t) / 1e3)
    return out


pinstage.set_adaptive(False)
timed(ps, 50)
timed(copy_in, 50)
timed(pageable, 20)

# The process's CPU time while its only running thread sleeps, right after each path.
for name, fn in (("torch copy-in", copy_in), ("pinstage upload", ps), ("torch pageable", pageable)):
    timed(fn, 30)
    c0 = time.process_time()
    time.sleep(0.005)
    c1 = time.process_time()
    time.sleep(0.045)
    c2 = time.process_time()
    print(f"after {name}: CPU in the next 5 ms {1e3 * (c1 - c0):.1f} ms, in the 45 ms after {1e3 * (c2 - c1):.1f} ms")

# What PyTorch's own CPU op costs back to back and after 20 ms idle (the policy's price).
warm = timed(cpu_op, 100)
cold = []
for _ in range(30):
    time.sleep(0.02)
    cold += timed(cpu_op, 1)
print(f"torch CPU copy of the size: back to back median {st.median(warm):.0f} us, after 20 ms idle {st.median(cold):.0f} us")

# pinstage's engine (adaptation off) after a gap behind 30 of PyTorch's copy-ins.
for gap_ms in (0, 2, 10, 50):
    rows = []
    for _ in range(5):
        timed(copy_in, 30)
        if gap_ms:
            time.sleep(gap_ms / 1e3)
        rows += timed(ps, 20)
    first = [rows[i] for i in range(len(rows)) if i % 20 < 5]
    print(f"adaptive off: pinstage upload {gap_ms:>2} ms after 30 copy-ins: median {st.median(rows):.0f} us, "
          f"first 5 of each 20: {st.median(first):.0f} us")
alone = st.median(timed(ps, 100))
print(f"alone, back to back: pinstage upload {alone:.0f} us, copy-in {st.median(timed(copy_in, 100)):.0f} us, "
      f"pageable {st.median(timed(pageable, 50)):.0f} us")

# Adaptation on: which route the upload takes right after PyTorch's copy-ins.
pinstage.set_adaptive(True)
pinstage.route_reset()
timed(ps, 50)
shares = []
for rep in range(10):
    timed(copy_in, 100)
    s0 = buf.stats().pageable_transfers
    r = timed(ps, 100)
    shares.append(buf.stats().pageable_transfers - s0)
    if rep % 3 == 0:
        print(f"adaptive on, block {rep}: upload median {st.median(r):.0f} us, pageable route {shares[-1]}/100")
print(f"adaptive on: pageable route per block of 100 right after 100 copy-ins: {shares}")
