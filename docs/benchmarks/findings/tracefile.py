# SPDX-License-Identifier: MIT
"""A PINSTAGE_TRACE file (format 1, see src/trace.c) as three dicts keyed by
transfer id: T[id] = (dir, bytes, chunks, seats, begin_ns, end_ns);
C[id] = [(chunk, what, at_ns)], what 0 opened 1 copied 2 enqueued 3 landed;
B[id] = [(chunk, thread, cpu, start_ns, end_ns)]. Read by arrivals.py and gaps.py."""


def read(path):
    T, B, C = {}, {}, {}
    for line in open(path):
        p = line.split()
        if not p or p[0] == '#':
            continue
        if p[0] == 'T':
            T[int(p[1])] = (p[2], int(p[3]), int(p[4]), int(p[5]), int(p[6]), int(p[7]))
        elif p[0] == 'B':
            B.setdefault(int(p[1]), []).append((int(p[2]), int(p[3]), int(p[4]), int(p[5]), int(p[6])))
        elif p[0] == 'C':
            C.setdefault(int(p[1]), []).append((int(p[2]), int(p[3]), int(p[4])))
    return T, B, C
