/* SPDX-License-Identifier: MIT */
/* What recent transfers achieved, and the route choice that follows.
 *
 * A profile is measured once, on an idle machine. Under CPU load the copy
 * engine's threads take turns with the program's own, and under memory load
 * they share its bandwidth; then the driver's pageable path can be the
 * faster one. So per direction and size class the time each of the two
 * candidates took in recent transfers is kept (the median of the last few,
 * per byte): the profile's route, and the other side of the pageable /
 * pinned-memory divide. The faster takes the transfer; the other is tried
 * now and then (a probe) so the estimate follows the machine. Process-wide,
 * since load is too. */
#ifndef PINSTAGE_ADAPT_H
#define PINSTAGE_ADAPT_H

#include <stdint.h>

#include "policy.h"

typedef struct ps_adapt_pick {
    ps_plan plan;    /* the route to take */
    int probe;       /* taken to measure it, not because it was faster */
    int overridden;  /* differs from the profile's choice because it measured faster */
    int timed;       /* to be timed and recorded (ps_adapt_record): a probe, every 8th transfer of
                        the route taken, or one whose route's newest sample is 100 ms old; no other
                        transfer's time is wanted */
} ps_adapt_pick;

/* The route for a transfer of pageable memory: `profiled` (the profile's
 * choice) or `other` (its counterpart across the pageable / pinned divide). */
ps_adapt_pick ps_adapt_choose(ps_direction dir, size_t bytes, ps_plan profiled, ps_plan other);

/* Around every transfer of pageable memory: how many are in progress. */
void ps_adapt_begin(void);
void ps_adapt_end(void);

/* A transfer that took `route` finished in `ns`. */
void ps_adapt_record(ps_direction dir, size_t bytes, int route, uint64_t ns);

/* A probe of the route through the copy engine had to wake the pool's
 * sleeping workers: the route taken (the pageable one) left them idle, so
 * the probe paid a wake-up a steady user of the engine does not, and the
 * engine, measured only that way, would never win back. Returns 1 when the
 * probe is not to be recorded and the next transfer of the class probes
 * again (warm); 0 when it already was a repeat (every transfer of the
 * program starts cold, as in a paced loop): record it. */
int ps_adapt_cold_probe(ps_direction dir, size_t bytes);

/* Whether adaptation is on process-wide (pinstage_set_adaptive, else
 * $PINSTAGE_ADAPTIVE, else on). */
int ps_adapt_enabled(void);

uint64_t ps_adapt_now_ns(void);

#endif
