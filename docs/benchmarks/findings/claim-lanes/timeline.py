#!/usr/bin/env python3
"""One traced transfer's timeline (PINSTAGE_TRACE file): timeline.py TRACE ID... -- chunk events and
blocks in microseconds from the transfer's start, blocks in the order they started."""
import collections, sys

T, C, B = {}, collections.defaultdict(list), collections.defaultdict(list)
for line in open(sys.argv[1]):
    p = line.split()
    if p[0] == "T":
        T[int(p[1])] = (int(p[6]), int(p[7]))
    elif p[0] == "C":
        C[int(p[1])].append((int(p[3]), int(p[4])))
    elif p[0] == "B":
        B[int(p[1])].append((int(p[3]), int(p[4]), int(p[5]), int(p[6])))
names = {0: "opened", 1: "copied", 2: "enqueued", 3: "landed"}
for i in map(int, sys.argv[2:]):
    b, e = T[i]
    print(f"transfer {i}: {(e - b) / 1e3:.1f} us")
    for what, at in C[i]:
        print(f"  chunk 0 {names[what]:<8} {(at - b) / 1e3:6.2f}")
    for th, cpu, s, en in sorted(B[i], key=lambda x: x[2]):
        print(f"  block thread {th:2d} cpu {cpu:2d}  {(s - b) / 1e3:5.2f} - {(en - b) / 1e3:5.2f}")
