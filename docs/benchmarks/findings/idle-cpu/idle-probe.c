/* SPDX-License-Identifier: MIT */
/* What a frame loop's gap costs the host copy that follows it, and why
 * (docs/findings.md, "What the gap before a paced call takes"). Not built
 * with the project; no CUDA.
 *
 * T threads copy one 4.7 MiB source into one 4.7 MiB destination in 60
 * blocks of 80 KiB with the copy engine's streaming stores, the blocks dealt
 * out anew each round (thread t takes the blocks b with (b + round) % T == t)
 * as the engine's threads claim them. Before each round every thread waits
 * for one deadline, GAP us after the last round ended, in one of these ways:
 *
 *   warm        no gap: the next round at once
 *   sleep       clock_nanosleep to the deadline, then copy (the pool's workers)
 *   sleep-meet  sleep, then wait at a spinning barrier until every thread is up, then copy
 *   sleep-touch sleep, then each thread reads a share of the source it will not copy, barrier,
 *               copy: the source back in the caches, as a frame just produced would be
 *   busy        busy-wait on the clock to the deadline (no thread gives its CPU up), then copy
 *   busy-touch  busy-wait, read a share as sleep-touch does, barrier, copy
 *
 * Each thread also times a chain of dependent multiplies (the core's clock,
 * about 3 cycles each) and a read of 128 KiB of its own that the last round
 * left in its L2, before its share of the copy.
 *
 * Per scenario (medians over rounds; the first round of each dropped): the
 * copy's rate (4.7 MiB over first block start to last block end), the time
 * from the deadline to the last block's end, one thread's L2 read rate, the
 * clock, how late sleepers got their CPU back, and the steal time /proc/stat
 * counted.
 *
 *   cc -O2 -pthread idle-probe.c -o idle-probe
 *   idle-probe [--rounds N] [--repeat N] [--json FILE] */
#define _GNU_SOURCE
#include <emmintrin.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SOURCE ((size_t)4915200)
#define NBLOCKS 60u
#define BLOCK (SOURCE / NBLOCKS) /* 81920 */
#define L2_BYTES ((size_t)128 << 10)
#define MULS 3000u
#define MAX_THREADS 32
#define MAX_ROUNDS 400

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* MULS dependent multiplies: 3 cycles each on the x86 cores measured, and
 * not folded away as chains of adds by an immediate are on newer cores. */
static uint64_t mul_chain(uint64_t x) {
    for (unsigned i = 0; i < MULS / 4; i++)
        __asm__ volatile("imul %0, %0\n\timul %0, %0\n\timul %0, %0\n\timul %0, %0" : "+r"(x));
    return x;
}

static void copy_stream(unsigned char *dst, const unsigned char *src, size_t len) {
    for (size_t i = 0; i < len; i += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)(src + i));
        __m128i b = _mm_loadu_si128((const __m128i *)(src + i + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(src + i + 32));
        __m128i d = _mm_loadu_si128((const __m128i *)(src + i + 48));
        _mm_stream_si128((__m128i *)(dst + i), a);
        _mm_stream_si128((__m128i *)(dst + i + 16), b);
        _mm_stream_si128((__m128i *)(dst + i + 32), c);
        _mm_stream_si128((__m128i *)(dst + i + 48), d);
    }
    _mm_sfence();
}

static uint64_t read_lines(const unsigned char *p, size_t n) {
    uint64_t s = 0;
    for (size_t i = 0; i < n; i += 64) s += p[i];
    return s;
}

typedef enum { WARM, SLEEP, SLEEP_MEET, SLEEP_TOUCH, BUSY, BUSY_TOUCH } gap_kind;
static const char *gap_name[] = {"warm", "sleep", "sleep-meet", "sleep-touch", "busy", "busy-touch"};

typedef struct {
    unsigned threads;
    gap_kind gap;
    unsigned gap_us;
} scenario;

typedef struct {
    uint64_t copy_start, copy_end; /* ns */
    uint64_t mul_ns, l2_ns;
    int64_t late_ns; /* sleepers: how long after the deadline they ran */
} sample;

static struct {
    scenario sc;
    unsigned rounds;
    _Atomic unsigned arrived, generation;
    _Atomic uint64_t deadline;
    unsigned char *src, *dst;
    unsigned char *l2[MAX_THREADS];
    uint64_t deadlines[MAX_ROUNDS];
    sample samples[MAX_THREADS][MAX_ROUNDS];
    _Atomic uint64_t sink;
} g;

/* A barrier that spins (a sleeping one would add wake-ups of its own). With
 * `set_deadline`, the last to arrive sets the next deadline. */
