#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Writes docs/benchmarks.md from one gpu-check --full run.

usage: make_docs.py RESULTS_DIR OUT.md [--conditions-code VERSION]

--conditions-code names the version whose code the conditions run measured
where the version in its JSON lags it (a run made before the number changed).

RESULTS_DIR holds what gpu-check --full wrote: seed.json, sweep.json,
peers.json, peers_sweep.json, blocking.json, hostalloc_*.json, profile.txt,
calibrate.txt, conditions.json and peers_fresh.json (bench/conditions.py makes
that section), and pipeline.json and soak.json when there are (any gpu-check
run writes them).

The figures and commands all come from the JSON files' context objects;
nothing here is typed in by hand.
"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conditions  # noqa: E402


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


def targets(s, w, p, pw, blocking):
    """The copy engine's targets, each computed from paths of one run."""
    out = []
    def ratio(t, d, b, k):
        r, base = t.get((d, b, k)), t.get((d, b, "pageable"))
        return base["median_us"] / r["median_us"] if r and base else None
    def floor_frac(t, d, b, k):
        r, f = t.get((d, b, k)), t.get((d, b, "resident"))
        return f["median_us"] / r["median_us"] if r and f else None
    for k, what in (("auto", "after calibration"), ("builtin", "built-in profile")):
        cells = [(ratio(w, d, b, k), d, b) for (d, b, kk) in w if kk == k and ratio(w, d, b, k)]
        if cells:
            r, d, b = min(cells)
            below = sorted((d, b) for r, d, b in cells if r < 0.97)
            out.append(f"| upload / download {what}, worst cell of the 4 KiB-256 MiB sweep | >= 0.97x pageable | "
                       f"{r:.2f}x ({d.upper()} {human(b)}); below 0.97x: "
                       f"{', '.join(f'{d.upper()} {human(b)}' for d, b in below) or 'none'} |")
            alike = []
            for (d, b, kk) in w:
                a, pa = w.get((d, b, k)), w.get((d, b, "pageable-async"))
                if kk == k and a and pa:
                    alike.append((pa["median_us"] / a["median_us"], d, b))
            if alike:
                r, d, b = min(alike)
                out.append(f"| the same against the driver's pageable copy that lands before returning "
                           f"(`pageable-async`), worst cell | >= 0.97x | {r:.2f}x ({d.upper()} {human(b)}) |")
    for d in ("h2d", "d2h"):
        for k in ("auto", "builtin"):
            r = ratio(s, d, 4915200, k)
            if r:
                out.append(f"| {d.upper()} 4.7 MiB, {k} | >= 1.9x pageable | {r:.2f}x |")
    for d, want in (("h2d", 1.25), ("d2h", 1.5)):
        for b in (150528, 196608):
            r = ratio(s, d, b, "auto")
            if r:
                out.append(f"| {d.upper()} {human(b)}, auto | >= {want}x pageable | {r:.2f}x |")
    for d in ("h2d", "d2h"):
        for b, want in ((64 << 20, 0.75), (128 << 20, 0.75), (256 << 20, 0.75), (16 << 20, 0.55)):
            r = floor_frac(w, d, b, "auto")
            if r:
                out.append(f"| {d.upper()} {human(b)}, auto bandwidth / resident bandwidth | >= {want:.2f} | {r:.2f} |")
    for d in ("h2d", "d2h"):
        for b in (4915200, 64 << 20):
            own = s if (d, b, "auto") in s else w
            peer = p.get((d, b, "torch-copy-in")) or pw.get((d, b, "torch-copy-in"))
            if peer and own.get((d, b, "auto")):
                a = own[(d, b, "auto")]["median_us"]
                out.append(f"| {d.upper()} {human(b)}: auto vs PyTorch pinned copy-in/out | faster | "
                           f"{a:.1f} vs {peer['median_us']:.1f} µs |")
    for d in ("h2d", "d2h"):
        for b in sorted({bb for (dd, bb, k) in w if dd == d}):
            ph, res = w.get((d, b, "pinned-host")), w.get((d, b, "resident"))
            if ph and res and b in (150528, 4915200, 64 << 20):
                out.append(f"| {d.upper()} {human(b)}: page-locked host memory vs resident | within 5% | "
                           f"{ph['median_us'] / res['median_us']:.3f} |")
    bl = index(blocking) if blocking else {}
    for d in ("h2d", "d2h"):
        r, base = bl.get((d, 150528, "resident")), s.get((d, 150528, "resident"))
        if r and base:
            out.append(f"| {d.upper()} 147 KiB resident, blocking-sync context vs default | within 10% | "
                       f"{r['median_us']:.1f} vs {base['median_us']:.1f} µs ({r['median_us'] / base['median_us']:.3f}) |")
    return out


