/* SPDX-License-Identifier: MIT */
/* The simplest upload pipeline with a ring, without pinstage: what share of the pinned floor a
 * 64 MiB upload reaches when its stage is a ring of S slots of 4 MiB (S = 0: the stage holds the
 * whole transfer), T worker threads copy 256 KiB blocks with streaming stores, taken in order from
 * one counter, and the calling thread enqueues chunk k's DMA the moment its blocks are copied and
 * opens the next chunk once the DMA that read its slot has landed (an event per slot). With
 * "caller copies", the calling thread also claims blocks between its checks, as pinstage's engine
 * does. pipe-probe.c (same directory as it ran) reached 0.883 of the floor with the whole stage and
 * 4 workers; pinstage's engine on 4 threads took 0.55-0.77. Where between the two the time goes:
 * the ring, the calling thread's copying, or the engine's own mechanics.
 *
 *   gcc -O2 -pthread ring-probe.c -ldl -o ring-probe && ./ring-probe [reps [workers [slots [passes]]]]
 *
 * workers, slots: comma lists (default 3,4,6,8,14 and 0,4,2; slots 0: the whole stage); passes:
 * how many times the grid runs (default 2, the second in reverse order of workers).
 * Rows: median, 10th and 90th percentile of the wall time over reps, from the first block to the
 * last byte landed; share = the floor's median (one 64 MiB DMA from the same stage) / the row's
 * median. The run of ring-probe.txt here printed no percentiles (commit 3d51cf4). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <emmintrin.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext, *CUstream, *CUevent;
typedef unsigned long long CUdeviceptr;

static CUresult (*gpa)(const char *, void **, int, unsigned long long, int *);
static CUresult (*cuInit)(unsigned);
static CUresult (*cuDeviceGet)(CUdevice *, int);
static CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
static CUresult (*cuCtxSetCurrent)(CUcontext);
static CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
static CUresult (*cuMemHostAlloc)(void **, size_t, unsigned);
static CUresult (*cuMemHostRegister)(void *, size_t, unsigned);
static CUresult (*cuStreamCreate)(CUstream *, unsigned);
static CUresult (*cuStreamSynchronize)(CUstream);
static CUresult (*cuEventCreate)(CUevent *, unsigned);
static CUresult (*cuEventRecord)(CUevent, CUstream);
static CUresult (*cuEventQuery)(CUevent);
static CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
static CUresult (*cuMemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);

static CUresult (*cuEventSynchronize)(CUevent);

#define MIB ((size_t)1 << 20)
#define TOTAL (64 * MIB)
#define CHUNK (4 * MIB)
#define NCHUNKS (TOTAL / CHUNK)
#define BLOCK (256 * 1024)
#define PER_CHUNK (CHUNK / BLOCK)
#define NBLOCKS (TOTAL / BLOCK)
#define MAXT 16

static void need(CUresult r, const char *what) {
    if (r) {
        fprintf(stderr, "%s failed: %d\n", what, r);
        exit(1);
    }
}

static void resolve(const char *name, void *fn) {
    int found = 0;
    need(gpa(name, (void **)fn, 12000, 1, &found), name);
}

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void stream_copy(unsigned char *dst, const unsigned char *src, size_t n) {
    for (size_t i = 0; i < n; i += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)(src + i)), b = _mm_loadu_si128((const __m128i *)(src + i + 16)),
                c = _mm_loadu_si128((const __m128i *)(src + i + 32)), d = _mm_loadu_si128((const __m128i *)(src + i + 48));
        _mm_stream_si128((__m128i *)(dst + i), a);
        _mm_stream_si128((__m128i *)(dst + i + 16), b);
        _mm_stream_si128((__m128i *)(dst + i + 32), c);
        _mm_stream_si128((__m128i *)(dst + i + 48), d);
    }
    _mm_sfence();
}

static CUdeviceptr dev;
static CUstream stream;
static CUevent events[NCHUNKS];
static unsigned char *stage, *host;

/* The ring: chunk k lives in slot k % slots (slots 0: chunk k at k * CHUNK). Blocks of chunks
 * below `opened` may be claimed. */
static unsigned slots;
static atomic_uint gen, next_block, opened;
static atomic_uint chunk_copied[NCHUNKS];
static atomic_int quit;
static atomic_uint parked;
static unsigned nthreads;

static unsigned char *place(unsigned k) { return stage + (size_t)(slots ? k % slots : k) * CHUNK; }