static void meet(unsigned n, int set_deadline, unsigned round) {
    unsigned gen = atomic_load(&g.generation);
    if (atomic_fetch_add(&g.arrived, 1) + 1 == n) {
        atomic_store(&g.arrived, 0);
        if (set_deadline) {
            uint64_t d = now_ns() + (uint64_t)g.sc.gap_us * 1000u;
            atomic_store(&g.deadline, d);
            g.deadlines[round] = d;
        }
        atomic_fetch_add(&g.generation, 1);
    } else {
        while (atomic_load(&g.generation) == gen) _mm_pause();
    }
}

static void *measure(void *arg) {
    unsigned t = (unsigned)(uintptr_t)arg, n = g.sc.threads;
    uint64_t s = read_lines(g.l2[t], L2_BYTES);
    for (unsigned r = 0; r < g.rounds; r++) {
        sample *m = &g.samples[t][r];
        meet(n, 1, r);
        uint64_t deadline = atomic_load(&g.deadline);
        m->late_ns = 0;
        gap_kind gap = g.sc.gap;
        if (gap == SLEEP || gap == SLEEP_MEET || gap == SLEEP_TOUCH) {
            struct timespec ts = {(time_t)(deadline / 1000000000u), (long)(deadline % 1000000000u)};
            clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
            m->late_ns = (int64_t)(now_ns() - deadline);
        } else if (gap == BUSY || gap == BUSY_TOUCH) {
            while (now_ns() < deadline) {
            }
        }
        if (gap == SLEEP_TOUCH || gap == BUSY_TOUCH) /* a share this thread does not copy next */
            for (unsigned b = 0; b < NBLOCKS; b++)
                if ((b + r + 1) % n == t) s += read_lines(g.src + (size_t)b * BLOCK, BLOCK);
        if (gap == SLEEP_MEET || gap == SLEEP_TOUCH || gap == BUSY_TOUCH) meet(n, 0, r);
        uint64_t a = now_ns();
        s = mul_chain(s | 1);
        uint64_t b0 = now_ns();
        s += read_lines(g.l2[t], L2_BYTES);
        uint64_t b1 = now_ns();
        m->mul_ns = b0 - a;
        m->l2_ns = b1 - b0;
        m->copy_start = b1;
        for (unsigned b = 0; b < NBLOCKS; b++)
            if ((b + r) % n == t) copy_stream(g.dst + (size_t)b * BLOCK, g.src + (size_t)b * BLOCK, BLOCK);
        m->copy_end = now_ns();
    }
    atomic_fetch_add(&g.sink, s);
    return NULL;
}

static uint64_t steal_jiffies(void) {
    FILE *f = fopen("/proc/stat", "r");
    if (!f) return 0;
    unsigned long long v[8] = {0};
    int k = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                   &v[6], &v[7]);
    fclose(f);
    return k == 8 ? v[7] : 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorts v. */
static double quantile(double *v, size_t n, double q) {
    if (!n) return 0;
    qsort(v, n, sizeof *v, cmp_double);
    return v[(size_t)(q * (double)(n - 1) + 0.5)];
}

