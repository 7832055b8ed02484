#!/usr/bin/env python3
"""Writes docs/benchmarks.md from one gpu-check --full run.

usage: make_docs.py SEED.json SWEEP.json PEERS.json PEERS_SWEEP.json OUT.md

The figures and commands all come from the JSON files' context objects;
nothing here is typed in by hand.
"""
import json
import re
import sys


def command(ctx):
    """The recorded command, with output paths shortened to their file names."""
    return re.sub(r"(?<=\s)/\S*/([^/\s]+)", r"\1", ctx["command"])


def load(path):
    return json.load(open(path))


def cell(rec):
    return f"{rec['median_us']:.1f} µs" if rec else "-"


def ratio_cell(rec):
    return f"{rec['median_us']:.1f} µs ({rec['ratio_vs_pageable']:.2f}x)" if rec else "-"


def index(doc):
    return {(r["direction"], r["bytes"], r["path"]): r for r in doc["results"]}


def human(b):
    if b >= 1 << 20:
        return f"{b / (1 << 20):.1f} MiB" if b % (1 << 20) else f"{b >> 20} MiB"
    if b >= 1024:
        return f"{b / 1024:.0f} KiB" if b % 1024 else f"{b >> 10} KiB"
    return f"{b} B"


def main():
    seed, sweep, peers, peers_sweep, out = sys.argv[1:6]
    seed, sweep, peers, peers_sweep = load(seed), load(sweep), load(peers), load(peers_sweep)
    ctx = seed["context"]
    s, w, p, pw = index(seed), index(sweep), index(peers), index(peers_sweep)
    lines = []
    add = lines.append
    add("# Benchmarks\n")
    add("Every figure on this page was produced by one run of `scripts/gpu-check --full` on the lent GPU")
    add("machine; regenerate it with that command. Each cell is the median wall-clock time of one whole")
    add("synchronous call. Each path runs in blocks of consecutive calls, as a pipeline calls it, and the blocks of all")
    add("paths of one size and direction alternate in three passes, so they are compared side by side.")
    add("Ratios are pageable median / path median: above 1 is faster than the driver's pageable path.")
    add("These machines are shared and noisy: compare within a table, not across runs.\n")
    if ctx.get("emulated"):
        add("**EMULATED DRIVER: the figures below are not GPU figures.**\n")
    add("## Machine\n")
    add(f"- device: {ctx['device']} (sm_{ctx['compute_capability'].replace('.', '')}), PCI {ctx['pci_bus_id']}, "
        f"PCIe link {ctx['pcie_link']}, {ctx['copy_engines']} copy engines")
    dv = ctx["driver_version"]
    add(f"- driver: CUDA {dv // 1000}.{dv % 1000 // 10} ({ctx['driver_path']})")
    add(f"- host: {ctx['host_cpu']}, {ctx['host_cores']} cores")
    add(f"- pinstage {ctx['library_version']}; peers: {peers['context']['library_version']}")
    add(f"- date: {ctx['date']}\n")
    add("## The seed's table on this machine\n")
    add(f"Command: `{command(ctx)}`\n")
    add("| transfer | bytes | pageable | auto (upload/download) | staged (copy-in) | resident (upload_with / download_into) | floor (raw driver) | fresh pin per call |")
    add("|---|---:|---:|---:|---:|---:|---:|---:|")
    sizes = sorted({r["bytes"] for r in seed["results"]})
    for d in ("h2d", "d2h"):
        for b in sizes:
            lab = next((r["label"] for r in seed["results"] if r["bytes"] == b), "")
            row = [f"{d.upper()} {lab}", f"{b:,}", cell(s.get((d, b, "pageable")))]
            row += [ratio_cell(s.get((d, b, k))) for k in ("auto", "staged", "resident", "floor", "fresh-pin")]
            add("| " + " | ".join(row) + " |")
    add("")
    add("Library overhead, resident over the raw floor (same run):\n")
    add("| transfer | resident | floor | resident / floor |")
    add("|---|---:|---:|---:|")
    for d in ("h2d", "d2h"):
        for b in sizes:
            r, f = s.get((d, b, "resident")), s.get((d, b, "floor"))
            if r and f:
                add(f"| {d.upper()} {human(b)} | {r['median_us']:.1f} µs | {f['median_us']:.1f} µs | "
                    f"{r['median_us'] / f['median_us']:.3f} |")
    add("")
    add("## What these runs show\n")
    dev = [abs(r["median_us"] / table[(d, b, "floor")]["median_us"] - 1)
           for table in (s, w) for (d, b, k), r in table.items()
           if k == "resident" and (d, b, "floor") in table]
    if dev:
        add(f"- `upload_with` / `download_into` (resident) stayed within {100 * max(dev):.1f}% of the raw driver")
        add(f"  floor in every cell measured ({len(dev)} size x direction cells, both tables).")
    for d in ("h2d", "d2h"):
        wins = sorted(b for (dd, b, k), r in w.items() if dd == d and k == "staged"
                      and (d, b, "direct") in w and r["median_us"] < w[(d, b, "direct")]["median_us"])
        add(f"- {d.upper()}: staging a pageable slice through pinned memory (one-thread memcpy) was faster than")
        add(f"  the driver's pageable path (`direct`) in the sweep at: {', '.join(human(b) for b in wins) or 'no size'}.")
    add("")
    add("## Sweep\n")
    add(f"Command: `{command(sweep['context'])}`\n")
    paths = ["pageable", "auto", "staged", "direct", "resident", "pageable-async", "floor", "fresh-pin"]
    for d in ("h2d", "d2h"):
        add(f"{d.upper()}, median µs (ratio to pageable):\n")
        add("| bytes | " + " | ".join(paths) + " | floor GB/s |")
        add("|---:|" + "---:|" * (len(paths) + 1))
        for b in sorted({r["bytes"] for r in sweep["results"]}):
            row = [human(b)]
            for k in paths:
                rec = w.get((d, b, k))
                row.append(cell(rec) if k == "pageable" else ratio_cell(rec))
            fl = w.get((d, b, "floor"))
            row.append(f"{fl['gbps']:.1f}" if fl else "-")
            add("| " + " | ".join(row) + " |")
        add("")
        add(f"![{d} time](benchmarks/time_{d}.png)\n")
        add(f"![{d} speed-up](benchmarks/speedup_{d}.png)\n")
    add("## Against PyTorch and CuPy\n")
    add("The peers ran right after pinstage-bench, in their own process, with the same method in Python")
    add(f"(`{command(peers['context'])}` and `{command(peers_sweep['context'])}`). Python adds its own")
    add("call overhead to every peer figure, as it does for their users.\n")
    peer_paths = sorted({r["path"] for r in peers["results"]})
    for d in ("h2d", "d2h"):
        add(f"{d.upper()}, median µs:\n")
        add("| bytes | pinstage pageable | pinstage auto | pinstage resident | " + " | ".join(peer_paths) + " |")
        add("|---:|---:|---:|---:|" + "---:|" * len(peer_paths))
        allb = sorted({r["bytes"] for r in peers["results"]} | {r["bytes"] for r in peers_sweep["results"]})
        for b in allb:
            own = s if (d, b, "pageable") in s else w
            row = [human(b)] + [cell(own.get((d, b, k))) for k in ("pageable", "auto", "resident")]
            src = p if (d, b, peer_paths[0]) in p else pw
            row += [cell(src.get((d, b, k))) for k in peer_paths]
            add("| " + " | ".join(row) + " |")
        add("")
    add("## Schema of the JSON output\n")
    add("`pinstage-bench --format json` and `bench/peers.py` write one object:")
    add("`schema` (\"pinstage-bench/1\"), `context` (tool, library_version, date, device, compute_capability,")
    add("pci_bus_id, pcie_link, copy_engines, driver_version, driver_path, emulated, host_cpu, host_cores,")
    add("reps, warmup, budget_s, method, command) and `results`, one record per path x size x direction:")
    add("direction (h2d|d2h), bytes, label, path, reps, median_us, min_us, p10_us, p90_us, gbps (1e9 bytes/s at")
    add("the median), ratio_vs_pageable, emulated. `--format csv` has the record fields as columns, in that order.")
    add("tests/check_bench_output.py checks both.\n")
    open(out, "w").write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
