/* SPDX-License-Identifier: MIT */
/* The simplest copy pipeline, without pinstage: what share of the pinned floor a 64 MiB transfer
 * staged through page-locked memory can reach on this machine, with T threads copying 256 KiB
 * blocks taken in order from one atomic counter and the DMA of chunk k enqueued the moment its
 * blocks are copied (uploads); downloads enqueue every chunk's DMA with an event behind it and the
 * threads copy a chunk out once its event has landed. The stage holds the whole transfer (no slot
 * reused), so nothing else waits. If this reaches no more than the copy engine, the engine's
 * ceiling is the machine's; if it reaches more, it is the engine's.
 *
 *   gcc -O2 -pthread pipe-probe.c -ldl -o pipe-probe && ./pipe-probe [reps]
 *
 * Rows: median wall time over reps, from the first block to the last byte landed; share = the
 * floor's median (one 64 MiB DMA from the same stage) / the row's. */
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

#define MIB ((size_t)1 << 20)
#define TOTAL (64 * MIB)
#define BLOCK (256 * 1024)
#define NBLOCKS (TOTAL / BLOCK)
#define MAXCHUNKS 64
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
static CUevent events[MAXCHUNKS];
static unsigned char *stage, *host; /* host: the pageable source (uploads) or destination (downloads) */

/* The job the threads share; `gen` starts one. */
static struct {
    int h2d, streaming, dma; /* dma 0: copy only */
    size_t chunk;
} job;
static atomic_uint gen, next_block, blocks_done;
static atomic_uint chunk_copied[MAXCHUNKS], chunk_landed[MAXCHUNKS];
static atomic_int quit;
static atomic_uint parked;
static unsigned nthreads;

static void copy_block(unsigned b) {
    size_t at = (size_t)b * BLOCK;
    unsigned char *dst = job.h2d ? stage + at : host + at;
    const unsigned char *src = job.h2d ? host + at : stage + at;
    if (job.streaming)
        stream_copy(dst, src, BLOCK);
    else
        memcpy(dst, src, BLOCK);
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
        unsigned per_chunk = (unsigned)(job.chunk / BLOCK);
        for (;;) {
            unsigned b = atomic_fetch_add_explicit(&next_block, 1, memory_order_relaxed);
            if (b >= NBLOCKS) break;
            unsigned k = b / per_chunk;
            if (!job.h2d && job.dma)
                while (!atomic_load_explicit(&chunk_landed[k], memory_order_acquire)) _mm_pause();
            copy_block(b);
            atomic_fetch_add_explicit(&chunk_copied[k], 1, memory_order_release);
            atomic_fetch_add_explicit(&blocks_done, 1, memory_order_release);
        }
    }
}

static double run_once(void) {
    unsigned chunks = (unsigned)(TOTAL / job.chunk), per_chunk = (unsigned)(job.chunk / BLOCK);
    while (atomic_load_explicit(&parked, memory_order_acquire) < nthreads) _mm_pause();
    atomic_store(&parked, 0);
    for (unsigned k = 0; k < chunks; k++) atomic_store(&chunk_copied[k], 0), atomic_store(&chunk_landed[k], 0);
    atomic_store(&next_block, 0);
    atomic_store(&blocks_done, 0);
    double t0 = now_us();
    atomic_fetch_add_explicit(&gen, 1, memory_order_release);
    if (job.dma && job.h2d) {
        for (unsigned k = 0; k < chunks; k++) {
            while (atomic_load_explicit(&chunk_copied[k], memory_order_acquire) < per_chunk) _mm_pause();
            need(cuMemcpyHtoDAsync(dev + k * job.chunk, stage + k * job.chunk, job.chunk, stream), "HtoD");
        }
        need(cuStreamSynchronize(stream), "sync");
    } else if (job.dma) {
        for (unsigned k = 0; k < chunks; k++) {
            need(cuMemcpyDtoHAsync(stage + k * job.chunk, dev + k * job.chunk, job.chunk, stream), "DtoH");
            need(cuEventRecord(events[k], stream), "record");
        }
        for (unsigned k = 0; k < chunks; k++) {
            CUresult r;
            while ((r = cuEventQuery(events[k])) == 600 /* not ready */) _mm_pause();
            need(r, "cuEventQuery");
            atomic_store_explicit(&chunk_landed[k], 1, memory_order_release);
        }
    }
    while (atomic_load_explicit(&blocks_done, memory_order_acquire) < NBLOCKS) _mm_pause();
    /* the workers stop taking blocks once next_block passed the end; let them all see it */
    return now_us() - t0;
}

static double floor_once(int h2d) {
    double t0 = now_us();
    if (h2d)
        need(cuMemcpyHtoDAsync(dev, stage, TOTAL, stream), "HtoD");
    else
        need(cuMemcpyDtoHAsync(stage, dev, TOTAL, stream), "DtoH");
    need(cuStreamSynchronize(stream), "sync");
    return now_us() - t0;
}

