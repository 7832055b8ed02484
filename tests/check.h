/* SPDX-License-Identifier: MIT */
/* The test suite's assertions and fixtures.
 *
 * Each test program runs against whichever driver pinstage loads: the
 * emulated driver (ctest sets PINSTAGE_DRIVER to it by default) or the real
 * one (-DPINSTAGE_TEST_DRIVER=real). Checks that need the emulator's
 * instruments (call counts, fault injection, live allocations) run only
 * there; everything that moves bytes runs on both. */
#ifndef PINSTAGE_TEST_CHECK_H
#define PINSTAGE_TEST_CHECK_H

#include <dlfcn.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_abi.h"
#include "pinstage.h"
#include "pinstage_emu.h"

/* ---- Assertions ------------------------------------------------------------- */

static int check_failures;
static const char *check_current_test = "";

#define CHECK(cond)                                                                      \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            check_failures++;                                                            \
            fprintf(stderr, "%s:%d: %s: CHECK(%s) failed\n", __FILE__, __LINE__,         \
                    check_current_test, #cond);                                          \
        }                                                                                \
    } while (0)

#define CHECK_EQ(a, b)                                                                   \
    do {                                                                                 \
        unsigned long long a_ = (unsigned long long)(a), b_ = (unsigned long long)(b);   \
        if (a_ != b_) {                                                                  \
            check_failures++;                                                            \
            fprintf(stderr, "%s:%d: %s: %s == %llu, expected %s == %llu\n", __FILE__,    \
                    __LINE__, check_current_test, #a, a_, #b, b_);                       \
        }                                                                                \
    } while (0)

/* A call must return `expected`; on mismatch print both names and the message. */
#define CHECK_STATUS(call, expected)                                                     \
    do {                                                                                 \
        pinstage_status got_ = (call), want_ = (expected);                               \
        if (got_ != want_) {                                                             \
            check_failures++;                                                            \
            fprintf(stderr, "%s:%d: %s: %s returned %s, expected %s (message: %s)\n",    \
                    __FILE__, __LINE__, check_current_test, #call,                       \
                    pinstage_status_name(got_), pinstage_status_name(want_),             \
                    pinstage_last_error_message());                                      \
        }                                                                                \
    } while (0)

#define CHECK_OK(call) CHECK_STATUS(call, PINSTAGE_SUCCESS)

/* The last error message must contain `needle`. */
#define CHECK_MESSAGE(needle)                                                            \
    do {                                                                                 \
        if (!strstr(pinstage_last_error_message(), (needle))) {                          \
            check_failures++;                                                            \
            fprintf(stderr, "%s:%d: %s: message \"%s\" lacks \"%s\"\n", __FILE__,        \
                    __LINE__, check_current_test, pinstage_last_error_message(),         \
                    (needle));                                                           \
        }                                                                                \
    } while (0)

/* Stops the program when a fixture cannot be set up. */
#define REQUIRE(cond)                                                                    \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            fprintf(stderr, "%s:%d: %s does not hold\n", __FILE__, __LINE__, #cond);     \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

#define REQUIRE_OK(call)                                                                 \
    do {                                                                                 \
        pinstage_status got_ = (call);                                                   \
        if (got_ != PINSTAGE_SUCCESS) {                                                  \
            fprintf(stderr, "%s:%d: %s failed: %s (%s)\n", __FILE__, __LINE__, #call,    \
                    pinstage_status_name(got_), pinstage_last_error_message());          \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

#define TEST_SKIPPED 77

/* ---- The emulator's instruments (NULL members on the real driver) ----------------- */

typedef struct test_emu {
    int (*fail)(const char *, unsigned long, int, int);
    void (*clear_faults)(void);
    unsigned long (*calls)(const char *);
    void (*reset_calls)(void);
    size_t (*trace)(const char **, size_t);
    void (*get_live)(pinstage_emu_live *);
    void (*set_timing)(double, double);
    void (*set_pinned_alignment)(size_t);
    void (*set_inline)(int);
    void (*set_host_rates)(double, double);
    int (*set_numa)(const int *, int);
    int (*set_device_bandwidth)(int, double);
    int (*fail_device)(int, int);
} test_emu;

static test_emu emu_api;
static const test_emu *emu; /* NULL when running on the real driver */
static pinstage_driver_info driver_info;

/* Driver calls tests make themselves (device work to order against). */
static struct {
    CUresult (*memset_async)(CUdeviceptr, unsigned char, size_t, CUstream);
    CUresult (*memset_sync)(CUdeviceptr, unsigned char, size_t);
    CUresult (*dtod_async)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
    CUresult (*htod_sync)(CUdeviceptr, const void *, size_t);
    CUresult (*htod_async)(CUdeviceptr, const void *, size_t, CUstream);
    CUresult (*dtoh_sync)(void *, CUdeviceptr, size_t);
    CUresult (*dtoh_async)(void *, CUdeviceptr, size_t, CUstream);
    CUresult (*stream_sync)(CUstream);
    CUresult (*ctx_sync)(void);
    CUresult (*alloc_host)(void **, size_t);
    CUresult (*free_host)(void *);
    CUresult (*event_create)(CUevent *, unsigned);
    CUresult (*event_record)(CUevent, CUstream);
    CUresult (*event_destroy)(CUevent);
    CUresult (*stream_wait_event)(CUstream, CUevent, unsigned);
    CUresult (*ctx_get_current)(CUcontext *);
    CUresult (*ctx_set_current)(CUcontext);
} drv;

/* Device memory queue_busy_work keeps the GPU busy with; allocated once. */
static pinstage_devbuf *ballast;

#define TEST_PROC(field, name, version) REQUIRE_OK(pinstage_driver_get_proc(name, version, (void **)&drv.field))

/* Loads the driver, makes device 0's primary context current, finds the
 * emulator's instruments when the driver is the emulator. */
static inline void test_setup(void) {
    REQUIRE_OK(pinstage_driver_get_info(&driver_info));
    if (driver_info.emulated) {
        void *h = dlopen(driver_info.path, RTLD_NOW | RTLD_NOLOAD);
        if (!h) {
            fprintf(stderr, "emulated driver loaded but not found again: %s\n", dlerror());
            exit(1);
        }
        *(void **)&emu_api.fail = dlsym(h, "pinstage_emu_fail");
        *(void **)&emu_api.clear_faults = dlsym(h, "pinstage_emu_clear_faults");
        *(void **)&emu_api.calls = dlsym(h, "pinstage_emu_calls");
        *(void **)&emu_api.reset_calls = dlsym(h, "pinstage_emu_reset_calls");
        *(void **)&emu_api.trace = dlsym(h, "pinstage_emu_trace");
        *(void **)&emu_api.get_live = dlsym(h, "pinstage_emu_get_live");
        *(void **)&emu_api.set_timing = dlsym(h, "pinstage_emu_set_timing");
        *(void **)&emu_api.set_pinned_alignment = dlsym(h, "pinstage_emu_set_pinned_alignment");
        *(void **)&emu_api.set_inline = dlsym(h, "pinstage_emu_set_inline");
        *(void **)&emu_api.set_host_rates = dlsym(h, "pinstage_emu_set_host_rates");
        *(void **)&emu_api.set_numa = dlsym(h, "pinstage_emu_set_numa");
        *(void **)&emu_api.set_device_bandwidth = dlsym(h, "pinstage_emu_set_device_bandwidth");
        *(void **)&emu_api.fail_device = dlsym(h, "pinstage_emu_fail_device");
        emu = &emu_api;
    }
    REQUIRE_OK(pinstage_context_init(0));
    TEST_PROC(memset_async, "cuMemsetD8Async", 3020);
    TEST_PROC(memset_sync, "cuMemsetD8", 3020);
    TEST_PROC(dtod_async, "cuMemcpyDtoDAsync", 3020);
    TEST_PROC(htod_sync, "cuMemcpyHtoD", 3020);
    TEST_PROC(htod_async, "cuMemcpyHtoDAsync", 3020);
    TEST_PROC(dtoh_sync, "cuMemcpyDtoH", 3020);
    TEST_PROC(dtoh_async, "cuMemcpyDtoHAsync", 3020);
    TEST_PROC(stream_sync, "cuStreamSynchronize", 2000);
    TEST_PROC(ctx_sync, "cuCtxSynchronize", 2000);
    TEST_PROC(alloc_host, "cuMemAllocHost", 3020);
    TEST_PROC(free_host, "cuMemFreeHost", 2000);
    TEST_PROC(event_create, "cuEventCreate", 2000);
    TEST_PROC(event_record, "cuEventRecord", 2000);
    TEST_PROC(event_destroy, "cuEventDestroy", 4000);
    TEST_PROC(stream_wait_event, "cuStreamWaitEvent", 3020);
    TEST_PROC(ctx_get_current, "cuCtxGetCurrent", 4000);
    TEST_PROC(ctx_set_current, "cuCtxSetCurrent", 4000);
    REQUIRE_OK(pinstage_devbuf_alloc_u8(&ballast, emu ? (1u << 20) : (64u << 20)));
    printf("# driver: %s (%s, version %d)\n", driver_info.path,
           driver_info.emulated ? "emulated" : "real", driver_info.driver_version);
}

#define RUN(test)                                  \
    do {                                           \
        int before_ = check_failures;              \
        check_current_test = #test;                \
        test();                                    \
        printf("%s %s\n", check_failures == before_ ? "ok  " : "FAIL", #test); \
    } while (0)

static inline int test_finish(void) {
    if (check_failures) fprintf(stderr, "%d check(s) failed\n", check_failures);
    return check_failures ? 1 : 0;
}

/* ---- Helpers ----------------------------------------------------------------------- */

/* Calls made to the whole driver so far (0 on the real driver). */
static inline unsigned long driver_calls(void) { return emu ? emu->calls(NULL) : 0; }

static inline pinstage_emu_live live_now(void) {
    pinstage_emu_live l;
    memset(&l, 0, sizeof l);
    if (emu) emu->get_live(&l);
    return l;
}

/* Nothing allocated since `before` is still alive. */
#define CHECK_NO_LEAK(before)                                                   \
    do {                                                                        \
        pinstage_emu_live now_ = live_now();                                    \
        CHECK_EQ(now_.pinned_allocations, (before).pinned_allocations);         \
        CHECK_EQ(now_.pinned_bytes, (before).pinned_bytes);                     \
        CHECK_EQ(now_.device_allocations, (before).device_allocations);         \
        CHECK_EQ(now_.device_bytes, (before).device_bytes);                     \
        CHECK_EQ(now_.streams, (before).streams);                               \
        CHECK_EQ(now_.events, (before).events);                                 \
    } while (0)

/* Fills `bytes` with a pattern that depends on `seed` and the position. */
static inline void fill_pattern(void *p, size_t bytes, unsigned seed) {
    unsigned char *b = p;
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < bytes; i++) {
        x = x * 1664525u + 1013904223u;
        b[i] = (unsigned char)(x >> 24);
    }
}

/* Index of the first byte that differs from the pattern, or -1. */
static inline long pattern_mismatch(const void *p, size_t bytes, unsigned seed) {
    unsigned char *want = malloc(bytes);
    if (!want) return 0;
    fill_pattern(want, bytes, seed);
    long at = -1;
    for (size_t i = 0; i < bytes; i++)
        if (((const unsigned char *)p)[i] != want[i]) {
            at = (long)i;
            break;
        }
    free(want);
    return at;
}

static inline long first_not(const void *p, size_t bytes, unsigned char value) {
    for (size_t i = 0; i < bytes; i++)
        if (((const unsigned char *)p)[i] != value) return (long)i;
    return -1;
}

/* Reads device memory through a fresh non-blocking stream, with no other
 * synchronization: sees only what has already landed. */
static inline void read_landed(const pinstage_devbuf *d, void *out) {
    CUstream reader;
    void *pinned;
    size_t bytes = pinstage_devbuf_bytes(d);
    REQUIRE_OK(pinstage_stream_create(&reader, PINSTAGE_STREAM_NON_BLOCKING));
    REQUIRE_OK((pinstage_status)drv.alloc_host(&pinned, bytes));
    REQUIRE_OK((pinstage_status)drv.dtoh_async(pinned, pinstage_devbuf_ptr(d), bytes, reader));
    REQUIRE_OK((pinstage_status)drv.stream_sync(reader));
    memcpy(out, pinned, bytes);
    drv.free_host(pinned);
    pinstage_stream_destroy(reader);
}

/* Writes device memory and waits for it. */
static inline void write_device(pinstage_devbuf *d, const void *src) {
    REQUIRE_OK(pinstage_devbuf_copy_from_host(d, src, pinstage_devbuf_len(d)));
    REQUIRE_OK((pinstage_status)drv.ctx_sync());
}

/* Queues device work on `stream` that keeps it busy for a while on either
 * driver (a run of memsets over a ballast buffer), ending with `target` set
 * to `value`: a transfer not ordered after it sees other bytes. */
static inline void queue_busy_work(CUstream stream, const pinstage_devbuf *target, unsigned char value) {
    int rounds = emu ? 2 : 48; /* a real GPU memsets at terabytes per second */
    for (int i = 0; i < rounds; i++)
        REQUIRE_OK((pinstage_status)drv.memset_async(pinstage_devbuf_ptr(ballast), (unsigned char)i,
                                                     pinstage_devbuf_bytes(ballast), stream));
    REQUIRE_OK((pinstage_status)drv.memset_async(pinstage_devbuf_ptr(target), value,
                                                 pinstage_devbuf_bytes(target), stream));
}

#endif
