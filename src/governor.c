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
/* Mean use below IDLE: try fewer threads, enough for TARGET (at most half
 * as many at a step); above BUSY: up to half as many more. */
#define IDLE 0.5
#define TARGET 0.65
#define BUSY 0.8
/* A cut is kept while its window's median time is within SLOWER of the
 * reference (the count the profile gives); else the count before the cut
 * becomes the floor. Where a short pipeline's copy lies on the critical
 * path (a 4.7 MiB download's copy-out follows each DMA) threads that are
 * idle half the time still shorten it: on an H100 machine such downloads
 * took 141-148 us with 15 threads and 259-263 us once use alone had cut
 * them to 3-4. */
#define SLOWER 0.03
/* Windows between fresh references: the machine's load and the source's
 * place (a cache, memory) change. */
#define RECHECK 64u
/* The caller and one worker: the caller also makes the driver calls. */
#define FEWEST 2u

typedef enum {
    WARMING,   /* the first window at the reference count: not measured */
    REFERENCE, /* measuring the reference count's time */
    GOVERNING
} phase;

typedef struct {
    unsigned threads; /* what transfers get now; 0: not yet governed */
    unsigned most;    /* the reference: the cap it was set under */
    unsigned floor;   /* no cut below this */
    unsigned trial;   /* the count a cut on trial came from; 0: none */
    phase phase;
    double reference_ns; /* the median time at `most` */
    unsigned windows;    /* since the reference was measured */
    double use_sum;
    uint64_t wall[WINDOW];
    unsigned n;
    uint64_t changes;
} class_state;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static class_state table[2][PS_CLASSES];

static void set_threads(class_state *c, unsigned threads) {
    if (threads != c->threads) c->changes++;
    c->threads = threads;
}

/* Back to the reference count, to measure it afresh. */
static void restart(class_state *c) {
    set_threads(c, c->most);
    c->floor = FEWEST;
    c->trial = 0;
    c->phase = WARMING;
    c->windows = 0;
}

unsigned ps_governor_threads(ps_direction dir, size_t bytes, unsigned most) {
    if (bytes < PS_GOVERNED_MIN || most <= FEWEST) return most;
    pthread_mutex_lock(&lock);
    class_state *c = &table[dir][ps_size_class(bytes)];
    /* A new cap (the pool resized, another profile): start from it. */
    if (c->most != most) {
        c->most = most;
        c->threads = most;
        restart(c);
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
        c->phase = REFERENCE;
        return;
    case REFERENCE:
        c->reference_ns = median_ns;
        c->phase = GOVERNING;
        break;
    case GOVERNING:
        if (++c->windows >= RECHECK) {
            restart(c);
            return;
        }
        if (c->trial) {
            if (median_ns > c->reference_ns * (1 + SLOWER)) {
                /* The cut cost time: back, and no lower until the next reference. */
                c->floor = c->trial;
                set_threads(c, c->trial);
                c->trial = 0;
                return;
            }
            c->trial = 0;
        }
        break;
    }
    if (use < IDLE && c->threads > c->floor) {
        /* Enough threads for TARGET at the use measured, at most halving
         * (the copy speeds up per thread as threads drop). */
        unsigned want = (unsigned)((double)used * use / TARGET) + 1;
        if (want < (c->threads + 1) / 2) want = (c->threads + 1) / 2;
        if (want < c->floor) want = c->floor;
        if (want < c->threads) {
            c->trial = c->threads;
            set_threads(c, want);
        }
    } else if (use > BUSY && used >= c->threads && c->threads < c->most) {
        /* Copy-bound with every thread asked for: more. With fewer than
         * asked (the pool was shared) more would not come. */
        unsigned want = c->threads + (c->threads + 1) / 2;
        set_threads(c, want < c->most ? want : c->most);
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
    *threads = bytes < PS_GOVERNED_MIN ? 0 : c->threads;
    *changes = c->changes;
    pthread_mutex_unlock(&lock);
}

void ps_governor_reset(void) {
    pthread_mutex_lock(&lock);
    memset(table, 0, sizeof table);
    pthread_mutex_unlock(&lock);
}
