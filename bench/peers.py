#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""pinstage from Python beside what users would pick instead, PyTorch's and
CuPy's transfer paths, in the same process, measured with pinstage-bench's
method (wall clock around each whole call, finished with a stream
synchronize so every call ends with the data landed; median; each path in
blocks of consecutive calls, the blocks of all paths alternating in three
passes) and written in pinstage-bench's JSON schema (docs/benchmarks.md).

usage: peers.py [--sizes LIST | --sweep A:B] [--paths LIST] [--reps N] [--warmup N]
                [--budget S] [--device N] [--fresh N] [--settle MS] [--after-op] [-o FILE]

Paths (ratio_vs_pageable is against torch-pageable in the same run):
  torch-pageable     d.copy_(cpu) / cpu.copy_(d) with ordinary tensors
  torch-from-numpy   d.copy_(torch.from_numpy(a)) / torch.from_numpy(o).copy_(d)
  torch-pin-call     a pinned tensor made per call (PyTorch caches pinned blocks)
  torch-copy-in      a reused pinned tensor: copy in, non_blocking copy, sync (and the mirror)
  torch-resident     non_blocking copy from / into a reused pinned tensor, sync
  cupy-set-get       cupy ndarray.set(numpy) / ndarray.get(out=numpy)
  pinstage           pinstage.Buffer.upload(tensor, numpy) / .download(numpy, tensor)
  pinstage-devarray  the same into a pinstage.DeviceArray (no framework interface to read)
  pinstage-resident  upload_with (the fill writes nothing) / download_into
  pinstage-resident-devarray  the same with a pinstage.DeviceArray
and, timed from C inside the module in the same process (what a C program
pays for the same call): pinstage-c, pinstage-resident-c.

--fresh N runs the measurement in N fresh processes, one after another, and
writes every process's rows (with "process": i) to one file.

