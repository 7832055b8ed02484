/* SPDX-License-Identifier: MIT */
/* The copy's thread count from the share of its threads' time it used,
 * each cut kept only if it costs no time (governor.h). One lock guards the
 * table; a transfer holds it twice, for well under a microsecond. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "governor.h"

/* Transfers in a window: the unit every decision is made on. */
#define WINDOW 8u
/* A cut is kept while its window's median time is within SLOWER of a
 * window at the profile's count run right after it: the same source, the
 * same neighbours. Against a reference measured once, early in the process,
 * paced 4.7 MiB uploads on an H100 machine were cut to 4 threads and took
 * 254 us, against 177 us without the governor. Where a short pipeline's
 * copy lies on the critical path (a 4.7 MiB download's copy-out follows
 * each DMA) threads that are idle half the time still shorten it: such
 * downloads took 141-148 us with 15 threads and 259-263 us once use alone
 * had cut them to 3-4. A rejected cut makes the count before it the floor. */
#define SLOWER 0.03
static double slower = SLOWER; /* under the lock; tests widen it */
/* Windows between checks of the count in force against the profile's, and
 * fresh floors: the machine's load and the source's place change. */
#define RECHECK 64u
/* The caller and one worker: the caller also makes the driver calls. */
#define FEWEST 2u

typedef enum {
    WARMING,   /* the first window at the profile's count: not measured */
    GOVERNING, /* windows at the decided count */
    CONTROL    /* one window at the profile's count, to judge the decided one */
} phase;

typedef struct {
    unsigned threads;  /* what transfers get now; 0: not yet governed */
    unsigned count;    /* the decided count (threads, but for a control window) */
    unsigned most;     /* the profile's count */
    unsigned floor;    /* no cut below this */
    unsigned previous; /* the count a cut on trial came from; 0: none */
    phase phase;
    double trial_ns;  /* the median time of the window being judged */
    unsigned windows; /* since the last check */
    double use_sum;
    uint64_t wall[WINDOW];
    unsigned n;
    uint64_t changes; /* of the decided count */
} class_state;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static class_state table[2][PS_CLASSES];

static void decide_count(class_state *c, unsigned count) {
    if (count != c->count) c->changes++;
    c->count = count;
    c->threads = count;
}

/* The window just measured at the decided count is judged against one at
 * the profile's count, run next. */
static void judge(class_state *c, double median_ns, unsigned fallback) {
    c->trial_ns = median_ns;
    c->previous = fallback;
    c->phase = CONTROL;
    c->threads = c->most;
}

unsigned ps_governor_threads(ps_direction dir, size_t bytes, unsigned most) {
    if (bytes < PS_GOVERNED_MIN || most <= FEWEST) return most;
    pthread_mutex_lock(&lock);
    class_state *c = &table[dir][ps_size_class(bytes)];
    /* A new cap (the pool resized, another profile): start from it. */
    if (c->most != most) {
        c->most = most;
        c->count = c->threads = most;
        c->floor = FEWEST;
        c->previous = 0;
        c->phase = WARMING;
        c->windows = 0;
        c->n = 0;
        c->use_sum = 0;
    }
    unsigned threads = c->threads;
    pthread_mutex_unlock(&lock);
    return threads;
}

static int compare_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* A window is complete: what it says about the count in force. */
static void decide(class_state *c, unsigned used, double use, double median_ns) {
    switch (c->phase) {
    case WARMING:
        c->phase = GOVERNING;
        return;
    case CONTROL:
        c->phase = GOVERNING;
        c->threads = c->count;
        if (c->trial_ns > median_ns * (1 + slower)) {
            /* Fewer threads cost time: back, and no lower until the next check. */
            decide_count(c, c->previous);
            c->floor = c->previous;
        }
        c->previous = 0;
        return;
    case GOVERNING:
        if (c->previous) {
            judge(c, median_ns, c->previous);
            return;
        }
        if (++c->windows >= RECHECK) {
            c->windows = 0;
            c->floor = FEWEST;
            if (c->count < c->most) {
                judge(c, median_ns, c->most);
                return;
            }
        }
        break;
    }
    if (use < PS_GOVERNOR_IDLE && c->count > c->floor) {
        /* Enough threads for the target use at the use measured, at most
         * halving (the copy speeds up per thread as threads drop). */
        unsigned want = (unsigned)((double)used * use / PS_GOVERNOR_TARGET) + 1;
        if (want < (c->count + 1) / 2) want = (c->count + 1) / 2;
        if (want < c->floor) want = c->floor;
        if (want < c->count) {
            c->previous = c->count;
            decide_count(c, want);
        }
    } else if (use > PS_GOVERNOR_BUSY && used >= c->count && c->count < c->most) {
        /* Copy-bound with every thread asked for: more. With fewer than
         * asked (the pool was shared) more would not come. */
        unsigned want = c->count + (c->count + 1) / 2;
        decide_count(c, want < c->most ? want : c->most);
    }
}

void ps_governor_record(ps_direction dir, size_t bytes, unsigned asked, unsigned used, uint64_t copy_ns,
                        uint64_t wall_ns) {
    if (bytes < PS_GOVERNED_MIN || !used || !wall_ns) return;
    double use = (double)copy_ns / ((double)used * (double)wall_ns);
    pthread_mutex_lock(&lock);
    class_state *c = &table[dir][ps_size_class(bytes)];
    /* Only samples of the count in force: one taken before a change, or
     * under another cap, says nothing about it. */
    if (c->threads && asked == c->threads) {
        c->use_sum += use;
        c->wall[c->n] = wall_ns;
        if (++c->n == WINDOW) {
            qsort(c->wall, WINDOW, sizeof c->wall[0], compare_u64);
            double median = (double)(c->wall[WINDOW / 2 - 1] + c->wall[WINDOW / 2]) / 2;
            decide(c, used, c->use_sum / WINDOW, median);
            c->use_sum = 0;
            c->n = 0;
        }
    }
    pthread_mutex_unlock(&lock);
}

void ps_governor_info(ps_direction dir, size_t bytes, unsigned *threads, uint64_t *changes) {
    pthread_mutex_lock(&lock);
    const class_state *c = &table[dir][ps_size_class(bytes)];
    *threads = bytes < PS_GOVERNED_MIN ? 0 : c->count;
    *changes = c->changes;
    pthread_mutex_unlock(&lock);
}

void ps_governor_reset(void) {
    pthread_mutex_lock(&lock);
    memset(table, 0, sizeof table);
    pthread_mutex_unlock(&lock);
}

void ps_governor_set_tolerance(double tolerance) {
    pthread_mutex_lock(&lock);
    slower = tolerance < 0 ? SLOWER : tolerance;
    pthread_mutex_unlock(&lock);
}