def pipeline_section(pl, add):
    ctx = pl["context"]
    add("## The frame pipeline: the synchronous buffer against the ring\n")
    add(f"Command: `{command(ctx)}` (a run of `scripts/gpu-check`, {ctx['date']}, {ctx['device']}).\n")
    add(f"Per frame: the CPU fills a {pl['frame_shape']} frame ({pl['frame_bytes']:,} bytes; a busy wait of the")
    add("fill time, stamping the frame), it is uploaded, the device copies it into an output tensor on the same")
    add("stream, the output is downloaded and the CPU checks the stamps. `sync` runs upload_with and")
    add("download_into one frame at a time; `ring` runs upload_with_async and download_async on a ring of")
    add(f"{pl['ring_slots']} slots and consumes frame k after frame k+1 is enqueued. The fill time is a multiple of one")
    add(f"frame's transfer time, {pl['transfer_us']:.1f} µs here (the synchronous pipeline's median frame with nothing")
    add(f"to fill). Frames per second: {pl['frames']} frames per round, median of {pl['rounds']} rounds, the two")
    add("pipelines alternating.\n")
    add("| fill | fill µs | sync frames/s | ring frames/s | ring / sync | waits for a busy slot |")
    add("|---|---:|---:|---:|---:|---:|")
    for r in pl["pipelines"]:
        add(f"| {r['fill_multiple']:g}x transfer | {r['fill_us']:.1f} | {r['sync_fps']:.1f} | {r['ring_fps']:.1f} | "
            f"{r['ratio']:.2f}x | {r['slot_waits']} |")
    add("")
    c = pl["call_return"]
    add(f"upload_with_async of {human(c['bytes'])} with a fill that writes nothing returned in "
        f"{c['upload_with_async_us']:.2f} µs, against {c['upload_with_us']:.2f} µs for upload_with with the same fill")
    add(f"({100 * c['ratio']:.1f}%; medians of {c['reps']} calls, alternating, the stream idle before each).\n")
    by = {r["fill_multiple"]: r for r in pl["pipelines"]}
    add("| target | wanted | measured |")
    add("|---|---|---|")
    if 1 in by:
        add(f"| ring / sync, fill = transfer time | at least 1.6x | {by[1]['ratio']:.2f}x |")
    if 0 in by:
        add(f"| ring / sync, nothing to fill | at least 0.97x | {by[0]['ratio']:.2f}x |")
    add(f"| upload_with_async return / upload_with | under 25% | {100 * c['ratio']:.1f}% |")
    add("")


