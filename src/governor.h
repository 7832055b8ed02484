/* SPDX-License-Identifier: MIT */
/* How many threads an engine transfer's host copy gets.
 *
 * Every thread the pool has keeps the host copy of a transfer short, but
 * once the copy runs ahead of the DMA the threads only wait for slots, and
 * a waiting thread spins: a 4.7 MiB upload on the H200 machine used 15 CPUs
 * for its 132 us, 408 ms of CPU per GB against the driver's pageable path's
 * 77. How many threads keep up depends on where the source lies (a cache
 * or memory) and on what the machine's other tenants take, so it is
 * measured, not tabled: per direction and size class, the share of its
 * threads' time a transfer's copy used (copying time over threads x wall
 * time), in windows of 8 transfers. Well below half, the next transfers get
 * fewer threads, enough for about two thirds; the cut is kept only if its
 * window's median time is within 3% of a window at the profile's count run
 * right after it (else the count before the cut becomes the floor). Every
 * 64 windows the count in force is judged that way again and the floor
 * forgotten. Near full use, more threads again, up to the profile's count.
 * Transfers under 16 MiB are left alone: their copy is mostly the
 * pipeline's fill, which every thread shortens, and a frame loop's idle
 * between them hides what fewer threads cost from the check. On an H100
 * machine, paced 4.7 MiB uploads (5 ms idle and another copy before each)
 * were cut to 4 threads and took 254 us (checked against a reference) and
 * 525 us (against control windows, on a busier machine), against 177 and
 * 402 us without the governor in the same runs; back to back the check
 * kept them at every thread, so governing them saved nothing there. */
#ifndef PINSTAGE_GOVERNOR_H
#define PINSTAGE_GOVERNOR_H

#include <stdint.h>

#include "policy.h"

/* Transfers this large or larger are governed. */
#define PS_GOVERNED_MIN ((size_t)16 << 20)

/* A window's mean use below PS_GOVERNOR_IDLE: fewer threads, enough for
 * PS_GOVERNOR_TARGET (at most half as many at a step); above
 * PS_GOVERNOR_BUSY: up to half as many more; between them the count holds.
 * Here and not in governor.c so that the tests follow them. */
#define PS_GOVERNOR_IDLE 0.5
#define PS_GOVERNOR_TARGET 0.65
#define PS_GOVERNOR_BUSY 0.8

/* The threads (the caller included) the next transfer of `bytes` gets, at
 * most `most` (the profile's count, or the pool's workers and the caller). */
unsigned ps_governor_threads(ps_direction dir, size_t bytes, unsigned most);

/* A transfer of `bytes` asked for `asked` threads and ran with `used`; its
 * blocks took `copy_ns` in all, the transfer `wall_ns`. */
void ps_governor_record(ps_direction dir, size_t bytes, unsigned asked, unsigned used, uint64_t copy_ns,
                        uint64_t wall_ns);

/* What it decided for the class of `bytes`: the threads transfers get now
 * (0: none governed yet) and how often that changed. */
void ps_governor_info(ps_direction dir, size_t bytes, unsigned *threads, uint64_t *changes);

/* Forgets everything (pinstage_route_reset). */
void ps_governor_reset(void);

/* How much slower than the control window a cut may be and stay (0.03);
 * negative: back to that. For tests whose emulated timings are too noisy
 * on a shared machine for the 3% check, which its own tests cover. */
void ps_governor_set_tolerance(double tolerance);

#endif
