#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Where programs run it: the targets of `pinstage-bench --conditions`
(conditions.json) and of peers.py --fresh (peers_fresh.json), each computed
from paths measured in the same process; a plot; the docs section.

usage: conditions.py CONDITIONS.json [PEERS_FRESH.json] [--plot OUT.png]
       prints the targets table (markdown) and exits 1 if any is missed

make_docs.py imports section() for docs/benchmarks.md.
"""
import json
import re
import statistics
import sys

FRAME = 4915200          # 640x640x3 f32
LARGE = 64 << 20


def human(b):
    if b >= 1 << 20:
        return f"{b / (1 << 20):.1f} MiB" if b % (1 << 20) else f"{b >> 20} MiB"
    if b >= 1024:
        return f"{b / 1024:.0f} KiB" if b % 1024 else f"{b >> 10} KiB"
    return f"{b} B"


def shorten(command):
    """The recorded command, with output paths shortened to their file names."""
    return re.sub(r"(?<=\s)/\S*/([^/\s]+)", r"\1", command)


def rows(doc, condition, direction=None, size=None, path=None, **extra):
    out = []
    for r in doc["results"]:
        if r.get("condition") != condition:
            continue
        if direction and r["direction"] != direction or size and r["bytes"] != size or path and r["path"] != path:
            continue
        if any(r.get(k) != v for k, v in extra.items()):
            continue
        out.append(r)
    return out


def one(doc, condition, direction, size, path, **extra):
    found = rows(doc, condition, direction, size, path, **extra)
    return found[0] if found else None


def per_process(doc, condition, direction, size, a, b):
    """{process: (row a, row b)} where both paths were measured."""
    left = {r["process"]: r for r in rows(doc, condition, direction, size, a)}
    right = {r["process"]: r for r in rows(doc, condition, direction, size, b)}
    return {p: (left[p], right[p]) for p in sorted(left) if p in right}


def near(x, limit):
    """x to two decimals, or three where two would read as the limit itself (0.8496 against >= 0.85
    would print 0.85 beside "no")."""
    for digits in (2, 3, 4):
        text = f"{x:.{digits}f}"
        if x == limit or float(text) != limit:
            return text
    return text


def targets(cond, peers=None):
    """[(target, wanted, measured text, met)], every figure from one process's paths."""
    out = []

    def route(a):
        """How many of auto's timed calls took the pageable route, where the run says (0.4.4 on)."""
        share = a.get("pageable_share") if a else None
        return f"; pageable route in {share:.0%} of calls" if share else ""

    def landed(d, size):
        """auto against the driver's copy landed on return (pageable-async), where the run has it: the
        pageable path's cuMemcpyHtoD_v2 returns before its DMA lands, upload after."""
        a, p = one(cond, "cpu-load", d, size, "auto"), one(cond, "cpu-load", d, size, "pageable-async")
        return f"; {p['median_us'] / a['median_us']:.2f}x the landed copy" if a and p else ""

    def add(target, wanted, measured, met):
        out.append((target, wanted, measured, bool(met)))

    procs = len({r["process"] for r in rows(cond, "fresh-process")})
    for d in ("h2d", "d2h"):
        pairs = per_process(cond, "fresh-process", d, LARGE, "auto", "floor")
        if pairs:
            frac = [f["median_us"] / a["median_us"] for a, f in pairs.values()]
            add(f"fresh processes ({procs}), {d.upper()} 64 MiB: median process, share of the pinned floor",
                ">= 0.80", f"{near(statistics.median(frac), 0.80)} (min {min(frac):.2f}, max {max(frac):.2f})",
                statistics.median(frac) >= 0.80)
            bound = [a["bound_us"] / a["median_us"] for a, _ in pairs.values() if a.get("bound_us")]
            if bound:
                add(f"fresh processes, {d.upper()} 64 MiB: every process, share of its own bound min(link, 2M/3)",
                    ">= 0.85", f"min {near(min(bound), 0.85)} (median {statistics.median(bound):.2f})", min(bound) >= 0.85)
        pairs = per_process(cond, "fresh-process", d, FRAME, "auto", "pageable")
        if pairs:
            r = [p["median_us"] / a["median_us"] for a, p in pairs.values()]
            add(f"fresh processes, {d.upper()} 4.7 MiB: worst process against pageable", ">= 1.9x",
                f"{near(min(r), 1.9)}x (median {statistics.median(r):.2f}x)", min(r) >= 1.9)
    if peers:
        for d in ("h2d", "d2h"):
            for size, want in ((FRAME, 1.3), (LARGE, 1.2)):
                pairs = per_process(peers, "fresh-process", d, size, "pinstage", "torch-copy-in")
                if pairs:
                    r = [t["median_us"] / p["median_us"] for p, t in pairs.values()]
                    worst = min(pairs.values(), key=lambda pt: pt[1]["median_us"] / pt[0]["median_us"])[0]
                    add(f"fresh processes ({len(r)}), {d.upper()} {human(size)}: PyTorch's pinned copy-"
                        f"{'in' if d == 'h2d' else 'out'} time / pinstage's, worst process", f">= {want}x",
                        f"{near(min(r), want)}x (all: {', '.join(f'{x:.2f}' for x in r)}){route(worst)}", min(r) >= want)
    for d in ("h2d", "d2h"):
        cells = []
        for a in rows(cond, "cpu-load", d, path="auto"):
            p = one(cond, "cpu-load", d, a["bytes"], "pageable")
            if p:
                cells.append((p["median_us"] / a["median_us"], a["bytes"]))
        if cells:
            worst = min(cells)
            below = [human(b) for r, b in sorted(cells, key=lambda c: c[1]) if r < 0.97]
            add(f"CPU load (all CPUs but 4 busy), {d.upper()}, worst size of {human(min(b for _, b in cells))}-"
                f"{human(max(b for _, b in cells))} against pageable", ">= 0.97x",
                f"{near(worst[0], 0.97)}x ({human(worst[1])}); below: {', '.join(below) or 'none'}{landed(d, worst[1])}",
                worst[0] >= 0.97)
            frame = [r for r, b in cells if b == FRAME]
            if frame:
                add(f"CPU load, {d.upper()} 4.7 MiB against pageable", ">= 1.5x",
                    f"{near(frame[0], 1.5)}x{route(one(cond, 'cpu-load', d, FRAME, 'auto'))}", frame[0] >= 1.5)
        for size in (FRAME, LARGE):
            a, p = one(cond, "mem-load", d, size, "auto"), one(cond, "mem-load", d, size, "pageable")
            if a and p:
                r = p["median_us"] / a["median_us"]
                add(f"memory load (4 threads streaming memcpy), {d.upper()} {human(size)} against pageable", ">= 2x",
                    f"{near(r, 2)}x{route(a)}", r >= 2)
            a, w = one(cond, "paced", d, size, "auto"), one(cond, "warm", d, size, "auto")
            if a and w:
                r = a["median_us"] / w["median_us"]
                add(f"paced (5 ms idle and another copy before each call), {d.upper()} {human(size)}: time / warm time",
                    "<= 1.10", f"{near(r, 1.10)} ({a['median_us']:.1f} vs {w['median_us']:.1f} µs{route(a)})", r <= 1.10)
        for threads in (4, 8):
            for size in (FRAME, LARGE):
                c = one(cond, "concurrent", d, size, "auto", threads=threads)
                if c:
                    share = c["aggregate_gbps"] / c["bound_gbps"] if c["bound_gbps"] else 0
                    fair = c["min_thread_gbps"] / c["mean_thread_gbps"] if c["mean_thread_gbps"] else 0
                    add(f"concurrent, {threads} threads, {d.upper()} {human(size)}: aggregate / bound; slowest thread "
                        f"/ mean", ">= 0.85; >= 0.5",
                        f"{near(share, 0.85)} ({c['aggregate_gbps']:.1f} of {c['bound_gbps']:.1f} GB/s); {fair:.2f}{route(c)}",
                        share >= 0.85 and fair >= 0.5)
        for size in (FRAME, LARGE):
            a, p = one(cond, "warm", d, size, "auto"), one(cond, "warm", d, size, "pageable")
            if a and p and p["cpu_us_per_gb"]:
                r = a["cpu_us_per_gb"] / p["cpu_us_per_gb"]
                add(f"CPU time per GB, one thread, {d.upper()} {human(size)}: auto / pageable", "<= 2x",
                    f"{near(r, 2)}x ({a['cpu_us_per_gb'] / 1e3:.0f} vs {p['cpu_us_per_gb'] / 1e3:.0f} ms/GB)", r <= 2)
            for threads in (2, 4, 8):
                a = one(cond, "concurrent", d, size, "auto", threads=threads)
                p = one(cond, "concurrent", d, size, "pageable", threads=threads)
                if a and p and p["cpu_us_per_gb"]:
                    r = a["cpu_us_per_gb"] / p["cpu_us_per_gb"]
                    add(f"CPU time per GB, {threads} threads, {d.upper()} {human(size)}: auto / pageable", "<= 2x",
                        f"{near(r, 2)}x", r <= 2)
    idle = cond.get("idle", {})
    if idle and "pinstage_cpu_us" in idle:
        # pinstage-bench names every thread's share: pinstage's workers are what the library owns;
        # the driver's threads and the thread that measures are shown beside them.
        others = ", ".join(f"{g['name']} x{g['threads']} {g['cpu_us'] / 1e3:.2f} ms"
                           for g in idle.get("threads", []) if g["name"] != "pinstage-N")
        add("CPU while idle, one second after the last transfer: pinstage's workers", "0",
            f"{idle['pinstage_cpu_us']:.1f} µs (the process {idle['cpu_us'] / 1e3:.2f} ms in {idle['window_s']:g} s: "
            f"{others})", idle["pinstage_cpu_us"] < 1)
    elif idle:
        add("CPU while idle, one second after the last transfer", "0 (under 1 ms per second)",
            f"{idle['cpu_us'] / 1e3:.2f} ms in {idle['window_s']:g} s", idle["cpu_us"] < 1000)
    return out


