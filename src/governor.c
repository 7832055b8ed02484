/* SPDX-License-Identifier: MIT */
/* The copy's thread count from the share of its threads' time it used
 * (governor.h). One lock guards the table; a transfer holds it twice, for
 * well under a microsecond. */
#include <pthread.h>
#include <string.h>

#include "governor.h"

/* Transfers measured before a change. */
#define SAMPLES 4u
/* Mean use below IDLE: fewer threads, enough for TARGET; above BUSY: up to
 * half as many again. The band is wider than a step up, so a count that
 * was just raised is not cut straight back. */
#define IDLE 0.5
#define TARGET 0.65
#define BUSY 0.8
/* The caller and one worker: the caller also makes the driver calls. */
#define FEWEST 2u

typedef struct {
    unsigned threads; /* what transfers get now; 0: not yet governed */
    unsigned most;    /* the cap it was set under */
    double use_sum;
    unsigned use_n;
    uint64_t changes;
} class_state;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static class_state table[2][PS_CLASSES];

unsigned ps_governor_threads(ps_direction dir, size_t bytes, unsigned most) {
    if (bytes < PS_GOVERNED_MIN || most <= FEWEST) return most;
    pthread_mutex_lock(&lock);
    class_state *c = &table[dir][ps_size_class(bytes)];
    /* A new cap (the pool resized, another profile): start from it. */
    if (c->most != most) {
        c->threads = most;
        c->most = most;
        c->use_sum = 0;
        c->use_n = 0;
    }
    unsigned threads = c->threads;
    pthread_mutex_unlock(&lock);
    return threads;
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
        if (++c->use_n >= SAMPLES) {
            double mean = c->use_sum / c->use_n;
            unsigned want = c->threads;
            if (mean < IDLE) {
                /* Enough threads for TARGET at the use measured, at most
                 * halving (the copy speeds up per thread as threads drop). */
                want = (unsigned)((double)used * mean / TARGET) + 1;
                if (want < (c->threads + 1) / 2) want = (c->threads + 1) / 2;
                if (want < FEWEST) want = FEWEST;
            } else if (mean > BUSY && used >= c->threads) {
                /* Copy-bound with every thread asked for: more, if the cap
                 * allows. With fewer than asked (the pool was shared) more
                 * would not come. */
                want = c->threads + (c->threads + 1) / 2;
                if (want > c->most) want = c->most;
            }
            if (want != c->threads) {
                c->threads = want;
                c->changes++;
            }
            c->use_sum = 0;
            c->use_n = 0;
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