static void run(const scenario *sc, int first, FILE *json) {
    g.sc = *sc;
    atomic_store(&g.arrived, 0);
    pthread_t th[MAX_THREADS];
    /* One untimed pass: every page of both buffers mapped and written. */
    memset(g.dst, 0, SOURCE);
    uint64_t steal0 = steal_jiffies(), t0 = now_ns();
    for (unsigned t = 0; t < sc->threads; t++) pthread_create(&th[t], NULL, measure, (void *)(uintptr_t)t);
    for (unsigned t = 0; t < sc->threads; t++) pthread_join(th[t], NULL);
    uint64_t t1 = now_ns(), steal1 = steal_jiffies();

    size_t rounds = g.rounds - 1, per_thread = (size_t)sc->threads * rounds;
    double *rate = malloc(rounds * sizeof *rate), *span = malloc(rounds * sizeof *span);
    double *l2 = malloc(per_thread * sizeof *l2), *ghz = malloc(per_thread * sizeof *ghz);
    double *late = malloc(per_thread * sizeof *late);
    size_t k = 0;
    for (unsigned r = 1; r < g.rounds; r++) {
        uint64_t lo = UINT64_MAX, hi = 0;
        for (unsigned t = 0; t < sc->threads; t++) {
            const sample *m = &g.samples[t][r];
            if (m->copy_start < lo) lo = m->copy_start;
            if (m->copy_end > hi) hi = m->copy_end;
            l2[k] = (double)L2_BYTES / (double)m->l2_ns;
            ghz[k] = 3.0 * MULS / (double)m->mul_ns;
            late[k++] = (double)m->late_ns / 1e3;
        }
        rate[r - 1] = (double)SOURCE / (double)(hi - lo);
        span[r - 1] = (double)(hi - g.deadlines[r]) / 1e3;
    }
    double rate50 = quantile(rate, rounds, 0.5), rate10 = quantile(rate, rounds, 0.1);
    double span50 = quantile(span, rounds, 0.5), span90 = quantile(span, rounds, 0.9);
    double l250 = quantile(l2, per_thread, 0.5), ghz50 = quantile(ghz, per_thread, 0.5);
    double late50 = quantile(late, per_thread, 0.5), late90 = quantile(late, per_thread, 0.9);
    double steal_ms = (double)(steal1 - steal0) * 10.0, wall_ms = (double)(t1 - t0) / 1e6;
    printf("%-2u %-11s %6u %8.1f %8.1f %8.1f %8.1f %7.1f %6.2f %8.1f %8.1f %6.0f %8.1f\n", sc->threads,
           gap_name[sc->gap], sc->gap_us, rate50, rate10, span50, span90, l250, ghz50, late50, late90, steal_ms,
           wall_ms);
    fflush(stdout);
    if (json)
        fprintf(json,
                "%s{\"threads\": %u, \"gap\": \"%s\", \"gap_us\": %u, \"rounds\": %zu, \"copy_gbps\": {\"median\": "
                "%.2f, \"p10\": %.2f}, \"span_us\": {\"median\": %.1f, \"p90\": %.1f}, \"l2_read_gbps\": %.2f, "
                "\"clock_ghz\": %.3f, \"late_us\": {\"median\": %.1f, \"p90\": %.1f}, \"steal_ms\": %.0f, "
                "\"wall_ms\": %.1f}",
                first ? "" : ",\n", sc->threads, gap_name[sc->gap], sc->gap_us, rounds, rate50, rate10, span50, span90,
                l250, ghz50, late50, late90, steal_ms, wall_ms);
    free(rate), free(span), free(l2), free(ghz), free(late);
}

int main(int argc, char **argv) {
    unsigned rounds = 60, repeat = 1;
    const char *json_path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = (unsigned)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--repeat") && i + 1 < argc)
            repeat = (unsigned)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--json") && i + 1 < argc)
            json_path = argv[++i];
        else {
            fprintf(stderr, "usage: idle-probe [--rounds N] [--repeat N] [--json FILE]\n");
            return 2;
        }
    }
    if (rounds < 2) rounds = 2;
    if (rounds > MAX_ROUNDS) rounds = MAX_ROUNDS;
    g.rounds = rounds;
    if (posix_memalign((void **)&g.src, 4096, SOURCE) || posix_memalign((void **)&g.dst, 4096, SOURCE)) return 1;
    memset(g.src, 7, SOURCE);
    for (unsigned t = 0; t < MAX_THREADS; t++) {
        if (posix_memalign((void **)&g.l2[t], 4096, L2_BYTES)) return 1;
        memset(g.l2[t], 1, L2_BYTES);
    }
    static const scenario list[] = {
        {15, WARM, 0},           {15, SLEEP, 5000},       {15, SLEEP_MEET, 5000}, {15, SLEEP_TOUCH, 5000},
        {15, BUSY, 5000},        {15, BUSY_TOUCH, 5000},  {15, SLEEP, 200},       {15, SLEEP, 1000},
        {15, SLEEP, 2000},       {15, SLEEP, 20000},      {1, WARM, 0},           {1, SLEEP, 5000},
        {1, SLEEP_TOUCH, 5000},  {1, BUSY, 5000},         {1, BUSY_TOUCH, 5000},  {1, SLEEP, 1000},
    };
    FILE *json = json_path ? fopen(json_path, "w") : NULL;
    if (json) fprintf(json, "{\"source_bytes\": %zu, \"blocks\": %u, \"results\": [\n", SOURCE, NBLOCKS);
    printf("# copy: GB/s of the 4.7 MiB copy (median, 10th percentile of rounds); span: us from the deadline\n"
           "# to the last block (median, p90); l2: one thread's GB/s reading 128 KiB it read last round;\n"
           "# ghz: dependent multiplies x 3 per ns; late: us after the deadline a sleeper ran; steal: ms\n");
    printf("%-2s %-11s %6s %8s %8s %8s %8s %7s %6s %8s %8s %6s %8s\n", "T", "gap", "us", "copy", "copy10", "span",
           "span90", "l2", "ghz", "late50", "late90", "steal", "wall_ms");
    int first = 1;
    for (unsigned rep = 0; rep < repeat; rep++)
        for (size_t i = 0; i < sizeof list / sizeof list[0]; i++) {
            run(&list[i], first, json);
            first = 0;
        }
    if (json) {
        fprintf(json, "\n]}\n");
        fclose(json);
    }
    return (int)(atomic_load(&g.sink) == 42); /* keeps the reads */
}