def table(ts):
    lines = ["| target | wanted | measured | met |", "|---|---|---|---|"]
    for t, w, m, ok in ts:
        lines.append(f"| {t} | {w} | {m} | {'yes' if ok else '**no**'} |")
    return lines


def plot(cond, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, d in zip(axes, ("h2d", "d2h")):
        for path, colour in (("pageable", "tab:gray"), ("auto", "tab:blue"), ("floor", "tab:green")):
            rs = sorted(rows(cond, "fresh-process", d, LARGE, path), key=lambda r: r["process"])
            ax.plot([r["process"] for r in rs], [r["median_us"] / 1e3 for r in rs], "o-", color=colour, label=path)
        rs = sorted(rows(cond, "fresh-process", d, LARGE, "auto"), key=lambda r: r["process"])
        if rs and rs[0].get("bound_us"):
            ax.plot([r["process"] for r in rs], [r["bound_us"] / 1e3 for r in rs], "x--", color="tab:red",
                    label="bound min(link, 2M/3)")
        ax.set_title(f"{d.upper()} 64 MiB, one point per fresh process")
        ax.set_xlabel("process")
        ax.set_ylabel("median ms per transfer")
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def cpu_cell(r):
    """CPU ms per GB in the calls, and where measured (paced rows) what the other threads used in the gap
    before each call."""
    cell = f"{r['cpu_us_per_gb'] / 1e3:.0f}"
    return cell + f" + {r['gap_cpu_us_per_gb'] / 1e3:.0f} before" if "gap_cpu_us_per_gb" in r else cell


def section(cond, peers, add, png=None):
    """The docs section, markdown lines through add()."""
    ctx = cond["context"]
    add("## Where programs run it\n")
    add(f"Command: `{shorten(ctx['command'])}`" + (f" and `{shorten(peers['context']['command'])}`" if peers else "") +
        f" ({ctx['date']}, {ctx['device']}, {ctx['host_cores']} cores, engine pool {cond['engine_threads'] - 1}"
        " workers + the caller).\n")
    add("The tables above are the best case: one warm process, calls back to back. Here pageable, auto and floor")
    add("are measured side by side in the conditions a pipeline's process is in: fresh processes (each with")
    add("freshly allocated and written memory), paced calls (5 ms idle and another copy before each), all CPUs")
    add("but 4 busy with arithmetic, 4 threads streaming memcpy, and 2, 4 and 8 threads transferring at once.")
    add("Every row carries the process CPU time per GB moved. The bound: a staged byte is read and written by the")
    add("CPU and read again by the DMA engine, so at the process's parallel memcpy rate M (measured just before,")
    add("64 MiB) a staged transfer runs at most at min(link, 2M/3), the link being the same process's floor.\n")
    settle = peers["context"].get("settle_ms") if peers else None
    if settle:
        add(f"PyTorch's rows come from `bench/peers.py`'s own fresh processes, each block of calls after {settle:g} ms")
        add("of sleep: after a parallel CPU op PyTorch's OpenMP threads spin on every CPU for about 10 ms, and")
        add("a transfer made in that time finds no CPU free for pinstage's copy threads. That window, what")
        add("pinstage loses there and what a program can set, is measured apart (`peers.py --after-op`;")
        add("docs/findings.md, \"PyTorch's OpenMP threads\").\n")
    add("### Targets\n")
    ts = targets(cond, peers)
    for line in table(ts):
        add(line)
    add("")
    if any(not t[3] for t in ts):
        add("Why each missed target is missed, and which ones trade against another target or against what")
        add("`upload` promises: docs/findings.md, [\"Where the missed targets stand\"]"
            "(findings.md#where-the-missed-targets-stand).\n")
    add("### Fresh processes\n")
    procs = sorted({r["process"] for r in rows(cond, "fresh-process")})
    add("| transfer | path | min µs | median µs | max µs | memcpy M, GB/s (min-max) |")
    add("|---|---|---:|---:|---:|---|")
    for size in sorted({r["bytes"] for r in rows(cond, "fresh-process")}):
        for d in ("h2d", "d2h"):
            for path in ("pageable", "auto", "floor"):
                rs = rows(cond, "fresh-process", d, size, path)
                if not rs:
                    continue
                t = [r["median_us"] for r in rs]
                m = [r.get("memcpy_gbps", 0) for r in rs]
                add(f"| {d.upper()} {human(size)} | {path} | {min(t):.1f} | {statistics.median(t):.1f} | {max(t):.1f} | "
                    f"{min(m):.0f}-{max(m):.0f} |")
    add(f"\n{len(procs)} processes, one after another. Per process, 64 MiB:\n")
    add("| process | H2D auto / floor | H2D auto vs bound | D2H auto / floor | D2H auto vs bound | M GB/s |")
    add("|---:|---:|---:|---:|---:|---:|")
    for p in procs:
        cells = []
        m = 0
        for d in ("h2d", "d2h"):
            a, f = one(cond, "fresh-process", d, LARGE, "auto", process=p), one(cond, "fresh-process", d, LARGE,
                                                                             "floor", process=p)
            if a and f:
                cells += [f"{f['median_us'] / a['median_us']:.2f}", f"{a['bound_us'] / a['median_us']:.2f}"
                          if a.get("bound_us") else "-"]
                m = a.get("memcpy_gbps", 0)
            else:
                cells += ["-", "-"]
        add(f"| {p} | " + " | ".join(cells) + f" | {m:.0f} |")
    add("")
    if png:
        add(f"![fresh processes]({png})\n")
    add("### Under load, paced, warm\n")
    add("| condition | transfer | pageable µs | auto µs | auto vs pageable | floor µs | CPU ms/GB auto | pageable |")
    add("|---|---|---:|---:|---:|---:|---:|---:|")
    for c in ("warm", "paced", "mem-load"):
        for size in sorted({r["bytes"] for r in rows(cond, c)}):
            for d in ("h2d", "d2h"):
                a, p, f = (one(cond, c, d, size, k) for k in ("auto", "pageable", "floor"))
                if a and p:
                    add(f"| {c} | {d.upper()} {human(size)} | {p['median_us']:.1f} | {a['median_us']:.1f} | "
                        f"{p['median_us'] / a['median_us']:.2f}x | {f['median_us'] if f else 0:.1f} | "
                        f"{cpu_cell(a)} | {cpu_cell(p)} |")
    if any("gap_cpu_us_per_gb" in r for r in rows(cond, "paced")):
        add("\nPaced CPU: in the calls + what the process's other threads (the pool's workers up ahead of the next")
        add("transfer, the driver's) used in the gap before each call, the measuring thread's own work excluded.")
    # The landed columns where the run measured them (0.4.7 on).
    landed = any(r["path"] == "pageable-async" for r in rows(cond, "cpu-load"))
    add("\nCPU load, all CPUs but 4 busy with arithmetic in the same process" +
        (". Landed: the driver's async pageable copy and a stream sync, landed on return as upload is"
         " (cuMemcpyHtoD_v2, the pageable column, returns before its last DMA lands); measured for uploads up to"
         " 1 MiB.\n" if landed else ":\n"))
    add("| transfer | H2D pageable µs | " + ("H2D landed µs | " if landed else "") + "H2D auto µs | ratio | " +
        ("ratio to landed | " if landed else "") + "D2H pageable µs | D2H auto µs | ratio |")
    add("|---|" + "---:|" * (8 if landed else 6))
    for size in sorted({r["bytes"] for r in rows(cond, "cpu-load")}):
        cells = []
        for d in ("h2d", "d2h"):
            a, p = one(cond, "cpu-load", d, size, "auto"), one(cond, "cpu-load", d, size, "pageable")
            l = one(cond, "cpu-load", d, size, "pageable-async")
            us = [f"{p['median_us']:.1f}" if p else "-", f"{a['median_us']:.1f}" if a else "-",
                  f"{p['median_us'] / a['median_us']:.2f}x" if a and p else "-"]
            if d == "h2d" and landed:
                us.insert(1, f"{l['median_us']:.1f}" if l else "-")
                us.append(f"{l['median_us'] / a['median_us']:.2f}x" if a and l else "-")
            cells += us
        add(f"| {human(size)} | " + " | ".join(cells) + " |")
    add("\nSeveral threads at once, each with its own buffer, stream and memory:\n")
    add("| threads | transfer | path | aggregate GB/s | bound GB/s | slowest / mean thread | CPU ms/GB |")
    add("|---:|---|---|---:|---:|---:|---:|")
    for r in rows(cond, "concurrent"):
        add(f"| {r['threads']} | {r['direction'].upper()} {human(r['bytes'])} | {r['path']} | {r['aggregate_gbps']:.1f} | "
            f"{r['bound_gbps']:.1f} | {r['min_thread_gbps']:.1f} / {r['mean_thread_gbps']:.1f} | "
            f"{r['cpu_us_per_gb'] / 1e3:.0f} |")
    add("")
    if peers:
        add("### Against PyTorch in the same fresh processes\n")
        add("`pinstage` is `Buffer.upload` / `download` through the Python module with a NumPy array and a CUDA")
        add("tensor; `torch-copy-in` copies into a reused pinned tensor then makes one DMA (and the mirror).\n")
        shares = any("pageable_share" in r for r in peers["results"])
        add("| transfer | process | pinstage µs | torch-copy-in/out µs | PyTorch / pinstage |"
            + (" pinstage's pageable route |" if shares else ""))
        add("|---|---:|---:|---:|---:|" + ("---:|" if shares else ""))
        for size in (FRAME, LARGE):
            for d in ("h2d", "d2h"):
                for p, (a, t) in per_process(peers, "fresh-process", d, size, "pinstage", "torch-copy-in").items():
                    share = f" {a['pageable_share']:.0%} |" if "pageable_share" in a else " - |"
                    add(f"| {d.upper()} {human(size)} | {p} | {a['median_us']:.1f} | {t['median_us']:.1f} | "
                        f"{t['median_us'] / a['median_us']:.2f}x |" + (share if shares else ""))
        add("")


def main():
    import argparse
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("conditions")
    ap.add_argument("peers_fresh", nargs="?")
    ap.add_argument("--plot")
    args = ap.parse_args()
    cond = json.load(open(args.conditions))
    peers = json.load(open(args.peers_fresh)) if args.peers_fresh else None
    if args.plot:
        plot(cond, args.plot)
    ts = targets(cond, peers)
    print("\n".join(table(ts)))
    return 0 if all(ok for *_, ok in ts) else 1


if __name__ == "__main__":
    sys.exit(main())