def python_section(pm, add):
    """pinstage through the Python module beside PyTorch, in one process (peers.py)."""
    ctx = pm["context"]
    t = index(pm)
    add("## From Python\n")
    add(f"Command: `{command(ctx)}` ({ctx['date']}, {ctx['device']}; {ctx['library_version']}). One process: the")
    add("module's calls beside PyTorch's, and the same pinstage calls timed from C inside the module (`-c`),")
    add("so the module's own cost shows as the difference. `pinstage` moves a NumPy array to / from a PyTorch")
    add("CUDA tensor (read through its own getters on every call); `pinstage-devarray` the same with a")
    add("`pinstage.DeviceArray`; `pinstage-resident` is upload_with (a fill that writes nothing) / download_into.\n")
    paths = ["pinstage", "pinstage-devarray", "pinstage-c", "pinstage-resident", "pinstage-resident-devarray",
             "pinstage-resident-c", "torch-from-numpy", "torch-copy-in", "torch-pageable", "cupy-set-get"]
    add("| transfer | " + " | ".join(paths) + " |")
    add("|---|" + "---:|" * len(paths))
    for d in ("h2d", "d2h"):
        for b in sorted({r["bytes"] for r in pm["results"]}):
            add(f"| {d.upper()} {human(b)} | " + " | ".join(cell(t.get((d, b, k))) for k in paths) + " |")
    add("")
    add("| target | wanted | measured |")
    add("|---|---|---|")
    m = lambda d, b, k: t[(d, b, k)]["median_us"] if (d, b, k) in t else None
    for d in ("h2d", "d2h"):
        for k in ("pinstage-devarray", "pinstage"):
            a, c = m(d, 4096, k), m(d, 4096, "pinstage-c")
            if a and c:
                add(f"| {d.upper()} 4 KiB through the module ({k}) minus the same call from C | at most 1.5 µs | "
                    f"{a - c:+.1f} µs ({a:.1f} vs {c:.1f}) |")
        a, fn, ci = m(d, 4915200, "pinstage"), m(d, 4915200, "torch-from-numpy"), m(d, 4915200, "torch-copy-in")
        if a and fn and ci:
            add(f"| {d.upper()} 4.7 MiB NumPy {'to' if d == 'h2d' else 'from'} a tensor: against "
                f"`torch.from_numpy` + copy_ | at least 1.9x | {fn / a:.2f}x ({a:.1f} vs {fn:.1f} µs) |")
            add(f"| {d.upper()} 4.7 MiB: against PyTorch's pinned copy-{'in' if d == 'h2d' else 'out'} | at least 1.5x | "
                f"{ci / a:.2f}x ({ci:.1f} µs) |")
        for k in ("pinstage-resident-devarray", "pinstage-resident"):
            a, c = m(d, 4915200, k), m(d, 4915200, "pinstage-resident-c")
            if a and c:
                add(f"| {d.upper()} 4.7 MiB {'upload_with' if d == 'h2d' else 'download_into'} ({k}) against C | "
                    f"within 3% | {100 * (a / c - 1):+.1f}% ({a:.1f} vs {c:.1f} µs) |")
    add("")


def soak_section(sk, add):
    ctx = sk["context"]
    add("## Soak\n")
    add(f"Command: `{command(ctx)}` (a run of `scripts/gpu-check`, {ctx['date']}, {ctx['device']}).\n")
    add(f"{sk['transfers']:,} transfers ({sk['round_trips']:,} round trips, each compared byte for byte) of mixed")
    add("shapes (4 KiB to 4.7 MiB, mostly frame-sized), through upload / download, upload_with /")
    add(f"download_into and the ring, on {sk['threads']} threads, each with its own buffer, ring and stream:\n")
    add("| transfers | bytes moved | seconds | errors | mismatches | RSS at 10% | RSS at the end | "
        "pinned at 10% | pinned at the end | pinned after freeing |")
    add("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    add(f"| {sk['transfers']:,} | {sk['bytes']:,} | {sk['seconds']:.1f} | {sk['errors']} | {sk['mismatches']} | "
        f"{sk['rss_kib_at_10_percent']:,} KiB | {sk['rss_kib_at_end']:,} KiB | {sk['pinned_bytes_at_10_percent']:,} | "
        f"{sk['pinned_bytes_at_end']:,} | {sk['pinned_bytes_after_free']:,} |")
    add("")