static double median(double *t, int n) {
    qsort(t, n, sizeof t[0], cmp);
    return t[n / 2];
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
    for (int i = 0; i < MAXCHUNKS; i++) need(cuEventCreate(&events[i], 2), "cuEventCreate");
    void *p;
    need(cuMemHostAlloc(&p, TOTAL, 0), "cuMemHostAlloc");
    stage = p;
    memset(stage, 2, TOTAL);
    host = mmap(NULL, TOTAL, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (host == MAP_FAILED) return 1;
    memset(host, 1, TOTAL);

    double t[256], flo[2];
    for (int h2d = 1; h2d >= 0; h2d--) {
        floor_once(h2d);
        for (int i = 0; i < reps; i++) t[i] = floor_once(h2d);
        flo[h2d] = median(t, reps);
    }
    printf("# pipe-probe: %d reps, medians; 64 MiB; share = floor / row\n", reps);
    printf("# floor h2d %.1f us (%.1f GB/s), d2h %.1f us (%.1f GB/s)\n", flo[1], TOTAL / flo[1] / 1e3, flo[0],
           TOTAL / flo[0] / 1e3);
    printf("%-4s %-7s %-9s %-8s %10s %7s %9s\n", "dir", "threads", "copy", "chunk", "median_us", "share", "GB/s");

    unsigned counts[] = {4, 8, 15};
    size_t chunks[] = {1 * MIB, 2 * MIB, 4 * MIB, 8 * MIB, TOTAL};
    for (unsigned ci = 0; ci < 3; ci++) {
        unsigned T = counts[ci];
        pthread_t th[MAXT];
        atomic_store(&quit, 0);
        atomic_store(&parked, 0);
        nthreads = T;
        for (unsigned i = 0; i < T; i++) pthread_create(&th[i], NULL, worker, NULL);
        for (int streaming = 1; streaming >= 0; streaming--)
            for (int h2d = 1; h2d >= 0; h2d--) {
                /* the copy alone, then the pipeline per chunk size (chunk = 64 MiB: copy all, then one DMA
                 * or one DMA, then copy all, as a framework's copy-in / copy-out does) */
                job.h2d = h2d, job.streaming = streaming, job.dma = 0, job.chunk = TOTAL;
                run_once();
                for (int i = 0; i < reps; i++) t[i] = run_once();
                double m = median(t, reps);
                printf("%-4s %-7u %-9s %-8s %10.1f %7s %9.1f\n", h2d ? "h2d" : "d2h", T,
                       streaming ? "streaming" : "memcpy", "no DMA", m, "", TOTAL / m / 1e3);
                for (unsigned k = 0; k < sizeof chunks / sizeof chunks[0]; k++) {
                    job.dma = 1, job.chunk = chunks[k];
                    run_once();
                    for (int i = 0; i < reps; i++) t[i] = run_once();
                    m = median(t, reps);
                    char c[16];
                    snprintf(c, sizeof c, chunks[k] == TOTAL ? "serial" : "%zuM", chunks[k] / MIB);
                    printf("%-4s %-7u %-9s %-8s %10.1f %7.3f %9.1f\n", h2d ? "h2d" : "d2h", T,
                           streaming ? "streaming" : "memcpy", c, m, flo[h2d] / m, TOTAL / m / 1e3);
                }
                fflush(stdout);
            }
        atomic_store(&quit, 1);
        for (unsigned i = 0; i < T; i++) pthread_join(th[i], NULL);
    }
    for (int h2d = 1; h2d >= 0; h2d--) {
        for (int i = 0; i < reps; i++) t[i] = floor_once(h2d);
        printf("# floor again %s %.1f us\n", h2d ? "h2d" : "d2h", median(t, reps));
    }
    /* The floor from registered memory (the stage pinstage pins on a machine of several NUMA nodes):
     * small pages, and 2 MiB-aligned with MADV_HUGEPAGE before the first touch. */
    unsigned char *saved = stage;
    for (int huge = 0; huge < 2; huge++) {
        size_t span = TOTAL + 2 * MIB;
        unsigned char *raw = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (raw == MAP_FAILED) return 1;
        unsigned char *al = (unsigned char *)(((uintptr_t)raw + 2 * MIB - 1) & ~(uintptr_t)(2 * MIB - 1));
        if (huge) madvise(al, TOTAL, MADV_HUGEPAGE);
        memset(al, 3, TOTAL);
        need(cuMemHostRegister(al, TOTAL, 1 /* portable */), "cuMemHostRegister");
        stage = al;
        for (int h2d = 1; h2d >= 0; h2d--) {
            floor_once(h2d);
            for (int i = 0; i < reps; i++) t[i] = floor_once(h2d);
            double m = median(t, reps);
            printf("# floor from registered memory, %s: %s %.1f us, share %.3f\n", huge ? "MADV_HUGEPAGE" : "small pages",
                   h2d ? "h2d" : "d2h", m, flo[h2d] / m);
        }
    }
    stage = saved;
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    char line[128] = "?";
    if (f && fgets(line, sizeof line, f)) printf("# THP: %s", line);
    if (f) fclose(f);
    return 0;
}
