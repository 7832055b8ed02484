# pinstage's engine in PyTorch's spin window: does it help to give the job more workers?
# usage: helpers.py WORKERS...  e.g. `helpers.py 14 0`; PINSTAGE_CPUS=32 makes the pool believe
# the machine has CPUs to spare, so that the workers are seated although the spinners hold them.
import os
import statistics as st
import sys
import time

import numpy
import torch
import pinstage

n = 4915200
print("kernel", os.uname().release, "torch threads", torch.get_num_threads(), "PINSTAGE_CPUS", os.environ.get("PINSTAGE_CPUS"))
dev = torch.device("cuda", 0)
src = torch.randint(0, 256, (n,), dtype=torch.uint8)
a = src.numpy()
o = numpy.empty(n, numpy.uint8)
d = torch.empty(n, dtype=torch.uint8, device=dev)
d.copy_(src)
pinned = torch.empty(n, dtype=torch.uint8, pin_memory=True)
host_out = torch.empty(n, dtype=torch.uint8)
stream = torch.cuda.current_stream()
clock = time.perf_counter_ns


def copy_in():
    pinned.copy_(src)
    d.copy_(pinned, non_blocking=True)
    stream.synchronize()


def copy_out():
    pinned.copy_(d, non_blocking=True)
    stream.synchronize()
    host_out.copy_(pinned)


buf = pinstage.Buffer()


def up():
    buf.upload(d, a)


def down():
    buf.download(o, d)


def timed(fn, k):
    out = []
    for _ in range(k):
        t = clock()
        fn()
        out.append((clock() - t) / 1e3)
    return out


def p90(xs):
    return sorted(xs)[int(0.9 * len(xs))]


pinstage.set_adaptive(False)
print("pool", pinstage.pool_info())
for k in [int(x) for x in sys.argv[1:]]:
    pinstage.pool_set_threads(k)
    res = []
    for torch_fn, fn in ((copy_in, up), (copy_out, down)):
        timed(fn, 20)
        window = []
        for _ in range(8):
            timed(torch_fn, 30)   # PyTorch's copies, its OpenMP team left spinning
            window += timed(fn, 20)
        time.sleep(0.05)
        alone = timed(fn, 60)
        res.append(f"{st.median(window):.0f} p90 {p90(window):.0f} (alone {st.median(alone):.0f} p90 {p90(alone):.0f})")
    print(f"{k:>2} workers: upload {res[0]:<30} download {res[1]}")