Each block of calls starts after --settle MS of sleep (default 20): after a
parallel CPU op, PyTorch's OpenMP team spins for about 10 ms on every CPU it
has (on the H200 machine: 60 ms of CPU in the 5 ms after its pinned copy-in),
and a path measured in that time finds no CPU free. --after-op measures that
time on purpose: before every call, untimed, PyTorch copies a tensor of the
transfer's size on the CPU, as a pipeline that preprocesses with PyTorch right
before its transfer (the *-c paths are left out then).
"""
import argparse
import datetime
import json
import os
import platform
import sys
import time

PASSES = 3
BLOCK_WARMUP = 3
SEED = [(112 * 112 * 3 * 4, "112x112x3 f32"), (128 * 128 * 3 * 4, "128x128x3 f32"),
        (640 * 640 * 3 * 4, "640x640x3 f32")]


def parse_size(text):
    scale = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}
    text = text.strip().rstrip("B").rstrip("i")
    if text and text[-1].upper() in scale:
        return int(float(text[:-1]) * scale[text[-1].upper()])
    return int(text)


def sizes_from(args):
    if args.sizes:
        return [(parse_size(s), "") for s in args.sizes.split(",")]
    if args.sweep:
        lo, hi = (parse_size(s) for s in args.sweep.split(":"))
        out, b = [], lo
        while b <= hi:
            out.append((b, ""))
            b *= 2
        return out
    return SEED


def quantile(sorted_values, q):
    """Linear interpolation between order statistics, as pinstage-bench does."""
    pos = q * (len(sorted_values) - 1)
    i = int(pos)
    j = min(i + 1, len(sorted_values) - 1)
    return sorted_values[i] + (sorted_values[j] - sorted_values[i]) * (pos - i)


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def make_paths(torch, cupy, numpy, pinstage, nbytes, dev):
    """Returns ({name: (h2d_fn, d2h_fn)}, state) for one size."""
    stream = torch.cuda.current_stream(dev)
    n = nbytes  # uint8 elements
    src = torch.randint(0, 256, (n,), dtype=torch.uint8)
    host_out = torch.empty(n, dtype=torch.uint8)
    d = torch.empty(n, dtype=torch.uint8, device=dev)
    pinned = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    pinned.copy_(src)
    scratch = torch.empty(n, dtype=torch.uint8)
    paths = {}

    def pageable_h2d():
        d.copy_(src)
        stream.synchronize()

    def pageable_d2h():
        host_out.copy_(d)
        stream.synchronize()

    def pin_call_h2d():
        p = src.pin_memory()
        d.copy_(p, non_blocking=True)
        stream.synchronize()

    def pin_call_d2h():
        p = torch.empty(n, dtype=torch.uint8, pin_memory=True)
        p.copy_(d, non_blocking=True)
        stream.synchronize()
        host_out.copy_(p)

    def copy_in_h2d():
        pinned.copy_(src)
        d.copy_(pinned, non_blocking=True)
        stream.synchronize()

    def copy_out_d2h():
        pinned.copy_(d, non_blocking=True)
        stream.synchronize()
        host_out.copy_(pinned)

    def resident_h2d():
        d.copy_(pinned, non_blocking=True)
        stream.synchronize()

    def resident_d2h():
        pinned.copy_(d, non_blocking=True)
        stream.synchronize()

    a_np = src.numpy()
    o_np = host_out.numpy()

    def from_numpy_h2d():
        d.copy_(torch.from_numpy(a_np))
        stream.synchronize()

    def from_numpy_d2h():
        torch.from_numpy(o_np).copy_(d)
        stream.synchronize()

    paths["torch-pageable"] = (pageable_h2d, pageable_d2h)
    paths["torch-from-numpy"] = (from_numpy_h2d, from_numpy_d2h)
    paths["torch-pin-call"] = (pin_call_h2d, pin_call_d2h)
    paths["torch-copy-in"] = (copy_in_h2d, copy_out_d2h)
    paths["torch-resident"] = (resident_h2d, resident_d2h)
    def cpu_op():
        # --after-op: a parallel CPU op of PyTorch's (a copy of the transfer's size) before each call
        scratch.copy_(src)

    state = {"d": d, "src": src, "host_out": host_out, "pinned": pinned, "cpu_op": cpu_op}
    if cupy is not None:
        a = src.numpy()
        o = numpy.empty(n, dtype=numpy.uint8)
        cd = cupy.empty(n, dtype=cupy.uint8)

        def cupy_h2d():
            cd.set(a)
            cupy.cuda.get_current_stream().synchronize()

        def cupy_d2h():
            cd.get(out=o)
            cupy.cuda.get_current_stream().synchronize()

        paths["cupy-set-get"] = (cupy_h2d, cupy_d2h)
        state.update(cd=cd, a=a, o=o)
    if pinstage is not None:
        # Each path its own buffer, as separate programs would have.
        buf, buf_dev, buf_res = pinstage.Buffer(), pinstage.Buffer(), pinstage.Buffer()
        dev_array = pinstage.DeviceArray(n)

        def ps_h2d():
            buf.upload(d, a_np)

        def ps_d2h():
            buf.download(o_np, d)

        def ps_dev_h2d():
            buf_dev.upload(dev_array, a_np)

        def ps_dev_d2h():
            buf_dev.download(o_np, dev_array)

        def noop(view):
            pass

        def ps_res_h2d():
            buf_res.upload_with(d, noop)

        def ps_res_d2h():
            buf_res.download_into(d)

        def ps_res_dev_h2d():
            buf_res.upload_with(dev_array, noop)

        def ps_res_dev_d2h():
            buf_res.download_into(dev_array)

        paths["pinstage"] = (ps_h2d, ps_d2h)
        paths["pinstage-devarray"] = (ps_dev_h2d, ps_dev_d2h)
        paths["pinstage-resident"] = (ps_res_h2d, ps_res_d2h)
        paths["pinstage-resident-devarray"] = (ps_res_dev_h2d, ps_res_dev_d2h)
        state.update(buf=buf, buf_res=buf_res, dev_array=dev_array, a_np=a_np, o_np=o_np,
                     route_buffers={"pinstage": buf, "pinstage-devarray": buf_dev})
    return paths, state


def moved_right(name, direction, state, torch, cupy):
    """After one call of a path: are the bytes where they belong?"""
    if name.startswith("pinstage-resident"):
        return True  # the fill writes nothing: the C suite checks these bytes
    if name == "pinstage-devarray":
        out = bytearray(state["dev_array"].nbytes)
        if direction == "h2d":
            state["dev_array"].copy_to_host(out)
            return bytes(out) == state["a_np"].tobytes()
        return state["o_np"].tobytes() == state["a_np"].tobytes()
    if direction == "h2d":
        if name.startswith("cupy"):
            return bool((cupy.asnumpy(state["cd"]) == state["a"]).all())
        return torch.equal(state["d"].cpu(), state["src"])
    if name.startswith("cupy"):
        return bool((state["o"] == state["a"]).all())
    if name == "torch-resident":
        return torch.equal(state["pinned"], state["src"])
    return torch.equal(state["host_out"], state["src"])


def poison(direction, state, cupy):
    """Before a check: the destination holds other bytes, the source the right ones."""
    if direction == "h2d":
        state["d"].fill_(7)
        if cupy is not None:
            state["cd"].fill(7)
    else:
        state["d"].copy_(state["src"])
        state["host_out"].fill_(7)
        state["pinned"].fill_(7)
        if "dev_array" in state:
            state["dev_array"].copy_from_host(state["a_np"])
        if cupy is not None:
            state["cd"].set(state["a"])
            state["o"].fill(7)


def time_blocks(fns, reps, route_buffers, settle_s, before=None, sleep=time.sleep, clock=time.perf_counter_ns):
    """pinstage-bench's method: each path in blocks of consecutive calls, the blocks of all paths
    alternating in PASSES passes, the first BLOCK_WARMUP calls of a block untimed. Every block
    starts after `settle_s` of sleep, so none runs while the last one's threads are still busy:
    after a parallel CPU op, PyTorch's OpenMP team spins on every CPU for about 10 ms (measured
    on the H200 machine), and the pool of a path measured then finds no CPU free. `before`, when
    given, runs untimed before every call (a pipeline's CPU work right before its transfer).
    Returns ({name: [us, ...]}, {name: calls that took the pageable route}); the route is read
    from the buffer's counters around each timed call, outside its timing (as pinstage-bench's
    pageable_share)."""
    samples = {name: [] for name in fns}
    pageable_calls = {name: 0 for name in fns}
    for p in range(PASSES):
        for name, fn in fns.items():
            counted = route_buffers.get(name)
            if settle_s > 0:
                sleep(settle_s)
            for j in range(BLOCK_WARMUP + reps // PASSES + (p < reps % PASSES)):
                if before:
                    before()
                counts = counted.stats().pageable_transfers if counted and j >= BLOCK_WARMUP else None
                t = clock()
                fn()
                elapsed = (clock() - t) / 1e3
                if j >= BLOCK_WARMUP:
                    samples[name].append(elapsed)
                if counts is not None:
                    pageable_calls[name] += counted.stats().pageable_transfers - counts
    return samples, pageable_calls


def measure(args, torch, cupy, numpy, pinstage, dev):
    """Every chosen path at every size, both directions: result rows."""
    results = []
    sizes = sizes_from(args)
    wanted = set(args.paths.split(",")) if args.paths else None
    for k, (nbytes, label) in enumerate(sizes):
        paths, state = make_paths(torch, cupy, numpy, pinstage, nbytes, dev)
        names = [p for p in paths if wanted is None or p in wanted or p == "torch-pageable"]
        for direction, idx in (("h2d", 0), ("d2h", 1)):
            print(f"[{k + 1}/{len(sizes)}] {direction} {nbytes} bytes", file=sys.stderr)
            for name in names:
                poison(direction, state, cupy)
                torch.cuda.synchronize()
                paths[name][idx]()
                torch.cuda.synchronize()
                if not moved_right(name, direction, state, torch, cupy):
                    raise SystemExit(f"peers.py: {name} {direction} moved wrong bytes")
            if direction == "h2d":
                state["pinned"].copy_(state["src"])  # resident uploads read it
            fns = {name: paths[name][idx] for name in names}
            before = state["cpu_op"] if args.after_op else None
            per_round = 0.0
            for name in names:
                t0 = time.perf_counter()
                for _ in range(args.warmup):
                    if before:
                        before()
                    fns[name]()
                per_round += (time.perf_counter() - t0) / max(args.warmup, 1)
            reps = args.reps
            if per_round > 0 and args.budget > 0:
                reps = max(10, min(reps, int(args.budget / per_round)))
            samples, pageable_calls = time_blocks(fns, reps, state.get("route_buffers", {}),
                                                  args.settle / 1e3, before)
            if pinstage is not None and not args.after_op and (wanted is None or "pinstage-c" in wanted):
                # The same calls timed from C inside the module: what C pays.
                host = state["a_np"] if direction == "h2d" else state["o_np"]
                samples["pinstage-c"] = state["buf"]._c_loop(state["d"], host, idx, reps)
                samples["pinstage-resident-c"] = state["buf_res"]._c_loop(state["d"], None, 2 + idx, reps)
            med = {}
            for name, values in samples.items():
                v = sorted(values)
                med[name] = (quantile(v, 0.5), v[0], quantile(v, 0.1), quantile(v, 0.9), len(v))
            for name, m in med.items():
                results.append({"direction": direction, "bytes": nbytes, "label": label, "path": name,
                                "reps": m[4], "median_us": round(m[0], 3), "min_us": round(m[1], 3),
                                "p10_us": round(m[2], 3), "p90_us": round(m[3], 3),
                                "gbps": round(nbytes / (m[0] * 1e3), 3),
                                "ratio_vs_pageable": round(med["torch-pageable"][0] / m[0], 4),
                                "emulated": False})
                if name in state.get("route_buffers", {}):
                    results[-1]["pageable_share"] = round(pageable_calls[name] / m[4], 4)
        del paths, state
        torch.cuda.empty_cache()
    return results


def fresh(args):
    """--fresh N: this script in N fresh processes, one after another."""
    import subprocess
    import tempfile
    rows, doc = [], None
    child = [a for a in sys.argv[1:]]
    at = child.index("--fresh")
    del child[at:at + 2]
    if "-o" in child:
        at = child.index("-o")
        del child[at:at + 2]
    for i in range(args.fresh):
        print(f"fresh process {i + 1} of {args.fresh}", file=sys.stderr)
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "rows.json")
            subprocess.run([sys.executable, os.path.abspath(__file__), *child, "-o", out], check=True)
            doc = json.load(open(out))
        for r in doc["results"]:
            rows.append(dict(r, process=i, condition="fresh-process"))
    doc["results"] = rows
    doc["context"]["command"] = " ".join(["peers.py"] + sys.argv[1:])
    doc["context"]["method"] += f"; {args.fresh} fresh processes, one after another"
    doc["processes"] = args.fresh
    return doc


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes")
    ap.add_argument("--sweep")
    ap.add_argument("--paths", help="comma-separated subset of the paths (torch-pageable is always measured)")
    ap.add_argument("--reps", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--budget", type=float, default=3.0)
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--fresh", type=int, default=0, help="run in N fresh processes")
    ap.add_argument("--settle", type=float, default=20.0,
                    help="ms of sleep before each block of calls (default 20; 0: none)")
    ap.add_argument("--after-op", action="store_true",
                    help="before every call, untimed, a parallel CPU op of PyTorch's (a copy of the size)")
    ap.add_argument("-o", dest="output")
    args = ap.parse_args()
    if args.settle < 0:
        ap.error("--settle: milliseconds, 0 or more")
    if args.fresh:
        doc = fresh(args)
    else:
        doc = run(args)
    text = json.dumps(doc, indent=1)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text + "\n")
    else:
        print(text)
    return 0


def run(args):
    import numpy
    import torch
    try:
        import cupy
    except Exception:  # CuPy is optional
        cupy = None
    try:
        import pinstage
    except ImportError:  # measured where the module is installed
        pinstage = None
    dev = torch.device("cuda", args.device)
    torch.cuda.set_device(dev)
    if cupy is not None:
        cupy.cuda.Device(args.device).use()
    results = measure(args, torch, cupy, numpy, pinstage, dev)
    props = torch.cuda.get_device_properties(dev)
    driver = cupy.cuda.runtime.driverGetVersion() if cupy is not None else 0
    versions = f"torch {torch.__version__}" + (f", cupy {cupy.__version__}" if cupy else "")
    if pinstage is not None:
        versions += f", pinstage {pinstage.__version__} (Python module)"
    return {
        "schema": "pinstage-bench/1",
        "context": {
            "tool": "peers.py",
            "library_version": versions,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "device": torch.cuda.get_device_name(dev),
            "compute_capability": f"{props.major}.{props.minor}",
            "pci_bus_id": "", "pcie_link": "unknown", "copy_engines": 0,
            "driver_version": driver, "driver_path": "", "emulated": False,
            "host_cpu": cpu_model(), "host_cores": os.cpu_count() or 0,
            "reps": args.reps, "warmup": args.warmup, "budget_s": args.budget,
            "method": "Python wall clock around each whole call ending in a stream sync (pinstage's calls end "
                      f"landed); median; paths in alternating blocks, each after {args.settle:g} ms of sleep"
                      + ("; before every call, untimed, a PyTorch CPU copy of the size" if args.after_op else
                         "; *-c paths timed in C inside the module"),
            "command": " ".join(["peers.py"] + sys.argv[1:]),
            "settle_ms": args.settle, "after_op": args.after_op,
        },
        "results": results,
    }


if __name__ == "__main__":
    sys.exit(main())
