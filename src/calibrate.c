/* SPDX-License-Identifier: MIT */
/* Measuring a machine profile: for each direction and size class, every
 * candidate route runs as a user's transfer would (pinstage_buffer_upload /
 * download with a fixed plan, from malloc'd memory that has been written),
 * and the median of a few calls picks the winner. The routes are measured
 * size by size, alternating, so drift affects them alike. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "driver.h"
#include "policy.h"
#include "pool.h"
#include "status.h"

#define K ((size_t)1 << 10)
#define M ((size_t)1 << 20)
#define MAX_CANDIDATES 48

typedef struct {
    ps_plan plan;
    double us;
} candidate;

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int compare_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static size_t add(candidate *c, size_t n, int route, size_t chunk, unsigned threads) {
    for (size_t i = 0; i < n; i++)
        if (c[i].plan.route == route && c[i].plan.chunk == chunk && c[i].plan.threads == threads) return n;
    if (n < MAX_CANDIDATES) c[n++].plan = (ps_plan){route, chunk, threads};
    return n;
}

/* The routes worth trying at one size: one chunk split across threads for
 * up to a few MiB, several chunk sizes above; from 8 MiB the fast mode
 * tries only 2-8 MiB chunks (from 16 MiB, 2 and 8) on 4 threads or more,
 * where every thorough winner on the H200 machine lay. No chunk above the
 * direction's largest (policy.h): it would run as that one. */
static size_t candidates_for(ps_direction dir, size_t bytes, unsigned all_threads, int thorough, candidate *c) {
    static const size_t chunks_fast[] = {256 * K, 1 * M, 2 * M, 4 * M, 8 * M};
    static const size_t chunks_thorough[] = {64 * K, 128 * K, 256 * K, 512 * K, 1 * M, 2 * M, 4 * M, 8 * M};
    static const unsigned threads_fast[] = {2, 4, 8, 0};
    static const unsigned threads_thorough[] = {2, 3, 4, 6, 8, 12, 16, 0};
    const size_t *chunks = thorough ? chunks_thorough : chunks_fast;
    size_t nchunks = thorough ? 8 : 5;
    const unsigned *threads = thorough ? threads_thorough : threads_fast;
    size_t nthreads = thorough ? 8 : 4;
    int large = !thorough && bytes >= 8 * M;
    size_t most = ps_engine_max_chunk(dir); /* a larger chunk would run as this one: not a candidate */
    size_t n = 0;
    n = add(c, n, PINSTAGE_ROUTE_PAGEABLE, 0, 0);
    /* One thread's copy never wins at tens of MiB: not worth the time. */
    if (!large || all_threads < 2) n = add(c, n, PINSTAGE_ROUTE_STAGED, 0, 1);
    if (all_threads < 2) return n;
    for (size_t t = 0; t < nthreads; t++) {
        unsigned th = threads[t] >= all_threads ? 0 : threads[t];
        if (!thorough && bytes >= M && th && th < 4) continue;
        if (bytes / 8192 < (th ? th : all_threads) / 2) continue; /* pieces under 16 KiB */
        if (bytes <= most) n = add(c, n, PINSTAGE_ROUTE_ENGINE, 0, th);
        if (bytes <= M) {
            if (bytes >= 64 * K) n = add(c, n, PINSTAGE_ROUTE_ENGINE, bytes / 2, th);
            if (bytes >= 128 * K && thorough) n = add(c, n, PINSTAGE_ROUTE_ENGINE, bytes / 4, th);
            continue;
        }
        for (size_t k = large ? 2 : 0; k < nchunks; k++)
            if (chunks[k] < bytes && chunks[k] <= most && !(large && bytes >= 16 * M && chunks[k] == 4 * M))
                n = add(c, n, PINSTAGE_ROUTE_ENGINE, chunks[k], th);
    }
    return n;
}

typedef struct {
    const ps_driver *d;
    pinstage_buffer *buf;
    CUstream stream;
    unsigned char *host;
    CUdeviceptr dev;
} bench_state;