static void copy_block(unsigned b) {
    unsigned k = b / PER_CHUNK;
    size_t in = (size_t)(b % PER_CHUNK) * BLOCK;
    stream_copy(place(k) + in, host + (size_t)k * CHUNK + in, BLOCK);
    atomic_fetch_add_explicit(&chunk_copied[k], 1, memory_order_release);
}

/* Claims the next block if its chunk is open; NBLOCKS when none is left, NBLOCKS + 1 when the
 * next one is not open yet. */
static unsigned try_claim(void) {
    unsigned b = atomic_load_explicit(&next_block, memory_order_relaxed);
    for (;;) {
        if (b >= NBLOCKS) return NBLOCKS;
        if (b / PER_CHUNK >= atomic_load_explicit(&opened, memory_order_acquire)) return NBLOCKS + 1;
        if (atomic_compare_exchange_weak_explicit(&next_block, &b, b + 1, memory_order_relaxed, memory_order_relaxed))
            return b;
    }
}

static void *worker(void *arg) {
    (void)arg;
    unsigned seen = atomic_load(&gen);
    for (;;) {
        unsigned g;
        atomic_fetch_add_explicit(&parked, 1, memory_order_release);
        while ((g = atomic_load_explicit(&gen, memory_order_acquire)) == seen) {
            if (atomic_load_explicit(&quit, memory_order_relaxed)) return NULL;
            _mm_pause();
        }
        seen = g;
        for (;;) {
            unsigned b = try_claim();
            if (b == NBLOCKS) break;
            if (b > NBLOCKS) {
                _mm_pause();
                continue;
            }
            copy_block(b);
        }
    }
}

static double run_once(int caller_copies) {
    while (atomic_load_explicit(&parked, memory_order_acquire) < nthreads) _mm_pause();
    atomic_store(&parked, 0);
    for (unsigned k = 0; k < NCHUNKS; k++) atomic_store(&chunk_copied[k], 0);
    atomic_store(&next_block, 0);
    unsigned open = slots ? slots : NCHUNKS;
    atomic_store(&opened, open);
    double t0 = now_us();
    atomic_fetch_add_explicit(&gen, 1, memory_order_release);
    for (unsigned k = 0; k < NCHUNKS;) {
        if (atomic_load_explicit(&chunk_copied[k], memory_order_acquire) == PER_CHUNK) {
            need(cuMemcpyHtoDAsync(dev + k * CHUNK, place(k), CHUNK, stream), "HtoD");
            need(cuEventRecord(events[k], stream), "record");
            k++;
            continue;
        }
        if (slots && open < NCHUNKS && open < k + slots) {
            CUresult r = cuEventQuery(events[open - slots]);
            if (r == 0) {
                atomic_store_explicit(&opened, ++open, memory_order_release);
                continue;
            }
            if (r != 600) need(r, "cuEventQuery");
        }
        unsigned b;
        if (caller_copies && (b = try_claim()) < NBLOCKS)
            copy_block(b);
        else
            _mm_pause();
    }
    need(cuEventSynchronize(events[NCHUNKS - 1]), "cuEventSynchronize");
    return now_us() - t0;
}

static double floor_once(void) {
    double t0 = now_us();
    need(cuMemcpyHtoDAsync(dev, stage, TOTAL, stream), "HtoD");
    need(cuStreamSynchronize(stream), "sync");
    return now_us() - t0;
}

static double median(double *t, int n) {
    qsort(t, n, sizeof t[0], cmp);
    return t[n / 2];
}

/* After median(): t is sorted. */
static double pct(const double *t, int n, int p) { return t[(n - 1) * p / 100]; }

