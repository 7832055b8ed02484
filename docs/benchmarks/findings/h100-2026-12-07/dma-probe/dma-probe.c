/* SPDX-License-Identifier: MIT */
/* What a chunked DMA costs against one DMA of the same bytes, with and without host copies
 * running beside it: the copy engine's 64 MiB transfers stay at 0.79-0.86 of the pinned floor in
 * every fresh process, whatever the memory bandwidth and thread count. No pinstage code: the
 * driver through cuGetProcAddress, page-locked memory from cuMemHostAlloc and from
 * cuMemHostRegister (as the stage), and threads that copy with streaming stores as the engine does.
 *
 *   gcc -O2 -pthread dma-probe.c -ldl -o dma-probe && ./dma-probe [reps]
 *
 * Each row: median wall time of the whole pattern, from the first enqueue to the stream's end,
 * over reps; its share of the single 64 MiB DMA (floor) of the same memory and direction. */
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
static CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
static CUresult (*cuMemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);

#define MIB ((size_t)1 << 20)
#define TOTAL (64 * MIB)
#define EVENTS 128

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

static CUdeviceptr dev;
static CUstream stream;
static CUevent events[EVENTS];
static double idle_floor[2]; /* registered memory, nothing beside: [h2d] */

/* One pattern: `chunk` bytes a DMA, from `slots` places of the host buffer in turn (0: every
 * chunk at its own offset), an event recorded behind each when `with_events`. */
static double pattern(int h2d, unsigned char *host, size_t chunk, unsigned slots, int with_events) {
    double t0 = now_us();
    size_t n = TOTAL / chunk;
    for (size_t k = 0; k < n; k++) {
        size_t hoff = (slots ? k % slots : k) * chunk;
        if (h2d)
            need(cuMemcpyHtoDAsync(dev + k * chunk, host + hoff, chunk, stream), "cuMemcpyHtoDAsync");
        else
            need(cuMemcpyDtoHAsync(host + hoff, dev + k * chunk, chunk, stream), "cuMemcpyDtoHAsync");
        if (with_events) need(cuEventRecord(events[k % EVENTS], stream), "cuEventRecord");
    }
    need(cuStreamSynchronize(stream), "cuStreamSynchronize");
    return now_us() - t0;
}

static double median_of(int h2d, unsigned char *host, size_t chunk, unsigned slots, int with_events, int reps) {
    double t[256];
    pattern(h2d, host, chunk, slots, with_events);
    for (int i = 0; i < reps; i++) t[i] = pattern(h2d, host, chunk, slots, with_events);
    qsort(t, reps, sizeof t[0], cmp);
    return t[reps / 2];
}

/* ---- host copies beside the DMAs ---- */
static atomic_int copying, stop_copies;
static atomic_ullong copied;
typedef struct {
    unsigned char *src, *dst;
    size_t bytes;
    int streaming;
} copier;

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

static void *copy_loop(void *arg) {
    copier *c = arg;
    atomic_fetch_add(&copying, 1);
    while (!atomic_load(&stop_copies)) {
        if (c->streaming)
            stream_copy(c->dst, c->src, c->bytes);
        else
            memcpy(c->dst, c->src, c->bytes);
        atomic_fetch_add(&copied, c->bytes);
    }
    return NULL;
}

static unsigned char *pages(size_t bytes) {
    unsigned char *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) exit(1);
    memset(p, 1, bytes);
    return p;
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
    for (int i = 0; i < EVENTS; i++) need(cuEventCreate(&events[i], 2 /* disable timing */), "cuEventCreate");
    void *alloc;
    need(cuMemHostAlloc(&alloc, TOTAL, 0), "cuMemHostAlloc");
    memset(alloc, 2, TOTAL);
    unsigned char *reg = pages(TOTAL);
    need(cuMemHostRegister(reg, TOTAL, 0), "cuMemHostRegister");

    struct {
        const char *name;
        size_t chunk;
        unsigned slots;
        int events;
    } pats[] = {
        {"one DMA", TOTAL, 0, 0},          {"4 MiB x16", 4 * MIB, 0, 0},  {"4 MiB x16, events", 4 * MIB, 0, 1},
        {"4 MiB x16, 4 slots, events", 4 * MIB, 4, 1}, {"2 MiB x32, events", 2 * MIB, 0, 1},
        {"1 MiB x64, events", MIB, 0, 1},   {"256 KiB x256, events", MIB / 4, 0, 1},
    };
    unsigned char *mems[2] = {alloc, reg};
    const char *mem_names[2] = {"cuMemHostAlloc", "registered"};
    printf("# dma-probe: %d reps, medians; share = the single DMA's time / the pattern's\n", reps);
    printf("%-4s %-15s %-30s %-22s %10s %7s %9s\n", "dir", "memory", "pattern", "beside", "median_us", "share", "vs_idle");
    for (int h2d = 1; h2d >= 0; h2d--)
        for (int m = 0; m < 2; m++) {
            double floor = 0;
            for (unsigned p = 0; p < sizeof pats / sizeof pats[0]; p++) {
                double t = median_of(h2d, mems[m], pats[p].chunk, pats[p].slots, pats[p].events, reps);
                if (!p) floor = t;
                if (!p && m == 1) idle_floor[h2d] = t;
                printf("%-4s %-15s %-30s %-22s %10.1f %7.3f %9s\n", h2d ? "h2d" : "d2h", mem_names[m], pats[p].name,
                       "nothing", t, floor / t, "");
            }
        }
    fflush(stdout);

    /* Host copies beside: k threads, each its own 32 MiB source and destination, copying in a loop. */
    unsigned counts[] = {4, 8, 14};
    for (int streaming = 1; streaming >= 0; streaming--)
        for (unsigned ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
            unsigned k = counts[ci];
            pthread_t th[16];
            copier cs[16];
            atomic_store(&stop_copies, 0);
            atomic_store(&copying, 0);
            for (unsigned i = 0; i < k; i++) {
                cs[i] = (copier){pages(32 * MIB), pages(32 * MIB), 32 * MIB, streaming};
                pthread_create(&th[i], NULL, copy_loop, &cs[i]);
            }
            while (atomic_load(&copying) < (int)k) {
            }
            char beside[64];
            snprintf(beside, sizeof beside, "%u threads %s", k, streaming ? "streaming" : "memcpy");
            unsigned long long c0 = atomic_load(&copied);
            double t0 = now_us();
            for (int h2d = 1; h2d >= 0; h2d--) {
                double floor = 0;
                for (unsigned p = 0; p < 4; p += 2) { /* one DMA; 4 MiB x16 with events */
                    double t = median_of(h2d, mems[1], pats[p].chunk, pats[p].slots, pats[p].events, reps);
                    if (!p) floor = t;
                    printf("%-4s %-15s %-30s %-22s %10.1f %7.3f %9.3f\n", h2d ? "h2d" : "d2h", mem_names[1],
                           pats[p].name, beside, t, floor / t, idle_floor[h2d] / t);
                }
            }
            double gbps = (atomic_load(&copied) - c0) / (now_us() - t0) / 1e3;
            printf("#   %s copied %.1f GB/s in all while the DMAs ran\n", beside, gbps);
            fflush(stdout);
            atomic_store(&stop_copies, 1);
            for (unsigned i = 0; i < k; i++) {
                pthread_join(th[i], NULL);
                munmap(cs[i].src, 32 * MIB);
                munmap(cs[i].dst, 32 * MIB);
            }
        }
    return 0;
}