/* Points the buffer at one candidate's plan. */
static pinstage_status use_plan(bench_state *b, const ps_plan *plan) {
    pinstage_profile *fixed;
    pinstage_status s = pinstage_profile_fixed(&fixed, plan->route, plan->chunk, plan->threads);
    if (s) return s;
    s = pinstage_buffer_set_profile(b->buf, fixed);
    pinstage_profile_free(fixed);
    return s;
}

static pinstage_status run_calls(bench_state *b, ps_direction dir, pinstage_devbuf *dev, size_t bytes, int calls,
                                 double *samples) {
    pinstage_status s = PINSTAGE_SUCCESS;
    for (int i = 0; i < calls && !s; i++) {
        double start = now_us();
        s = dir == PS_H2D ? pinstage_buffer_upload(b->buf, dev, b->host, bytes, b->stream)
                          : pinstage_buffer_download(b->buf, b->host, bytes, dev, b->stream);
        if (samples) samples[i] = now_us() - start;
    }
    return s;
}

#define ROUNDS 3

/* Every candidate, in ROUNDS alternating blocks so drift touches them alike;
 * below 1 MiB each block starts with one untimed call, so what the previous
 * candidate left in caches and the pool is not charged to this one. */
static pinstage_status measure_class(bench_state *b, ps_direction dir, unsigned cls, unsigned all_threads,
                                     int thorough, ps_class_plan *out) {
    size_t bytes = ps_class_bytes(cls);
    candidate c[MAX_CANDIDATES];
    size_t n = candidates_for(dir, bytes, all_threads, thorough, c);
    int per_round = bytes >= 16 * M ? (thorough ? 3 : 1) : bytes >= M ? (thorough ? 5 : 3) : (thorough ? 11 : 5);
    int reps = per_round * ROUNDS, warmup = bytes >= 16 * M ? 1 : 2;
    static double samples[MAX_CANDIDATES][ROUNDS * 11];
    pinstage_devbuf *dev;
    pinstage_status s = pinstage_devbuf_wrap(&dev, b->dev, bytes, 1, 1);
    /* From 16 MiB the driver's pageable path loses by 2-4x: one call of it
     * says so, and it is the slowest call of all. */
    int pageable_once = !thorough && bytes >= 16 * M;
    for (size_t i = pageable_once; i < n && !s; i++)
        if (!(s = use_plan(b, &c[i].plan))) s = run_calls(b, dir, dev, bytes, warmup, NULL);
    for (int r = 0; r < ROUNDS && !s; r++)
        for (size_t i = 0; i < n && !s; i++) {
            if (i == 0 && pageable_once && r > 0) continue;
            if (!(s = use_plan(b, &c[i].plan)) && !(s = run_calls(b, dir, dev, bytes, bytes < M, NULL)))
                s = run_calls(b, dir, dev, bytes, per_round, samples[i] + r * per_round);
        }
    pinstage_devbuf_free(dev);
    if (s) return s;
    for (size_t i = 0; i < n; i++) {
        int taken = i == 0 && pageable_once ? per_round : reps;
        qsort(samples[i], (size_t)taken, sizeof samples[i][0], compare_double);
        c[i].us = samples[i][taken / 2];
    }
    const candidate *pageable = &c[0], *staging = &c[1];
    for (size_t i = 1; i < n; i++)
        if (c[i].us < staging->us) staging = &c[i];
    out->staging = staging->plan;
    out->us_staging = staging->us;
    out->us_pageable = pageable->us;
    /* Staging must win clearly: noise must not trade the driver's path for a
     * route that is no faster. */
    if (staging->us < pageable->us * 0.98) {
        out->best = staging->plan;
        out->us_best = staging->us;
    } else {
        out->best = pageable->plan;
        out->us_best = pageable->us;
    }
    return PINSTAGE_SUCCESS;
}