def devices_section(dv, add):
    ctx = dv["context"]
    devs = dv["devices"]
    add("## Every GPU at once\n")
    add(f"Command: `{command(ctx)}` (a run of `scripts/gpu-check`, {ctx['date']}, pinstage {ctx['library_version']}).")
    add("One thread per GPU, each with its own buffer bound to its GPU (`pinstage_buffer_bind`), stream, device")
    add("memory and pageable host memory; calls back to back for "
        f"{dv['seconds_per_run']:g} s per run, GB/s = bytes moved / time from the first call to the last return.")
    add("`floor` is the buffer's pinned memory straight to or from the GPU (upload_with with nothing to fill,")
    add("download_into); `auto` is upload / download of the pageable memory. Each GPU alone, then all at once;")
    add("the aggregate is compared with the sum of the single-GPU figures, or for `auto` (one host copy per byte)")
    add(f"with the host's memcpy ceiling where that is lower ({dv['host_copy_gbps']:.1f} GB/s on "
        f"{dv['host_copy_threads']} threads in this run). \"Other\": "
        + ("memory and copy threads on the next NUMA node after the GPU's (remote)."
           if dv["other_placement"] == "remote node" else
           "node 0 asked for explicitly, so the pinned memory is mapped, placed and registered with "
           "`cuMemHostRegister` rather than taken from `cuMemAllocHost`: what placement itself costs.") + "\n")
    add(f"Host NUMA nodes: {dv['host_numa_nodes']}.\n")
    add("| GPU | name | PCI | its NUMA node | pinned memory placed on | pages found on (move_pages) | copy threads on |")
    add("|---:|---|---|---:|---:|---:|---:|")
    for d in devs:
        add(f"| {d['device']} | {d['name']} | {d['pci_bus_id']} | {d['gpu_node']} | {d['memory_node']} | "
            f"{d['memory_found']} | {d['worker_node']} |")
    add("\n(-1: no placement, or any CPU of the process.)\n")
    add("| transfer | path | " + " | ".join(f"GPU {d['device']} alone" for d in devs) + " | "
        + " | ".join(f"GPU {d['device']} together" for d in devs) + " | "
        + " | ".join(f"GPU {d['device']} other" for d in devs) + " | sum alone | aggregate | bound | aggregate / bound |")
    add("|---|---|" + "---:|" * (3 * len(devs) + 4))
    for x in dv["results"]:
        other = ["-" if v is None else f"{v:.1f}" for v in x["other_gbps"]]
        add(f"| {x['direction'].upper()} {human(x['bytes'])} | {x['path']} | "
            + " | ".join(f"{v:.1f}" for v in x["alone_gbps"]) + " | "
            + " | ".join(f"{v:.1f}" for v in x["together_gbps"]) + " | " + " | ".join(other) + " | "
            f"{x['sum_alone_gbps']:.1f} | {x['aggregate_gbps']:.1f} | {x['bound']} | {x['aggregate_over_bound']:.2f} |")
    add("\nGB/s (1e9 bytes per second).")
    if len(devs) < 2:
        add("This run had one GPU, so \"together\" is that GPU again; the multi-GPU targets (every GPU at once at")
        add("least 85% of the bound, local placement at least as fast as remote, one GPU of a multi-GPU host within")
        add("3% of the single-GPU figures) need a host of several GPUs and NUMA nodes and have not been measured.")
        add("The same command runs them there.")
    add("")


