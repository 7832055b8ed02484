#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Runs pinstage-bench on the emulated driver and checks its CSV, JSON and
text output against the schema documented in docs/benchmarks.md, and that it
fails clearly without a driver.

usage: check_bench_output.py PINSTAGE_BENCH LIBPINSTAGE_EMU
"""
import csv
import io
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

PATHS = ["pageable", "auto", "builtin", "staged", "engine", "pageable-route", "pinned-host", "resident", "pageable-async",
         "fresh-pin", "floor"]
CSV_COLUMNS = ["direction", "bytes", "label", "path", "reps", "median_us", "min_us", "p10_us",
               "p90_us", "gbps", "ratio_vs_pageable", "emulated"]
CONTEXT_KEYS = {"tool": str, "library_version": str, "date": str, "device": str,
                "compute_capability": str, "pci_bus_id": str, "pcie_link": str,
                "copy_engines": int, "driver_version": int, "driver_path": str, "emulated": bool,
                "host_cpu": str, "host_cores": int, "reps": int, "warmup": int, "budget_s": float,
                "method": str, "command": str, "sched": str, "host_alloc": str, "profile": str,
                "engine": str, "pool_workers": int, "paced_us": float}
SIZES = [4096, 150528]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)


def run(bench, env, *args):
    return subprocess.run([bench, *args], env=env, capture_output=True, text=True, timeout=240)


def check_record(rec, where):
    check(rec["direction"] in ("h2d", "d2h"), f"{where}: direction {rec['direction']}")
    check(int(rec["bytes"]) in SIZES, f"{where}: bytes {rec['bytes']}")
    check(rec["path"] in PATHS, f"{where}: path {rec['path']}")
    check(int(rec["reps"]) >= 1, f"{where}: reps")
    mn, p10, med, p90 = (float(rec[k]) for k in ("min_us", "p10_us", "median_us", "p90_us"))
    check(0 < mn <= p10 <= med <= p90, f"{where}: min <= p10 <= median <= p90 ({mn}, {p10}, {med}, {p90})")
    if "mean_us" in rec:  # JSON records: the mean of the same calls lies within them
        check(float(rec["mean_us"]) >= mn, f"{where}: mean >= min ({rec['mean_us']}, {mn})")
    gbps = float(rec["gbps"])
    check(abs(gbps - int(rec["bytes"]) / (med * 1e3)) <= 0.01 * gbps + 1e-3, f"{where}: gbps is bytes/median")
    if rec["path"] == "pageable":
        check(abs(float(rec["ratio_vs_pageable"]) - 1) < 1e-3, f"{where}: pageable ratio is 1")
    check(float(rec["ratio_vs_pageable"]) > 0, f"{where}: ratio")
    check(str(rec["emulated"]).lower() in ("1", "true"), f"{where}: marked emulated")


def check_peers_routes():
    """bench/conditions.py on peers.py rows: the PyTorch comparison names the route of the worst
    process's pinstage calls, and the per-process table gains a column for it."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
    import conditions
    frame = conditions.FRAME

    def row(process, path, us, share=None):
        r = {"condition": "fresh-process", "process": process, "direction": "h2d", "bytes": frame,
             "path": path, "median_us": us}
        if share is not None:
            r["pageable_share"] = share
        return r
    peers = {"results": [row(0, "pinstage", 150.0, 0.02), row(0, "torch-copy-in", 240.0),
                         row(1, "pinstage", 300.0, 0.75), row(1, "torch-copy-in", 270.0)]}
    context = {"command": "pinstage-bench --conditions", "date": "2026-12-03", "device": "emulated",
               "host_cores": 4}
    cond = {"context": context, "engine_threads": 4, "results": []}
    peers["context"] = {"command": "peers.py --fresh 2"}
    ts = [t for t in conditions.targets(cond, peers) if "copy-in" in t[0]]
    check(len(ts) == 1 and ts[0][2].startswith("0.90x") and "pageable route in 75% of calls" in ts[0][2]
          and not ts[0][3], f"conditions.py: the worst process and its route: {ts}")
    lines = []
    conditions.section(cond, peers, lines.append)
    table = [l for l in lines if l.startswith("| H2D")]
    check(len(table) == 2 and table[0].endswith("| 2% |") and table[1].endswith("| 75% |"),
          f"conditions.py: the per-process table's route column: {table}")
    for r in peers["results"]:
        r.pop("pageable_share", None)
    ts = [t for t in conditions.targets(cond, peers) if "copy-in" in t[0]]
    check(len(ts) == 1 and "pageable route" not in ts[0][2], "conditions.py: no route without the field")
    # The idle target: pinstage's workers, with the process's other threads beside them.
    cond["idle"] = {"cpu_us": 900.0, "window_s": 1.0, "pinstage_cpu_us": 0.0,
                    "threads": [{"name": "cuda-EvtHandlr", "threads": 2, "cpu_us": 700.0},
                                {"name": "measuring-thread", "threads": 1, "cpu_us": 200.0},
                                {"name": "pinstage-N", "threads": 14, "cpu_us": 0.0}]}
    ts = [t for t in conditions.targets(cond, None) if "idle" in t[0]]
    check(len(ts) == 1 and ts[0][3] and ts[0][2].startswith("0.0 µs (the process 0.90 ms")
          and "cuda-EvtHandlr x2 0.70 ms" in ts[0][2] and "pinstage-N" not in ts[0][2],
          f"conditions.py: the idle target names pinstage's workers: {ts}")
    cond["idle"]["pinstage_cpu_us"] = 3.0
    check(not [t for t in conditions.targets(cond, None) if "idle" in t[0]][0][3], "conditions.py: workers busy idle")
    del cond["idle"]["pinstage_cpu_us"]
    ts = [t for t in conditions.targets(cond, None) if "idle" in t[0]]
    check(len(ts) == 1 and ts[0][2] == "0.90 ms in 1 s" and ts[0][3], f"conditions.py: older JSON, the process: {ts}")
    # A figure that misses its limit never prints as the limit itself.
    check(conditions.near(0.8496, 0.85) == "0.8496" and conditions.near(0.851, 0.85) == "0.851"
          and conditions.near(0.85, 0.85) == "0.85" and conditions.near(0.9, 0.85) == "0.90",
          "conditions.py: near() adds digits only where two would read as the limit")
    warm_paced = {"context": context, "results": [
        {"condition": c, "direction": "d2h", "bytes": conditions.LARGE, "path": "auto", "median_us": us}
        for c, us in (("warm", 1000.0), ("paced", 1103.0))]}
    ts = [t for t in conditions.targets(warm_paced, None) if t[0].startswith("paced")]
    check(len(ts) == 1 and ts[0][2].startswith("1.103 (") and not ts[0][3],
          f"conditions.py: a paced time 1.103x warm reads as a miss: {ts}")
    # CPU load: small uploads against the landed pageable copy too, beside the target and in the table.
    loaded = {"context": context, "engine_threads": 4, "results": [
        {"condition": "cpu-load", "direction": "h2d", "bytes": 4096, "path": p, "median_us": us}
        for p, us in (("pageable", 6.0), ("auto", 8.0), ("pageable-async", 8.8))]}
    ts = [t for t in conditions.targets(loaded, None) if t[0].startswith("CPU load (")]
    check(len(ts) == 1 and ts[0][2].startswith("0.75x (4 KiB)") and ts[0][2].endswith("; 1.10x the landed copy")
          and not ts[0][3], f"conditions.py: the CPU load target and the landed copy: {ts}")
    lines = []
    conditions.section(loaded, None, lines.append)
    table = [l for l in lines if l.startswith("| 4 KiB |")]
    check(table == ["| 4 KiB | 6.0 | 8.8 | 8.0 | 0.75x | 1.10x | - | - | - |"],
          f"conditions.py: the CPU load table's landed columns: {table}")
    pointer = [l for l in lines if "findings.md#where-the-missed-targets-stand" in l]
    check(len(pointer) == 1, "conditions.py: a missed target points to where the findings explain it")
    met = {"context": context, "engine_threads": 4, "results": [
        {"condition": "cpu-load", "direction": "h2d", "bytes": 4096, "path": p, "median_us": us}
        for p, us in (("pageable", 6.0), ("auto", 5.0))]}
    lines = []
    conditions.section(met, None, lines.append)
    check(all(t[3] for t in conditions.targets(met, None))
          and not [l for l in lines if "where-the-missed-targets-stand" in l],
          "conditions.py: no pointer when every target is met")
    loaded["results"].pop()
    check([t for t in conditions.targets(loaded, None) if t[0].startswith("CPU load (")][0][2].endswith("below: 4 KiB"),
          "conditions.py: no landed ratio without its row")
    lines = []
    conditions.section(loaded, None, lines.append)
    table = [l for l in lines if l.startswith("| 4 KiB |") or l.startswith("| transfer | H2D pageable")]
    check(table == ["| transfer | H2D pageable µs | H2D auto µs | ratio | D2H pageable µs | D2H auto µs | ratio |",
                    "| 4 KiB | 6.0 | 8.0 | 0.75x | - | - | - |"],
          f"conditions.py: a run without landed rows keeps the table it had: {table}")
    # Paced rows: the CPU in the gap before each call beside the calls' own, where measured.
    def paced(path, cpu, gap=None):
        r = {"condition": "paced", "direction": "h2d", "bytes": frame, "path": path, "median_us": 100.0,
             "cpu_us_per_gb": cpu}
        if gap is not None:
            r["gap_cpu_us_per_gb"] = gap
        return r
    cond["results"] = [paced("auto", 400e3, 150e3), paced("pageable", 80e3, 2e3), paced("floor", 20e3, 1e3)]
    lines = []
    conditions.section(cond, None, lines.append)
    table = [l for l in lines if l.startswith("| paced |")]
    check(len(table) == 1 and table[0].endswith("| 400 + 150 before | 80 + 2 before |")
          and any("Paced CPU:" in l for l in lines), f"conditions.py: paced gap CPU: {table}")
    cond["results"] = [paced("auto", 400e3), paced("pageable", 80e3), paced("floor", 20e3)]
    lines = []
    conditions.section(cond, None, lines.append)
    table = [l for l in lines if l.startswith("| paced |")]
    check(len(table) == 1 and table[0].endswith("| 400 | 80 |") and not any("Paced CPU:" in l for l in lines),
          f"conditions.py: older paced rows: {table}")