static unsigned parse_list(const char *arg, unsigned *out, unsigned most) {
    unsigned n = 0;
    for (const char *c = arg; *c && n < most;) {
        out[n++] = (unsigned)strtoul(c, (char **)&c, 10);
        if (*c == ',') c++;
        else break;
    }
    return n;
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 20;
    if (reps > 255) reps = 255;
    const char *path = getenv("PINSTAGE_DRIVER") ? getenv("PINSTAGE_DRIVER") : "libcuda.so.1";
    void *lib = dlopen(path, RTLD_NOW);
    if (!lib || !(*(void **)&gpa = dlsym(lib, "cuGetProcAddress_v2"))) {
        fprintf(stderr, "no driver at %s\n", path);
        return 1;
    }
    resolve("cuInit", &cuInit);
    resolve("cuDeviceGet", &cuDeviceGet);
    resolve("cuDevicePrimaryCtxRetain", &cuDevicePrimaryCtxRetain);
    resolve("cuCtxSetCurrent", &cuCtxSetCurrent);
    resolve("cuMemAlloc", &cuMemAlloc);
    resolve("cuMemHostAlloc", &cuMemHostAlloc);
    resolve("cuMemHostRegister", &cuMemHostRegister);
    resolve("cuStreamCreate", &cuStreamCreate);
    resolve("cuStreamSynchronize", &cuStreamSynchronize);
    resolve("cuEventCreate", &cuEventCreate);
    resolve("cuEventRecord", &cuEventRecord);
    resolve("cuEventQuery", &cuEventQuery);
    resolve("cuMemcpyHtoDAsync", &cuMemcpyHtoDAsync);
    resolve("cuMemcpyDtoHAsync", &cuMemcpyDtoHAsync);
    CUdevice d;
    CUcontext ctx;
    need(cuInit(0), "cuInit");
    need(cuDeviceGet(&d, 0), "cuDeviceGet");
    need(cuDevicePrimaryCtxRetain(&ctx, d), "cuDevicePrimaryCtxRetain");
    need(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    need(cuMemAlloc(&dev, TOTAL), "cuMemAlloc");
    need(cuStreamCreate(&stream, 1), "cuStreamCreate");
    for (int i = 0; i < (int)NCHUNKS; i++) need(cuEventCreate(&events[i], 2), "cuEventCreate");
    resolve("cuEventSynchronize", &cuEventSynchronize);
    void *p;
    need(cuMemHostAlloc(&p, TOTAL, 0), "cuMemHostAlloc");
    stage = p;
    memset(stage, 2, TOTAL);
    host = mmap(NULL, TOTAL, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (host == MAP_FAILED) return 1;
    memset(host, 1, TOTAL);

    double t[256];
    floor_once();
    for (int i = 0; i < reps; i++) t[i] = floor_once();
    double flo = median(t, reps);
    printf("# ring-probe: %d reps, medians; 64 MiB uploads in 4 MiB chunks, 256 KiB blocks, streaming stores;"
           " share = floor / row\n",
           reps);
    printf("# floor %.1f us (%.1f GB/s)\n", flo, TOTAL / flo / 1e3);
    printf("%-7s %-6s %-7s %10s %7s %9s %9s\n", "workers", "slots", "caller", "median_us", "share", "p10_us", "p90_us");

    unsigned counts[8] = {3, 4, 6, 8, 14}, ncounts = 5;
    unsigned ring[8] = {0, 4, 2}, nring = 3;
    int passes = argc > 4 ? atoi(argv[4]) : 2;
    if (argc > 2) ncounts = parse_list(argv[2], counts, 8);
    if (argc > 3) nring = parse_list(argv[3], ring, 8);
    for (unsigned i = 0; i < ncounts; i++)
        if (counts[i] < 1 || counts[i] > MAXT) counts[i] = 4;
    for (unsigned i = 0; i < nring; i++)
        if (ring[i] > NCHUNKS) ring[i] = 4;
    for (int pass = 0; pass < passes; pass++)
        for (unsigned ci = 0; ci < ncounts; ci++) {
            unsigned T = counts[pass % 2 ? ncounts - 1 - ci : ci];
            pthread_t th[MAXT];
            atomic_store(&quit, 0);
            atomic_store(&parked, 0);
            nthreads = T;
            for (unsigned i = 0; i < T; i++) pthread_create(&th[i], NULL, worker, NULL);
            for (unsigned si = 0; si < nring; si++)
                for (int caller = 0; caller < 2; caller++) {
                    slots = ring[si];
                    run_once(caller);
                    for (int i = 0; i < reps; i++) t[i] = run_once(caller);
                    double m = median(t, reps);
                    char s[16];
                    snprintf(s, sizeof s, slots ? "%u" : "whole", slots);
                    printf("%-7u %-6s %-7s %10.1f %7.3f %9.1f %9.1f\n", T, s, caller ? "copies" : "no", m, flo / m,
                           pct(t, reps, 10), pct(t, reps, 90));
                    fflush(stdout);
                }
            atomic_store(&quit, 1);
            for (unsigned i = 0; i < T; i++) pthread_join(th[i], NULL);
        }
    for (int i = 0; i < reps; i++) t[i] = floor_once();
    printf("# floor again %.1f us\n", median(t, reps));
    return 0;
}