def main():
    folder, out = sys.argv[1:3]
    # --conditions-code VERSION: what the conditions run measured, where the
    # version number in its JSON lags the code (a run made before the bump).
    extra = sys.argv[3:]
    conditions_code = extra[extra.index("--conditions-code") + 1] if "--conditions-code" in extra else None
    f = lambda name: f"{folder}/{name}"
    seed, sweep, peers, peers_sweep = (load(f(n)) for n in ("seed.json", "sweep.json", "peers.json", "peers_sweep.json"))
    blocking = load(f("blocking.json"))
    hostalloc = [load(f(f"hostalloc_{m}.json")) for m in ("malloc", "hugepages", "small-pages")]
    profile = open(f("profile.txt")).read()
    calib_note = open(f("calibrate.txt")).read().strip().splitlines()[-1]
    ctx = seed["context"]
    s, w, p, pw = index(seed), index(sweep), index(peers), index(peers_sweep)
    lines = []
    add = lines.append
    add("# Benchmarks\n")
    add("Every figure on this page was produced by one run of `scripts/gpu-check --full` on the lent GPU")
    add("machine, except the sections that name their own run (the frame pipeline, the soak, where programs run")
    add("it, and from Python); regenerate it with that command. The JSON behind every table is in docs/benchmarks/.")
    add("Each cell is the median wall-clock time of one whole synchronous call. Each path runs in blocks of")
    add("consecutive calls, as a pipeline calls it, and the blocks of all paths of one size and direction")
    add("alternate in three passes, so they are compared side by side. Ratios are pageable median / path")
    add("median: above 1 is faster than the driver's pageable path. These machines are shared and noisy:")
    add("compare within a table, not across runs; at large sizes compare against `resident` (the DMA floor)")
    add("of the same run as well, since the driver's pageable path varies from run to run.\n")
    if os.path.exists(f("conditions.json")):
        newer = load(f("conditions.json"))["context"]
        when = newer["date"]
        if conditions_code:
            when += f"; its JSON says {newer['library_version']}: the run came before the version number changed"
            newer = dict(newer, library_version=conditions_code)
        if newer["library_version"] != ctx["library_version"]:
            add(f"**Several runs, several versions.** The seed's table, the targets of the copy engine, the profile,")
            add(f"the sweep, the peers, the frame pipeline and the soak come from a run of pinstage "
                f"{ctx['library_version']} ({ctx['date']}); \"Where")
            add(f"programs run it\" from a run of pinstage {newer['library_version']} ({when}); the other")
            add("sections name their own run. Their copy engines and built-in profiles differ (CHANGELOG.md):")
            add("compare within a section.\n")
    if ctx.get("emulated"):
        add("**EMULATED DRIVER: the figures below are not GPU figures.**\n")
    add("## Machine\n")
    add(f"- device: {ctx['device']} (sm_{ctx['compute_capability'].replace('.', '')}), PCI {ctx['pci_bus_id']}, "
        f"PCIe link {ctx['pcie_link']}, {ctx['copy_engines']} copy engines")
    dv = ctx["driver_version"]
    add(f"- driver: CUDA {dv // 1000}.{dv % 1000 // 10} ({ctx['driver_path']})")
    add(f"- host: {ctx['host_cpu']}, {ctx['host_cores']} cores; engine pool: {ctx['pool_workers']} workers + the caller")
    add(f"- pinstage {ctx['library_version']}; peers: {peers['context']['library_version']}")
    add(f"- date: {ctx['date']}\n")
    add("Paths: `pageable` the driver's own pageable copy (cuMemcpyHtoD/DtoH; the upload returns once the")
    add("driver has staged the source, before its DMA lands); `pageable-async` the driver's async pageable")
    add("copy plus a stream sync, which has landed on return as every pinstage call has; `auto` upload / download with")
    add("the profile calibrated in this run; `builtin` the same with the built-in profile (no calibration);")
    add("`staged` one memcpy through pinned memory (the seed's staging); `engine` the copy engine at fixed")
    add("settings; `pinned-host` upload / download of memory the caller page-locked; `resident` upload_with /")
    add("download_into; `floor` the raw driver's async copy from reused pinned memory plus a sync.\n")
    add("## The seed's table on this machine\n")
    add(f"Command: `{command(ctx)}`\n")
    cols = ("auto", "builtin", "staged", "engine", "pinned-host", "resident", "floor")
    add("| transfer | bytes | pageable | " + " | ".join(cols) + " |")
    add("|---|---:|---:|" + "---:|" * len(cols))
    sizes = sorted({r["bytes"] for r in seed["results"]})
    for d in ("h2d", "d2h"):
        for b in sizes:
            lab = next((r["label"] for r in seed["results"] if r["bytes"] == b), "")
            row = [f"{d.upper()} {lab}", f"{b:,}", cell(s.get((d, b, "pageable")))]
            row += [ratio_cell(s.get((d, b, k))) for k in cols]
            add("| " + " | ".join(row) + " |")
    add("")
    add("## Targets of the copy engine, from these runs\n")
    add("| target | wanted | measured |")
    add("|---|---|---|")
    for line in targets(s, w, p, pw, blocking):
        add(line)
    add("")
    add(f"Blocking-sync context: `{command(blocking['context'])}`.")
    add("One second after the last transfer the process uses no CPU: tests/test_pool.c measures it (under 20 ms")
    add("of CPU in 300 ms idle) on the GPU machine and in CI. Pinned memory held for a 256 MiB transfer through")
    add("the engine: at most 32 MiB, asserted by tests/test_engine.c on the GPU machine.\n")
    add("## The calibrated profile\n")
    add(f"`{calib_note.lstrip('# ')}`; the table `pinstage-bench --calibrate FILE` printed and saved:\n")
    add("```")
    add(profile.rstrip())
    add("```\n")
    add("## Why the driver's pageable path varies\n")
    add("The same 64 MiB pageable copy, with the host memory allocated three ways (each written first), one")
    add("run each, `pinstage-bench --host-alloc MODE --sizes 64M --paths pageable,auto,resident`:\n")
    sweep_pg = w.get(("h2d", 64 << 20, "pageable"))
    by_alloc = {doc["context"]["host_alloc"]: index(doc).get(("h2d", 64 << 20, "pageable")) for doc in hostalloc}
    if sweep_pg and all(by_alloc.values()):
        times = [r["median_us"] / 1000 for r in by_alloc.values()]
        huge, small = by_alloc["hugepages"]["median_us"], by_alloc["small-pages"]["median_us"]
        add(f"In this run the 64 MiB H2D pageable copy took {sweep_pg['median_us'] / 1000:.2f} ms in the sweep and")
        add(f"{min(times):.2f}-{max(times):.2f} ms in the three runs below, minutes apart on the same machine, with")
        add(f"huge pages {'faster' if huge < small else 'no faster'} than 4 KiB pages ({huge / 1000:.2f} against "
            f"{small / 1000:.2f} ms). How the source")
        add("pages are allocated does not explain the variation between runs and machines; the driver's")
        add("pageable path itself varies, which is why the targets compare large transfers with the DMA floor")
        add("(`resident`) of the same run. The bench allocates its pageable memory as most programs do, with")
        add("malloc, and writes it before use (`--host-alloc` selects the others).\n")
    add("| host memory | H2D pageable | H2D auto | D2H pageable | D2H auto |")
    add("|---|---:|---:|---:|---:|")
    for doc in hostalloc:
        t = index(doc)
        add(f"| {doc['context']['host_alloc']} | {cell(t.get(('h2d', 64 << 20, 'pageable')))} | "
            f"{cell(t.get(('h2d', 64 << 20, 'auto')))} | {cell(t.get(('d2h', 64 << 20, 'pageable')))} | "
            f"{cell(t.get(('d2h', 64 << 20, 'auto')))} |")
    add("")
    add("## Sweep\n")
    add(f"Command: `{command(sweep['context'])}`\n")
    paths = ["pageable", "pageable-async", "auto", "builtin", "staged", "pinned-host", "resident"]
    for d in ("h2d", "d2h"):
        add(f"{d.upper()}, median µs (ratio to pageable), and auto's bandwidth as a fraction of resident's:\n")
        add("| bytes | " + " | ".join(paths) + " | auto / resident | resident GB/s |")
        add("|---:|" + "---:|" * (len(paths) + 2))
        for b in sorted({r["bytes"] for r in sweep["results"]}):
            row = [human(b)]
            for k in paths:
                rec = w.get((d, b, k))
                row.append(cell(rec) if k == "pageable" else ratio_cell(rec))
            a, res = w.get((d, b, "auto")), w.get((d, b, "resident"))
            row.append(f"{res['median_us'] / a['median_us']:.2f}" if a and res else "-")
            row.append(f"{res['gbps']:.1f}" if res else "-")
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
    if os.path.exists(f("conditions.json")):
        peers_fresh = load(f("peers_fresh.json")) if os.path.exists(f("peers_fresh.json")) else None
        png = "benchmarks/conditions.png" if os.path.exists(f("benchmarks/conditions.png")) else None
        conditions.section(load(f("conditions.json")), peers_fresh, add, png)
    if os.path.exists(f("peers_module.json")):
        python_section(load(f("peers_module.json")), add)
    if os.path.exists(f("pipeline.json")):
        pipeline_section(load(f("pipeline.json")), add)
    if os.path.exists(f("soak.json")):
        soak_section(load(f("soak.json")), add)
    if os.path.exists(f("devices.json")):
        devices_section(load(f("devices.json")), add)
    add("## Schema of the JSON output\n")
    add("`pinstage-bench --format json` and `bench/peers.py` write one object:")
    add("`schema` (\"pinstage-bench/1\"), `context` (tool, library_version, date, device, compute_capability,")
    add("pci_bus_id, pcie_link, copy_engines, driver_version, driver_path, emulated, host_cpu, host_cores,")
    add("reps, warmup, budget_s, method, command; pinstage-bench adds sched, host_alloc, profile, engine,")
    add("pool_workers) and `results`, one record per path x size x direction: direction (h2d|d2h), bytes,")
    add("label, path, reps, median_us, min_us, p10_us, p90_us, gbps (1e9 bytes/s at the median),")
    add("ratio_vs_pageable, emulated; JSON records also carry cpu_us_per_gb, mean_us (the timed calls' mean, where")
    add("a slower call now and then, such as a probe of the other route, shows; from 0.4.7) and, on paths of upload / download,")
    add("pageable_share (the share of their timed calls that took the pageable route, from 0.4.4); with `--paced`,")
    add("gap_cpu_us_per_gb (the CPU the process's other threads used in the gap before each call, the measuring")
    add("thread's excluded, per 1e9 bytes moved, from 0.4.7). `--format csv` has the listed fields as columns, in")
    add("that order.")
    add("tests/check_bench_output.py checks both.\n")
    add("`pinstage-bench --pipeline --format json` writes `schema` (\"pinstage-bench-pipeline/1\"), the same")
    add("`context`, frame_bytes, frame_shape, frames, rounds, ring_slots, transfer_us (one frame's time in the")
    add("synchronous pipeline with nothing to fill), `pipelines` (per fill: fill_multiple, fill_us, sync_fps,")
    add("ring_fps, ratio, slot_waits, and every round's fps), `call_return` (upload_with_async_us and")
    add("upload_with_us, medians, and their ratio) and the ring's `ring_stats`.\n")
    add("`pinstage-bench --conditions --format json` writes `schema` (\"pinstage-bench-conditions/1\"), the same")
    add("`context`, processes, engine_threads, `idle` (cpu_us of the process in window_s seconds, after_s after the")
    add("last transfer; from 0.4.6 also pinstage_cpu_us, its workers' share, and threads: name, threads and cpu_us")
    add("per thread name, pinstage's workers as pinstage-N, the thread that measures as measuring-thread, threads")
    add("that ended in the window as ended-in-window, names past the thirteenth as other-threads) and")
    add("`results`, one row per measurement: condition")
    add("(fresh-process, warm, paced, cpu-load, mem-load, concurrent), direction, bytes, path (pageable, auto,")
    add("floor; from 0.4.7 pageable-async too, on cpu-load uploads up to 1 MiB), reps, median_us, p10_us, p90_us,")
    add("mean_us (from 0.4.7),")
    add("cpu_us_per_gb (process CPU time per 1e9 bytes moved); fresh-process rows carry process, and those and")
    add("mem-load rows memcpy_gbps (M) and, on auto, bound_us; auto rows carry pageable_share (the share of their")
    add("timed calls that took the pageable route, from 0.4.4) and, at sizes the governor sets (16 MiB up, from")
    add("0.4.7), engine_threads (its thread count after the calls); paced rows carry gap_cpu_us_per_gb (as above, from")
    add("0.4.7); concurrent rows carry threads, aggregate_gbps,")
    add("bound_gbps, min_thread_gbps and mean_thread_gbps. `peers.py --fresh N` writes the peers' schema with")
    add("condition and process on every row.\n")
    add("`pinstage-bench --devices LIST --format json` writes `schema` (\"pinstage-bench-devices/1\"), the same")
    add("`context`, host_numa_nodes, seconds_per_run, other_placement (\"remote node\" or \"node 0, registered\"),")
    add("host_copy_gbps and host_copy_threads (the memcpy ceiling), `devices` (device, name, pci_bus_id, gpu_node,")
    add("memory_node, memory_found, worker_node) and `results`, one row per direction x size x path (floor, auto):")
    add("alone_gbps, alone_median_us, together_gbps and other_gbps (per device, in `devices` order; null where not")
    add("measured), sum_alone_gbps, aggregate_gbps, bound_gbps, bound (its name) and aggregate_over_bound.\n")
    open(out, "w").write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