def check_peers_blocks():
    """bench/peers.py's timing loop: every block after its settle sleep, the paths' blocks
    alternating, the first calls of a block untimed, the CPU op before each call outside the
    timing, and the route read from the buffer's counters around the timed calls only."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
    import peers
    now = [0]
    log = []

    class Stats:
        def __init__(self, n):
            self.pageable_transfers = n

    class Buf:
        calls = 0

        def stats(self):
            return Stats(self.calls)
    buf = Buf()

    def path(name, ns, pageable_every=0):
        def fn():
            log.append(name)
            now[0] += ns
            if name == "pinstage":
                buf.calls += 1 if pageable_every and len([x for x in log if x == name]) % pageable_every == 0 else 0
        return fn

    def op():
        log.append("op")
        now[0] += 1000000

    def sleep(s):
        log.append(("sleep", s))
    fns = {"torch-copy-in": path("torch-copy-in", 3000), "pinstage": path("pinstage", 2000, pageable_every=2)}
    samples, pageable = peers.time_blocks(fns, 7, {"pinstage": buf}, 0.02, op, sleep=sleep, clock=lambda: now[0])
    per_block = [peers.BLOCK_WARMUP + 7 // peers.PASSES + (p < 7 % peers.PASSES) for p in range(peers.PASSES)]
    check(len(samples["pinstage"]) == 7 and len(samples["torch-copy-in"]) == 7,
          f"peers.time_blocks: reps timed calls per path, warm-up calls untimed ({len(samples['pinstage'])})")
    check(set(samples["pinstage"]) == {2.0} and set(samples["torch-copy-in"]) == {3.0},
          f"peers.time_blocks: the CPU op is outside the timing ({set(samples['pinstage'])})")
    expected = []
    for p in range(peers.PASSES):
        for name in fns:
            expected.append(("sleep", 0.02))
            expected += ["op", name] * per_block[p]
    check(log == expected, "peers.time_blocks: blocks alternate, each after its sleep, the op before each call")
    # The fake buffer counts every second pinstage call as pageable; only timed calls count.
    start, counted = 0, 0
    for p in range(peers.PASSES):
        numbers = range(start + 1, start + per_block[p] + 1)
        counted += sum(1 for c in list(numbers)[peers.BLOCK_WARMUP:] if c % 2 == 0)
        start += per_block[p]
    check(pageable == {"torch-copy-in": 0, "pinstage": counted} and counted > 0,
          f"peers.time_blocks: pageable-route calls counted in timed calls only ({pageable}, want {counted})")
    log.clear()
    samples, _ = peers.time_blocks(fns, 3, {}, 0, None, sleep=sleep, clock=lambda: now[0])
    check("op" not in log and not any(isinstance(x, tuple) for x in log) and len(samples["pinstage"]) == 3,
          "peers.time_blocks: no sleep with settle 0, no op without one")


def main():
    bench, emu = sys.argv[1], sys.argv[2]
    env = dict(os.environ)
    env.pop("PINSTAGE_DRIVER", None)
    common = ["--emulate", "--driver", emu, "--sizes", "4K,150528", "--reps", "5", "--warmup", "1", "--quiet"]
    with tempfile.TemporaryDirectory() as tmp:
        # CSV to a file with -o.
        out_csv = os.path.join(tmp, "r.csv")
        r = run(bench, env, *common, "--format", "csv", "-o", out_csv)
        check(r.returncode == 0, f"csv run exit {r.returncode}: {r.stderr}")
        rows = list(csv.DictReader(open(out_csv)))
        check(list(rows[0].keys()) == CSV_COLUMNS if rows else False, "csv header")
        check(len(rows) == len(SIZES) * 2 * len(PATHS), f"csv has {len(rows)} rows")
        for i, row in enumerate(rows):
            check_record(row, f"csv row {i}")
        seen = {(r["direction"], int(r["bytes"]), r["path"]) for r in rows}
        check(len(seen) == len(rows), "csv: one row per direction x size x path")

        # JSON on stdout.
        r = run(bench, env, *common, "--format", "json")
        check(r.returncode == 0, f"json run exit {r.returncode}: {r.stderr}")
        doc = json.loads(r.stdout)
        check(doc.get("schema") == "pinstage-bench/1", "json schema name")
        ctx = doc.get("context", {})
        for key, typ in CONTEXT_KEYS.items():
            check(key in ctx and isinstance(ctx[key], typ if typ is not float else (int, float)),
                  f"json context.{key} of type {typ.__name__}")
        check(ctx.get("emulated") is True, "json context says emulated")
        results = doc.get("results", [])
        check(len(results) == len(SIZES) * 2 * len(PATHS), f"json has {len(results)} results")
        for i, rec in enumerate(results):
            check_record(rec, f"json result {i}")
            check("mean_us" in rec, f"json result {i} carries the mean")
        check(not any("gap_cpu_us_per_gb" in x for x in results), "no gap CPU without --paced")
        # Paths of upload / download say which share of their timed calls took the pageable
        # route: all of them with threshold 0, none with a fixed staging profile.
        share = {(x["path"], x["direction"], x["bytes"]): x.get("pageable_share") for x in results}
        for (path, d, b), v in share.items():
            where = f"json {path} {d} {b}: pageable_share {v}"
            if path in ("pageable-route",):
                check(v == 1, where)
            elif path in ("staged", "engine"):
                check(v == 0, where)
            elif path in ("auto", "builtin"):
                check(v is not None and 0 <= v <= 1, where)
            else:
                check(v is None, where)

        # Text: context lines, the emulated banner, the seed-shaped table.
        r = run(bench, env, *common, "--direction", "h2d", "--paths", "pageable,staged,resident")
        check(r.returncode == 0, f"text run exit {r.returncode}")
        lines = r.stdout.splitlines()
        check(lines and lines[0].startswith("# pinstage-bench"), "text starts with context lines")
        check(any("EMULATED DRIVER" in l for l in lines), "text banner marks emulation")
        data = [l for l in lines if l.startswith("h2d ")]
        check(len(data) == len(SIZES) * 3 and all(l.endswith("[emulated]") for l in data),
              "every text row marked emulated")
        check(not any(l.startswith("d2h ") for l in lines), "--direction h2d measured only h2d")

        # --paced: every call (6 here: 1 warm-up, 5 timed) after the idle; the context says so.
        began = time.monotonic()
        r = run(bench, env, *common, "--sizes", "4K", "--direction", "h2d", "--paths", "pageable",
                "--paced", "20000", "--format", "json")
        took = time.monotonic() - began
        check(r.returncode == 0, f"--paced exit {r.returncode}: {r.stderr}")
        check(took >= 6 * 0.020, f"--paced 20000: 6 calls took {took:.3f} s, under 6 idle times")
        paced_doc = json.loads(r.stdout)
        check(paced_doc["context"]["paced_us"] == 20000, "json context.paced_us")
        check(paced_doc["context"].get("pace_copy") is True, "json context.pace_copy: the other copy by default")
        check(all(x.get("gap_cpu_us_per_gb", -1) >= 0 for x in paced_doc["results"]),
              "paced rows carry the other threads' CPU in the gap")
        r = run(bench, env, *common, "--sizes", "4K", "--direction", "d2h", "--paths", "pageable,auto",
                "--paced", "100", "--cold")
        check(r.returncode == 0 and any(l.startswith("# paced: each call after 100 us") for l in r.stdout.splitlines()),
              f"--paced with --cold, d2h: exit {r.returncode}, text names the pacing")
        # --pace-copy no: the idle alone, still before every call.
        began = time.monotonic()
        r = run(bench, env, *common, "--sizes", "4K", "--direction", "h2d", "--paths", "pageable",
                "--paced", "20000", "--pace-copy", "no", "--format", "json")
        took = time.monotonic() - began
        check(r.returncode == 0, f"--pace-copy no exit {r.returncode}: {r.stderr}")
        check(took >= 6 * 0.020, f"--paced 20000 --pace-copy no: 6 calls took {took:.3f} s, under 6 idle times")
        check(json.loads(r.stdout)["context"].get("pace_copy") is False, "json context.pace_copy false")
        # No memory for the other copy either: the second device allocation (the first is the measured
        # transfer's) fails in both runs, and only the run with the copy asks for it.
        second_alloc_fails = dict(env, PINSTAGE_EMU_FAIL="cuMemAlloc:2:2")
        paced_4k = ("--emulate", "--driver", emu, "--reps", "5", "--warmup", "1", "--quiet", "--sizes", "4K",
                    "--direction", "h2d", "--paths", "pageable", "--paced", "100")
        r = run(bench, second_alloc_fails, *paced_4k)
        check(r.returncode != 0 and "device memory" in r.stderr, f"--paced allocates the other copy's memory: {r.stderr}")
        r = run(bench, second_alloc_fails, *paced_4k, "--pace-copy", "no")
        check(r.returncode == 0, f"--pace-copy no allocates nothing for another copy: {r.stderr}")
        r = run(bench, env, *common, "--sizes", "4K", "--direction", "d2h", "--paths", "auto",
                "--paced", "100", "--pace-copy", "no")
        check(r.returncode == 0 and any(l == "# paced: each call after 100 us of sleep, no other copy"
                                        for l in r.stdout.splitlines()),
              f"--pace-copy no, d2h: exit {r.returncode}, text says there is no other copy")
        # --pace-wait spin: the gap busy-waited, so the process's CPU time holds every gap (7 calls of
        # 50 ms here: 1 warm-up, 5 timed, in 3 passes at least); slept, it holds none of them.
        paced_spin = ("--emulate", "--driver", emu, "--reps", "5", "--warmup", "1", "--quiet", "--sizes", "4K",
                      "--direction", "h2d", "--paths", "pageable", "--paced", "50000", "--pace-copy", "no",
                      "--format", "json")
        cpu = {}
        for wait in ("sleep", "spin"):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            r = run(bench, env, *paced_spin, "--pace-wait", wait)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu[wait] = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
            check(r.returncode == 0 and json.loads(r.stdout)["context"].get("pace_wait") == wait,
                  f"--pace-wait {wait}: exit {r.returncode}, json context.pace_wait: {r.stderr}")
        check(cpu["spin"] >= 6 * 0.050 * 0.9 and cpu["spin"] - cpu["sleep"] >= 6 * 0.050 * 0.6,
              f"--pace-wait spin keeps the CPU through the gaps: {cpu}")
        # --pace-touch yes: said in the context and the text, with the other parts of the gap.
        r = run(bench, env, *common, "--sizes", "4K", "--direction", "d2h", "--paths", "auto",
                "--paced", "100", "--pace-copy", "no", "--pace-wait", "spin", "--pace-touch", "yes")
        check(r.returncode == 0 and any(l == "# paced: each call after 100 us of busy-waiting, no other copy, "
                                             "then its host memory read once" for l in r.stdout.splitlines()),
              f"--pace-touch yes, text: exit {r.returncode}: {r.stderr}")
        touched = json.loads(run(bench, env, *paced_4k, "--pace-touch", "yes", "--format", "json").stdout)["context"]
        check(touched.get("pace_touch") is True and touched.get("pace_copy") is True
              and touched.get("pace_wait") == "sleep", f"json context with --pace-touch yes: {touched}")
        check(paced_doc["context"].get("pace_touch") is False and paced_doc["context"].get("pace_wait") == "sleep",
              "json context: no touch, sleep by default")
        r = run(bench, env, *common, "--sizes", "4K", "--direction", "h2d", "--paths", "pageable")
        check(not any(l.startswith("# paced") for l in r.stdout.splitlines()), "no pacing line without --paced")
        check('"pace_copy"' not in run(bench, env, *common, "--sizes", "4K", "--direction", "h2d", "--paths",
                                       "pageable", "--format", "json").stdout, "no pace_copy without --paced")

        # Errors: no driver, bad options.
        r = run(bench, env, "--driver", "/nonexistent/libcuda.so.1", "--quiet")
        check(r.returncode != 0 and "--emulate" in r.stderr, "no driver: non-zero exit that points to --emulate")
        for bad in (["--paths", "nosuch"], ["--sizes", "12Q"], ["--format", "xml"], ["--sweep", "8M:4K"],
                    ["--reps", "3x"], ["--device", "abc"], ["--budget", "2s"], ["--engine", "1M"],
                    ["--engine", "1Q:4"], ["--sched", "fast"], ["--host-alloc", "mmap"],
                    ["--pool-threads", "-1"], ["--paths", ",".join(["auto"] * 33)], ["--paced", "x"],
                    ["--paced", "2e6"], ["--paced", "-1"], ["--paced", "nan"], ["--pace-copy", "no"],
                    ["--paced", "100", "--pace-copy", "maybe"], ["--pace-wait", "spin"],
                    ["--pace-touch", "yes"], ["--paced", "100", "--pace-wait", "nap"],
                    ["--paced", "100", "--pace-touch", "1"]):
            r = run(bench, env, *common, *bad)
            check(r.returncode == 2 and "Segmentation" not in r.stderr, f"{bad} is refused (exit {r.returncode})")

        # --calibrate writes a profile that --profile reads back for "auto".
        fast = dict(env, PINSTAGE_EMU_LATENCY_US="1", PINSTAGE_EMU_BANDWIDTH_GBPS="1000")
        profile = os.path.join(tmp, "profile.txt")
        r = run(bench, fast, "--emulate", "--driver", emu, "--calibrate", profile)
        check(r.returncode == 0, f"--calibrate exit {r.returncode}: {r.stderr}")
        text = open(profile).read() if os.path.exists(profile) else ""
        check(text.startswith("pinstage-profile 1\norigin measured\n"), "--calibrate wrote a measured profile")
        check(text.count("\nh2d ") == 33 and text.count("\nd2h ") == 33, "the profile has every size class")
        check(r.stdout.startswith("pinstage-profile 1"), "--calibrate prints the profile")
        r = run(bench, fast, *common, "--paths", "auto", "--profile", profile, "--format", "json")
        check(r.returncode == 0 and json.loads(r.stdout)["context"]["profile"] == profile,
              f"--profile is used and reported: {r.stderr}")
        with open(profile, "a") as f:
            f.write("trailing\n")
        r = run(bench, fast, *common, "--paths", "auto", "--profile", profile)
        check(r.returncode != 0 and "text after 'end'" in r.stderr, "a damaged profile is refused with the reason")
        # --pipeline: the frame pipeline's JSON, both pipelines and the call-return figures.
        r = run(bench, fast, "--emulate", "--driver", emu, "--pipeline", "--frames", "4", "--fill", "0,1",
                "--ring-slots", "3", "--format", "json", "--quiet")
        check(r.returncode == 0, f"--pipeline exit {r.returncode}: {r.stderr}")
        doc = json.loads(r.stdout) if r.returncode == 0 else {}
        check(doc.get("schema") == "pinstage-bench-pipeline/1", "pipeline schema name")
        check(doc.get("context", {}).get("emulated") is True, "pipeline context says emulated")
        check(doc.get("frame_bytes") == 640 * 640 * 3 * 4 and doc.get("ring_slots") == 3, "pipeline frame and slots")
        pipes = doc.get("pipelines", [])
        check([p["fill_multiple"] for p in pipes] == [0, 1], "one pipeline entry per --fill value")
        for p in pipes:
            check(len(p["sync_fps_rounds"]) == 5 and len(p["ring_fps_rounds"]) == 5, "five rounds each")
            check(p["sync_fps"] > 0 and p["ring_fps"] > 0 and abs(p["ratio"] - p["ring_fps"] / p["sync_fps"]) < 1e-3,
                  "fps and their ratio")
        call = doc.get("call_return", {})
        check(call.get("upload_with_async_us", 0) > 0 and call.get("upload_with_us", 0) > 0, "call-return figures")
        check(doc.get("ring_stats", {}).get("pinned_allocations") == 3, "the ring pinned once per slot")
        for bad in (["--fill", "x"], ["--frames", "0"], ["--ring-slots", "65"]):
            r = run(bench, env, *common, "--pipeline", *bad)
            check(r.returncode == 2, f"{bad} is refused (exit {r.returncode})")
        # --soak: verified transfers on threads, every figure in the JSON.
        r = run(bench, fast, "--emulate", "--driver", emu, "--soak", "300", "--soak-threads", "3", "--format", "json")
        check(r.returncode == 0, f"--soak exit {r.returncode}: {r.stderr}")
        doc = json.loads(r.stdout) if r.returncode == 0 else {}
        check(doc.get("schema") == "pinstage-bench-soak/1", "soak schema name")
        check(doc.get("transfers") == 300 and doc.get("threads") == 3, "soak transfers and threads")
        check(doc.get("errors") == 0 and doc.get("mismatches") == 0, "soak: no errors, no mismatches")
        check(doc.get("pinned_bytes_after_free") == 0, "soak: every pinned byte released at the end")
        check(doc.get("rss_kib_at_end", 0) > 0 and doc.get("bytes", 0) > 0, "soak: RSS and bytes reported")
        for bad in (["--soak", "1"], ["--soak", "x"], ["--soak-threads", "0"]):
            r = run(bench, env, *common, *bad)
            check(r.returncode == 2, f"{bad} is refused (exit {r.returncode})")
        # --devices: each device alone and together, NUMA nodes, the bound named.
        devices_env = dict(fast, PINSTAGE_EMU_DEVICES="2", PINSTAGE_EMU_NUMA="0,0")
        r = run(bench, devices_env, "--emulate", "--driver", emu, "--devices", "all", "--sizes", "256K",
                "--budget", "0.05", "--format", "json", "--quiet")
        check(r.returncode == 0, f"--devices exit {r.returncode}: {r.stderr}")
        doc = json.loads(r.stdout) if r.returncode == 0 else {"results": [], "devices": []}
        check(doc.get("schema") == "pinstage-bench-devices/1", "devices schema name")
        check([d["device"] for d in doc["devices"]] == [0, 1], "devices: both measured")
        check(all(d["gpu_node"] == 0 for d in doc["devices"]), "devices: the GPU's node from the driver")
        check(doc.get("host_copy_gbps", 0) > 0, "devices: the host memcpy ceiling")
        check({(x["direction"], x["path"]) for x in doc["results"]} ==
              {("h2d", "floor"), ("h2d", "auto"), ("d2h", "floor"), ("d2h", "auto")}, "devices: every row")
        for x in doc["results"]:
            check(len(x["alone_gbps"]) == 2 and all(v > 0 for v in x["alone_gbps"] + x["together_gbps"]),
                  f"devices: figures of {x['direction']} {x['path']}")
            check(abs(x["sum_alone_gbps"] - sum(x["alone_gbps"])) < 0.01, "devices: the sum of the single figures")
            check(x["bound"] in ("sum of each device alone", "host memcpy ceiling"), "devices: the bound named")
            check(abs(x["aggregate_over_bound"] - x["aggregate_gbps"] / x["bound_gbps"]) < 0.01, "devices: ratio")
        for bad in (["--devices", "7"], ["--devices", "x"]):
            r = run(bench, devices_env, "--emulate", "--driver", emu, *bad)
            check(r.returncode == 2, f"{bad} is refused (exit {r.returncode})")
        # --conditions: every condition, its rows' fields, the fresh processes' bounds.
        r = run(bench, fast, "--emulate", "--driver", emu, "--conditions", "--processes", "2", "--sizes", "150528,1M",
                "--sweep", "4K:8K", "--format", "json", "--quiet")
        check(r.returncode == 0, f"--conditions exit {r.returncode}: {r.stderr}")
        doc = json.loads(r.stdout) if r.returncode == 0 else {"results": []}
        check(doc.get("schema") == "pinstage-bench-conditions/1", "conditions schema name")
        check(doc.get("context", {}).get("emulated") is True and doc.get("processes") == 2, "conditions context")
        idle = doc.get("idle", {})
        check(idle.get("window_s") == 1.0, "conditions idle figure")
        # The idle second by thread: pinstage's workers named and parked, the measuring thread apart,
        # and every microsecond of the process's in some group.
        # (Where the machine was too busy to seat a worker, the pool never started: no group, 0.)
        groups = {g["name"]: g for g in idle.get("threads", [])}
        check(idle.get("pinstage_cpu_us") == groups.get("pinstage-N", {}).get("cpu_us", 0.0) and idle["pinstage_cpu_us"] < 1,
              f"idle: pinstage's parked workers used no CPU ({idle.get('pinstage_cpu_us')}, {groups})")
        check("measuring-thread" in groups, "idle: the measuring thread apart")
        check(sum(g["cpu_us"] for g in groups.values()) >= idle.get("cpu_us", 0) - 1, "idle: the groups hold the whole")
        rows = doc["results"]
        seen = {x["condition"] for x in rows}
        check(seen == {"fresh-process", "warm", "paced", "cpu-load", "mem-load", "concurrent"},
              f"every condition measured: {sorted(seen)}")
        for x in rows:
            check(x["direction"] in ("h2d", "d2h") and x["path"] in ("pageable", "auto", "floor") or
                  x["path"] == "pageable-async" and x["condition"] == "cpu-load" and x["direction"] == "h2d" and
                  x["bytes"] <= 1 << 20, f"row {x}")
            check(x["median_us"] > 0 and x["cpu_us_per_gb"] >= 0, f"row figures {x}")
            check(x["mean_us"] > 0 and (x["reps"] > 1 or x["mean_us"] == x["median_us"]), f"row mean {x}")
            # auto is upload / download: which route its timed calls took.
            if x["path"] == "auto":
                check(0 <= x.get("pageable_share", -1) <= 1, f"auto rows carry their pageable share {x}")
            if x["path"] != "auto":
                check("pageable_share" not in x, f"only auto rows carry a pageable share {x}")
            # The governor's thread count: auto rows of governed sizes (16 MiB up) only.
            check("engine_threads" not in x or (x["path"] == "auto" and x["bytes"] >= 16 << 20 and
                                                x["engine_threads"] > 0), f"engine_threads where governed {x}")
            # The other threads' CPU in the gap before each call: paced rows only.
            check((x.get("gap_cpu_us_per_gb", -1) >= 0) == (x["condition"] == "paced"),
                  f"gap CPU on paced rows only {x}")
        fresh = [x for x in rows if x["condition"] == "fresh-process"]
        check({x["process"] for x in fresh} == {0, 1} and len(fresh) == 2 * 2 * 2 * 3, "fresh rows per process")
        check(all(x.get("bound_us", 0) > 0 for x in fresh if x["path"] == "auto"), "auto rows carry their bound")
        conc = [x for x in rows if x["condition"] == "concurrent"]
        check(sorted({x["threads"] for x in conc}) == [2, 4, 8] and all(x["bytes"] == 1 << 20 for x in conc),
              "concurrent rows: 2, 4, 8 threads at 1 MiB")
        check(all(x["aggregate_gbps"] > 0 and x["min_thread_gbps"] <= x["mean_thread_gbps"] for x in conc),
              "concurrent figures")
        check({x["bytes"] for x in rows if x["condition"] == "cpu-load"} == {4096, 8192, 150528, 1 << 20},
              "the cpu-load sweep and the sizes")
        # Small uploads under load against the landed pageable copy as well: every h2d size up to 1 MiB.
        landed = {(x["direction"], x["bytes"]) for x in rows if x["path"] == "pageable-async"}
        check(landed == {("h2d", b) for b in (4096, 8192, 150528, 1 << 20)}, f"cpu-load uploads landed: {landed}")
        r = run(bench, env, "--emulate", "--driver", emu, "--conditions", "--processes", "0")
        check(r.returncode == 2, "--processes 0 is refused")
        # --trace reads what PINSTAGE_TRACE wrote.
        trace = os.path.join(tmp, "trace.txt")
        r = run(bench, dict(fast, PINSTAGE_TRACE=trace), *common, "--paths", "engine", "--sizes", "1M")
        check(r.returncode == 0 and os.path.exists(trace), "a traced run writes its trace at exit")
        r = run(bench, env, "--trace", trace)
        lines = [x for x in r.stdout.splitlines() if x and not x.startswith("#")]
        check(r.returncode == 0 and len(lines) > 2 and lines[1].split()[1] in ("h2d", "d2h"), "--trace summarizes it")
        # The thread time in blocks and its share of the seated threads' time:
        # never more than the threads had; some copying (a 4 KiB block may
        # take under 0.05 us and print as 0.0).
        rows = [x.split() for x in lines[1:]]
        check(lines[0].split()[-2:] == ["copying_us", "use"] and rows and
              all(float(x[-2]) >= 0 and 0 <= float(x[-1]) <= 1.05 for x in rows) and
              sum(float(x[-2]) for x in rows) > 0, "--trace gives each transfer's copying time and its share")
    check_peers_routes()
    check_peers_blocks()
    print(f"{len(failures)} failed" if failures else "bench output ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