pinstage_status pinstage_profile_calibrate(pinstage_profile **out, int thorough) {
    static const char caller[] = "pinstage_profile_calibrate";
    if (!out) return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: out is NULL", caller);
    *out = NULL;
    const ps_driver *d;
    pinstage_status s = ps_driver_get(&d);
    if (s) return s;
    /* Fast: every class to 64 MiB but the half-octaves below 32 KiB and
     * above 8 MiB, which take the plan below; the classes above 64 MiB take
     * its chunks with every thread (at 256 MiB that beat 8 threads on the
     * H200 machine). */
    unsigned last = thorough ? PS_CLASSES - 1 : 2 * (26 - PS_CLASS_MIN_LOG2);
    size_t most = ps_class_bytes(last);
    pinstage_profile *p = calloc(1, sizeof *p);
    bench_state b = {d, NULL, NULL, malloc(most), 0};
    if (!p || !b.host) {
        free(p);
        free(b.host);
        return ps_fail(PINSTAGE_ERROR_OUT_OF_MEMORY, "%s: out of host memory", caller);
    }
    /* Written memory, as users pass: untouched pages would time page faults. */
    memset(b.host, 0x5a, most);
    CUresult r = CUDA_SUCCESS;
    if ((s = ps_profile_stamp(p, d, caller))) goto done;
    if ((r = d->cuStreamCreate(&b.stream, CU_STREAM_NON_BLOCKING))) {
        s = ps_fail_driver((pinstage_status)r, caller, "cuStreamCreate");
        goto done;
    }
    if ((r = d->cuMemAlloc(&b.dev, most))) {
        s = ps_fail_driver((pinstage_status)r, caller, "cuMemAlloc_v2");
        goto done;
    }
    /* All the pinned memory any candidate needs, at once: growing through
     * every size would time pinned allocations, not transfers. */
    if ((s = pinstage_buffer_create(&b.buf)) ||
        (s = pinstage_buffer_reserve(b.buf, most < PS_ENGINE_MAX_FOOTPRINT ? most : PS_ENGINE_MAX_FOOTPRINT)))
        goto done;
    unsigned all_threads = ps_pool_workers(ps_pool_default()) + 1;
    p->host_threads = all_threads;
    p->origin = PINSTAGE_PROFILE_MEASURED;
    for (unsigned cls = 0; cls <= last && !s; cls++)
        for (int dir = 0; dir < 2 && !s; dir++) {
            ps_class_plan *k = &p->classes[dir][cls];
            size_t at = ps_class_bytes(cls);
            if (!thorough && cls % 2 && (at > 8 * M || at < 32 * K)) {
                *k = p->classes[dir][cls - 1];
                k->us_best = k->us_staging = k->us_pageable = 0;
            } else {
                s = measure_class(&b, (ps_direction)dir, cls, all_threads, thorough, k);
            }
        }
    for (unsigned cls = last + 1; cls < PS_CLASSES; cls++)
        for (int dir = 0; dir < 2; dir++) {
            ps_class_plan *k = &p->classes[dir][cls];
            *k = p->classes[dir][last];
            k->us_best = k->us_staging = k->us_pageable = 0;
            if (k->best.route == PINSTAGE_ROUTE_ENGINE) k->best.threads = 0;
            if (k->staging.route == PINSTAGE_ROUTE_ENGINE) k->staging.threads = 0;
        }
    if (s) {
        /* The message names the transfer that failed; say what it was part of. */
        ps_message why;
        ps_message_save(&why);
        s = ps_fail(s, "%s: %s", caller, why.text);
    }
done:;
    /* Cleanup failures are reported too, unless a measurement failed first. */
    pinstage_status freed = pinstage_buffer_free(b.buf);
    if (freed && !s) s = freed;
    if (b.dev && (r = d->cuMemFree(b.dev)) && !s) s = ps_fail_driver((pinstage_status)r, caller, "cuMemFree_v2");
    if (b.stream && (r = d->cuStreamDestroy(b.stream)) && !s)
        s = ps_fail_driver((pinstage_status)r, caller, "cuStreamDestroy_v2");
    free(b.host);
    if (s) {
        free(p);
        return s;
    }
    *out = p;
    return PINSTAGE_SUCCESS;
}
