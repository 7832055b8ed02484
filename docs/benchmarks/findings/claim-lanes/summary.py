#!/usr/bin/env python3
"""Medians over rounds of each bench JSON's per-path medians: summary.py DIR NAME... (files DIR/NAME-N.json)."""
import collections, glob, json, statistics, sys

d, names = sys.argv[1], sys.argv[2:]
m = collections.defaultdict(list)
for n in names:
    for f in sorted(glob.glob(f"{d}/{n}-[0-9].json")):
        for x in json.load(open(f))["results"]:
            m[(x["direction"], x["bytes"], x["path"], n)].append(x["median_us"])
print("dir  bytes     path            " + " ".join(f"{n:>16}" for n in names))
print("                                " + " ".join(f"{'min/med/max us':>16}" for n in names))
for key in sorted({k[:3] for k in m}):
    cells = []
    for n in names:
        v = m.get(key + (n,))
        cells.append(f"{min(v):5.1f}/{statistics.median(v):5.1f}/{max(v):5.1f}" if v else " " * 16)
    print(f"{key[0]}  {key[1]:<9} {key[2]:<15} " + " ".join(f"{c:>16}" for c in cells))
