#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Plots pinstage-bench / peers.py JSON files (schema pinstage-bench/1).

usage: plot.py OUTDIR FILE.json [FILE.json ...]

Writes, for each direction present:
  OUTDIR/time_h2d.png, time_d2h.png       median time vs size, log-log, every path
  OUTDIR/speedup_h2d.png, speedup_d2h.png pinstage-bench paths: pageable median / path median
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# More paths than the default ten colours: a twenty-colour cycle keeps them apart.
plt.rcParams["axes.prop_cycle"] = plt.cycler(color=plt.get_cmap("tab20").colors)


def load(files):
    records, contexts = [], []
    for f in files:
        doc = json.load(open(f))
        if doc.get("schema") != "pinstage-bench/1":
            raise SystemExit(f"{f}: not a pinstage-bench/1 file")
        ctx = doc["context"]
        contexts.append(ctx)
        for r in doc["results"]:
            r = dict(r)
            r["tool"] = ctx["tool"]
            records.append(r)
    return records, contexts


def series(records, direction, key):
    out = {}
    for r in records:
        if r["direction"] != direction:
            continue
        out.setdefault(r["path"], []).append((r["bytes"], r[key]))
    return {k: sorted(v) for k, v in out.items()}


def finish(fig, ax, ylabel, title, path):
    """Axes, labels and legend every plot shares, then write it."""
    ax.set_xscale("log", base=2)
    ax.set_xlabel("transfer size (bytes)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    outdir, files = sys.argv[1], sys.argv[2:]
    os.makedirs(outdir, exist_ok=True)
    records, contexts = load(files)
    device = contexts[0].get("device", "")
    emulated = any(c.get("emulated") for c in contexts)
    note = " (EMULATED: not GPU figures)" if emulated else ""
    for direction in ("h2d", "d2h"):
        data = series(records, direction, "median_us")
        if not data:
            continue
        fig, ax = plt.subplots(figsize=(9, 6))
        for path, pts in sorted(data.items()):
            style = "--" if path.startswith(("torch", "cupy")) else "-"
            ax.plot([p[0] for p in pts], [p[1] for p in pts], style, marker="o", markersize=3, label=path)
        ax.set_yscale("log")
        finish(fig, ax, "median time per synchronous call (µs)", f"{direction.upper()} on {device}{note}",
               os.path.join(outdir, f"time_{direction}.png"))

        own = [r for r in records if r["tool"] == "pinstage-bench"]
        ratios = series(own, direction, "ratio_vs_pageable")
        if ratios:
            fig, ax = plt.subplots(figsize=(9, 5))
            for path, pts in sorted(ratios.items()):
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3, label=path)
            ax.axhline(1.0, color="black", linewidth=0.8)
            finish(fig, ax, "speed-up over the driver's pageable path (x)",
                   f"{direction.upper()} speed-up, measured side by side{note}",
                   os.path.join(outdir, f"speedup_{direction}.png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
