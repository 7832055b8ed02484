/* SPDX-License-Identifier: MIT */
/* What every pinstage-bench mode shares: clocks, statistics, host memory,
 * the correctness check and the side-by-side measurement of paths. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "bench.h"

double bench_now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

double bench_cpu_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

double bench_thread_cpu_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

void bench_sleep_us(double us) {
    struct timespec ts = {(time_t)(us / 1e6), (long)((us - (double)(time_t)(us / 1e6) * 1e6) * 1e3)};
    nanosleep(&ts, NULL);
}

void bench_spin_us(double us) {
    double until = bench_now_us() + us;
    while (bench_now_us() < until) {
    }
}

void bench_touch(const unsigned char *p, size_t bytes) {
    unsigned char x = 0;
    for (size_t i = 0; i < bytes; i += 64) x ^= ((const volatile unsigned char *)p)[i];
    (void)x;
}

void bench_pace_call(void *pace) {
    bench_pace *p = pace;
    if (p->spin)
        bench_spin_us(p->idle_us);
    else
        bench_sleep_us(p->idle_us);
    if (!p->other_device) return; /* --pace-copy no */
    size_t bytes = pinstage_devbuf_bytes(p->other_device);
    if (p->dir == BENCH_H2D)
        pinstage_devbuf_copy_from_host(p->other_device, p->other_host, bytes);
    else
        pinstage_devbuf_copy_to_host(p->other_device, p->other_host, bytes);
}

int bench_compare_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int bench_compare_size(const void *a, const void *b) {
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return (x > y) - (x < y);
}

double bench_quantile(const double *sorted, size_t n, double q) {
    if (!n) return 0;
    double pos = q * (double)(n - 1);
    size_t i = (size_t)pos;
    double frac = pos - (double)i;
    return i + 1 < n ? sorted[i] * (1 - frac) + sorted[i + 1] * frac : sorted[i];
}

double bench_median(double *v, size_t n) {
    qsort(v, n, sizeof *v, bench_compare_double);
    return bench_quantile(v, n, 0.5);
}

void bench_fill_pattern(unsigned char *p, size_t n, unsigned seed) {
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        p[i] = (unsigned char)(x >> 24);
    }
}

int bench_fail(const char *what) {
    fprintf(stderr, "pinstage-bench: %s\n", what);
    return 2;
}

int bench_driver_fail(const char *what, pinstage_status s) {
    fprintf(stderr, "pinstage-bench: %s: %s: %s\n", what, pinstage_status_name(s), pinstage_last_error_message());
    return 1;
}

const bench_path *bench_find_path(const char *name) {
    for (size_t k = 0; k < bench_path_count; k++)
        if (!strcmp(bench_paths[k].name, name)) return &bench_paths[k];
    return NULL;
}

/* ---- Host memory ---------------------------------------------------------------- */

int bench_host_alloc = BENCH_HOST_MALLOC;
const char *const bench_host_alloc_names[] = {"malloc", "hugepages", "small-pages"};

