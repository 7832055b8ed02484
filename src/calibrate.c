/* Measuring a machine profile: for each direction and size class, every
 * candidate route runs as a user's transfer would (pinstage_buffer_upload /
 * download with a fixed plan, from malloc'd memory that has been written),
 * and the median of a few calls picks the winner. The routes are measured
 * size by size, alternating, so drift affects them alike. */
#include <stdio.h>
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

/* The routes worth trying at one size: few and large chunks for tens of
 * MiB, one chunk split across threads for a few hundred KiB. */
static size_t candidates_for(size_t bytes, unsigned all_threads, int thorough, candidate *c) {
    static const size_t chunks_fast[] = {256 * K, 1 * M, 4 * M};
    static const size_t chunks_thorough[] = {64 * K, 128 * K, 256 * K, 512 * K, 1 * M, 2 * M, 4 * M, 8 * M};
    static const unsigned threads_fast[] = {2, 4, 8, 0};
    static const unsigned threads_thorough[] = {2, 3, 4, 6, 8, 12, 16, 0};
    const size_t *chunks = thorough ? chunks_thorough : chunks_fast;
    size_t nchunks = thorough ? 8 : 3;
    const unsigned *threads = thorough ? threads_thorough : threads_fast;
    size_t nthreads = thorough ? 8 : 4;
    size_t n = 0;
    n = add(c, n, PINSTAGE_ROUTE_PAGEABLE, 0, 0);
    n = add(c, n, PINSTAGE_ROUTE_STAGED, 0, 1);
    if (all_threads < 2) return n;
    for (size_t t = 0; t < nthreads; t++) {
        unsigned th = threads[t] >= all_threads ? 0 : threads[t];
        if (bytes / 8192 < (th ? th : all_threads) / 2) continue; /* pieces under 16 KiB */
        if (bytes <= PS_ENGINE_MAX_CHUNK) n = add(c, n, PINSTAGE_ROUTE_ENGINE, 0, th);
        if (bytes <= M) {
            if (bytes >= 64 * K) n = add(c, n, PINSTAGE_ROUTE_ENGINE, bytes / 2, th);
            if (bytes >= 128 * K && thorough) n = add(c, n, PINSTAGE_ROUTE_ENGINE, bytes / 4, th);
        } else {
            for (size_t k = 0; k < nchunks; k++)
                if (chunks[k] < bytes) n = add(c, n, PINSTAGE_ROUTE_ENGINE, chunks[k], th);
        }
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

static pinstage_status time_candidate(bench_state *b, ps_direction dir, size_t bytes, candidate *c, int warmup,
                                      int reps, double *samples) {
    pinstage_profile *fixed;
    pinstage_devbuf *dev;
    pinstage_status s = pinstage_profile_fixed(&fixed, c->plan.route, c->plan.chunk, c->plan.threads);
    if (s) return s;
    s = pinstage_buffer_set_profile(b->buf, fixed);
    pinstage_profile_free(fixed);
    if (s || (s = pinstage_devbuf_wrap(&dev, b->dev, bytes, 1, 1))) return s;
    for (int i = 0; i < warmup + reps && !s; i++) {
        double start = now_us();
        s = dir == PS_H2D ? pinstage_buffer_upload(b->buf, dev, b->host, bytes, b->stream)
                          : pinstage_buffer_download(b->buf, b->host, bytes, dev, b->stream);
        if (i >= warmup) samples[i - warmup] = now_us() - start;
    }
    pinstage_devbuf_free(dev);
    if (s) return s;
    qsort(samples, (size_t)reps, sizeof *samples, compare_double);
    c->us = samples[reps / 2];
    return PINSTAGE_SUCCESS;
}

static pinstage_status measure_class(bench_state *b, ps_direction dir, unsigned cls, unsigned all_threads,
                                     int thorough, ps_class_plan *out) {
    size_t bytes = ps_class_bytes(cls);
    candidate c[MAX_CANDIDATES];
    size_t n = candidates_for(bytes, all_threads, thorough, c);
    int reps = bytes >= 16 * M ? (thorough ? 7 : 3) : (thorough ? 21 : 7);
    int warmup = thorough ? 3 : 2;
    double samples[32];
    for (size_t i = 0; i < n; i++) {
        pinstage_status s = time_candidate(b, dir, bytes, &c[i], warmup, reps, samples);
        if (s) return s;
    }
    const candidate *pageable = &c[0], *staging = &c[1];
    for (size_t i = 2; i < n; i++)
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
    /* Fast: 4 KiB-64 MiB; the classes above reuse 64 MiB's plan. */
    unsigned measured = thorough ? PS_CLASSES : PS_CLASSES - 2;
    size_t most = ps_class_bytes(measured - 1);
    pinstage_profile *p = calloc(1, sizeof *p);
    bench_state b = {d, NULL, NULL, malloc(most), 0};
    if (!p || !b.host) {
        free(p);
        free(b.host);
        return ps_fail(PINSTAGE_ERROR_OUT_OF_MEMORY, "%s: out of host memory", caller);
    }
    /* Written memory, as users pass: untouched pages would time page faults. */
    memset(b.host, 0x5a, most);
    CUresult r;
    if ((s = ps_profile_stamp(p, d, caller))) goto done;
    if ((r = d->cuStreamCreate(&b.stream, CU_STREAM_NON_BLOCKING))) {
        s = ps_fail_driver((pinstage_status)r, caller, "cuStreamCreate");
        goto done;
    }
    if ((r = d->cuMemAlloc(&b.dev, most))) {
        s = ps_fail_driver((pinstage_status)r, caller, "cuMemAlloc_v2");
        goto done;
    }
    if ((s = pinstage_buffer_create(&b.buf))) goto done;
    unsigned all_threads = ps_pool_workers(ps_pool_default()) + 1;
    p->host_threads = all_threads;
    p->origin = PINSTAGE_PROFILE_MEASURED;
    for (unsigned cls = 0; cls < measured && !s; cls++)
        for (int dir = 0; dir < 2 && !s; dir++)
            s = measure_class(&b, (ps_direction)dir, cls, all_threads, thorough, &p->classes[dir][cls]);
    for (unsigned cls = measured; cls < PS_CLASSES; cls++)
        for (int dir = 0; dir < 2; dir++) {
            p->classes[dir][cls] = p->classes[dir][measured - 1];
            p->classes[dir][cls].us_best = p->classes[dir][cls].us_staging = p->classes[dir][cls].us_pageable = 0;
        }
    if (s) {
        /* The message names the transfer that failed; say what it was part of. */
        char why[512];
        snprintf(why, sizeof why, "%s", pinstage_last_error_message());
        s = ps_fail(s, "%s: %s", caller, why);
    }
done:
    pinstage_buffer_free(b.buf);
    if (b.dev) d->cuMemFree(b.dev);
    if (b.stream) d->cuStreamDestroy(b.stream);
    free(b.host);
    if (s) {
        free(p);
        return s;
    }
    *out = p;
    return PINSTAGE_SUCCESS;
}