unsigned char *bench_host_memory(size_t bytes) {
    void *p = NULL;
    if (bench_host_alloc == BENCH_HOST_MALLOC) {
        p = malloc(bytes);
    } else {
        size_t huge = (size_t)2 << 20, rounded = (bytes + huge - 1) / huge * huge;
        if (posix_memalign(&p, huge, rounded)) return NULL;
        madvise(p, rounded, bench_host_alloc == BENCH_HOST_HUGEPAGES ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    }
    /* Written, as the memory a program passes has been. */
    if (p) memset(p, 0x11, bytes);
    return p;
}

/* ---- Measuring paths side by side -------------------------------------------------- */

/* Runs each path once on a fresh pattern and checks the bytes it moved. */
static int check_path(bench_cell *c, const bench_path *p, void **state, int *ready, unsigned char *scratch) {
    c->seed++;
    if (c->direction == BENCH_H2D) {
        bench_fill_pattern(c->host, c->bytes, c->seed);
        pinstage_status s = p->setup(c, state);
        if (s) return bench_driver_fail(p->name, s);
        *ready = 1;
        if ((s = p->run(c, *state))) return bench_driver_fail(p->name, s);
        if ((s = pinstage_stream_synchronize(NULL)) || (s = pinstage_devbuf_copy_to_host(c->device, scratch, c->bytes)))
            return bench_driver_fail("reading back", s);
        bench_fill_pattern(c->host, c->bytes, c->seed);
        if (memcmp(scratch, c->host, c->bytes)) {
            fprintf(stderr, "pinstage-bench: %s h2d moved wrong bytes at %zu bytes\n", p->name, c->bytes);
            return 1;
        }
    } else {
        bench_fill_pattern(scratch, c->bytes, c->seed);
        pinstage_status s = pinstage_devbuf_copy_from_host(c->device, scratch, c->bytes);
        if (!s) s = pinstage_stream_synchronize(NULL);
        if (s) return bench_driver_fail("writing the pattern", s);
        memset(c->host, 0xee, c->bytes);
        if ((s = p->setup(c, state))) return bench_driver_fail(p->name, s);
        *ready = 1;
        if ((s = p->run(c, *state))) return bench_driver_fail(p->name, s);
        if (memcmp(scratch, c->host, c->bytes)) {
            fprintf(stderr, "pinstage-bench: %s d2h moved wrong bytes at %zu bytes\n", p->name, c->bytes);
            return 1;
        }
    }
    return 0;
}

/* Timed calls are split into this many blocks per path, alternating. */
#define PASSES 3
/* Untimed calls at the start of each block. */
#define BLOCK_WARMUP 3

int bench_measure(bench_cell *c, const bench_path **paths, size_t npaths, const bench_run_options *o,
                  const char *label, bench_result *out) {
    void *state[BENCH_MAX_PATHS] = {0};
    int ready[BENCH_MAX_PATHS] = {0};
    double *samples[BENCH_MAX_PATHS] = {0};
    double cpu[BENCH_MAX_PATHS] = {0}, gap_cpu[BENCH_MAX_PATHS] = {0};
    unsigned char *scratch = malloc(c->bytes);
    int rc = 0;
    if (!scratch) return bench_fail("out of host memory");
    for (size_t p = 0; p < npaths && !rc; p++) rc = check_path(c, paths[p], &state[p], &ready[p], scratch);
    free(scratch);

    /* Warm-up, path by path; it also tells how long a round of all paths takes. */
    double round_us = 0;
    for (size_t p = 0; p < npaths && !rc; p++) {
        double start = bench_now_us();
        for (size_t w = 0; w < o->warmup && !rc; w++) {
            if (o->before_call) o->before_call(o->before_arg);
            pinstage_status s = paths[p]->run(c, state[p]);
            if (s) rc = bench_driver_fail(paths[p]->name, s);
        }
        if (o->warmup) round_us += (bench_now_us() - start) / (double)o->warmup;
    }
    size_t reps = o->reps;
    if (round_us > 0 && o->budget_s > 0) {
        size_t fit = (size_t)(o->budget_s * 1e6 / round_us);
        if (fit < reps) reps = fit < 10 ? 10 : fit;
    }
    for (size_t p = 0; p < npaths && !rc; p++)
        if (!(samples[p] = malloc(reps * sizeof(double)))) rc = bench_fail("out of host memory");
    /* Each path runs in blocks of consecutive calls, as a pipeline calls it, so
     * a call that returns before its copy lands (the driver's pageable upload)
     * pays for it in the next call of its own path, not in another path's.
     * The blocks alternate over PASSES passes so drift affects all paths; the
     * first calls of a block, which follow another path, are not timed. CPU
     * time is the whole process's during the timed calls: the pool's workers
     * and the driver's threads count. */
    size_t taken[BENCH_MAX_PATHS] = {0};
    uint64_t pageable_calls[BENCH_MAX_PATHS] = {0};
    for (size_t pass = 0; pass < PASSES && !rc; pass++)
        for (size_t p = 0; p < npaths && !rc; p++) {
            size_t block = reps / PASSES + (pass < reps % PASSES);
            for (size_t k = 0; k < BLOCK_WARMUP + block && !rc; k++) {
                if (o->before_call) {
                    /* What others did meanwhile: the process's CPU less this thread's. */
                    double process0 = bench_cpu_us(), thread0 = bench_thread_cpu_us();
                    o->before_call(o->before_arg);
                    double others = (bench_cpu_us() - process0) - (bench_thread_cpu_us() - thread0);
                    if (k >= BLOCK_WARMUP) gap_cpu[p] += others > 0 ? others : 0;
                }
                pinstage_buffer *buf = paths[p]->buffer ? paths[p]->buffer(state[p]) : NULL;
                pinstage_stats before, after;
                if (buf) pinstage_buffer_stats(buf, &before);
                double cpu_start = bench_cpu_us(), start = bench_now_us();
                pinstage_status s = paths[p]->run(c, state[p]);
                double elapsed = bench_now_us() - start, cpu_used = bench_cpu_us() - cpu_start;
                if (s) rc = bench_driver_fail(paths[p]->name, s);
                if (k >= BLOCK_WARMUP) {
                    samples[p][taken[p]++] = elapsed;
                    cpu[p] += cpu_used;
                    if (buf) {
                        pinstage_buffer_stats(buf, &after);
                        pageable_calls[p] += after.pageable_transfers - before.pageable_transfers;
                    }
                }
            }
        }
    for (size_t p = 0; p < npaths; p++) {
        if (!rc) {
            qsort(samples[p], reps, sizeof(double), bench_compare_double);
            double sum = 0;
            for (size_t i = 0; i < reps; i++) sum += samples[p][i];
            bench_result *res = &out[p];
            res->direction = c->direction;
            res->bytes = c->bytes;
            res->label = label;
            res->path = paths[p];
            res->reps = reps;
            res->median_us = bench_quantile(samples[p], reps, 0.5);
            res->min_us = samples[p][0];
            res->p10_us = bench_quantile(samples[p], reps, 0.1);
            res->p90_us = bench_quantile(samples[p], reps, 0.9);
            res->mean_us = sum / (double)reps;
            res->gbps = (double)c->bytes / (res->median_us * 1e3);
            res->cpu_us_per_gb = cpu[p] / ((double)c->bytes * (double)reps / 1e9);
            res->gap_cpu_us_per_gb = o->before_call ? gap_cpu[p] / ((double)c->bytes * (double)reps / 1e9) : -1;
            res->pageable_share = paths[p]->buffer ? (double)pageable_calls[p] / (double)reps : -1;
            res->engine_threads = 0;
            pinstage_route_info route;
            if (paths[p]->buffer &&
                pinstage_route_get_info(c->direction == BENCH_H2D ? PINSTAGE_H2D : PINSTAGE_D2H, c->bytes, &route) ==
                    PINSTAGE_SUCCESS)
                res->engine_threads = route.engine_threads;
        }
        if (ready[p]) paths[p]->teardown(c, state[p]);
        free(samples[p]);
    }
    if (!rc) {
        double pageable = 0;
        for (size_t p = 0; p < npaths; p++)
            if (!strcmp(paths[p]->name, "pageable")) pageable = out[p].median_us;
        for (size_t p = 0; p < npaths; p++) out[p].ratio = pageable > 0 ? pageable / out[p].median_us : 0;
    }
    return rc;
}

/* ---- Load in this process ------------------------------------------------------------ */

static void *arithmetic(void *arg) {
    bench_load *l = arg;
    volatile double x = 1.0;
    while (!atomic_load_explicit(&l->stop, memory_order_relaxed))
        for (int i = 0; i < 10000; i++) x = x * 1.0000001 + 1e-9;
    return NULL;
}

/* 64 MiB copied over and over between two buffers of its own. */
static void *streaming(void *arg) {
    bench_load *l = arg;
    size_t bytes = (size_t)64 << 20;
    unsigned char *a = bench_host_memory(bytes), *b = bench_host_memory(bytes);
    while (a && b && !atomic_load_explicit(&l->stop, memory_order_relaxed)) memcpy(b, a, bytes);
    free(a);
    free(b);
    return NULL;
}

void bench_load_start(bench_load *l, unsigned threads, int kind) {
    atomic_store(&l->stop, 0);
    l->count = 0;
    for (unsigned i = 0; i < threads && i < BENCH_LOAD_MAX; i++)
        if (pthread_create(&l->threads[l->count], NULL, kind == BENCH_LOAD_CPU ? arithmetic : streaming, l) == 0)
            l->count++;
    bench_sleep_us(100000); /* running, and their memory written */
}

void bench_load_stop(bench_load *l) {
    atomic_store(&l->stop, 1);
    for (unsigned i = 0; i < l->count; i++) pthread_join(l->threads[i], NULL);
    l->count = 0;
}
