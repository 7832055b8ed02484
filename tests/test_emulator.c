/* SPDX-License-Identifier: MIT */
/* The emulated driver is a test instrument: each classic transfer bug is
 * shown producing wrong bytes with the wrong usage, and right bytes with the
 * right one. Slow timing makes the wrong usage fail every time, not by luck. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <time.h>

#include "check.h"

#define BYTES (256 * 1024)

static CUresult (*launch_host_func)(CUstream, CUhostFn, void *);
static CUresult (*stream_query)(CUstream);
static CUresult (*event_query)(CUevent);
static CUresult (*get_proc_raw)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
static CUresult (*host_register)(void *, size_t, unsigned);
static CUresult (*host_unregister)(void *);
static CUresult (*pointer_attribute)(void *, CUpointer_attribute, CUdeviceptr);
static CUresult (*mem_alloc)(CUdeviceptr *, size_t);
static CUresult (*mem_free)(CUdeviceptr);

static CUstream nb, blk;
static CUdeviceptr dev;
static unsigned char *pinned;

/* 20 ms per operation plus 10 MB/s: a 256 KiB operation takes 46 ms, 64 bytes 20 ms. */
static void slow(void) { emu->set_timing(20000, 0.01); }
static void normal(void) { emu->set_timing(20, 4); }

static void device_set(unsigned char value) {
    REQUIRE_OK((pinstage_status)drv.memset_sync(dev, value, BYTES));
    REQUIRE_OK((pinstage_status)drv.ctx_sync());
}

static void download_read_before_it_landed(void) {
    device_set(0x11);
    memset(pinned, 0, BYTES);
    slow();
    /* Wrong: read right after queuing. */
    REQUIRE_OK((pinstage_status)drv.dtoh_async(pinned, dev, BYTES, nb));
    CHECK_EQ(first_not(pinned, BYTES, 0), -1); /* stale: nothing landed yet */
    /* Right: synchronize first. */
    REQUIRE_OK((pinstage_status)drv.stream_sync(nb));
    CHECK_EQ(first_not(pinned, BYTES, 0x11), -1);
    normal();
}

static void pinned_memory_reused_before_the_upload_ran(void) {
    unsigned char back[64];
    slow();
    /* Wrong: overwrite the pinned source while its upload is queued. */
    memset(pinned, 0xaa, BYTES);
    REQUIRE_OK((pinstage_status)drv.htod_async(dev, pinned, BYTES, nb));
    memset(pinned, 0xbb, BYTES);
    REQUIRE_OK((pinstage_status)drv.stream_sync(nb));
    REQUIRE_OK((pinstage_status)drv.dtoh_sync(back, dev, sizeof back));
    CHECK_EQ(first_not(back, sizeof back, 0xbb), -1); /* the later bytes went up */
    /* Right: synchronize before reuse. */
    memset(pinned, 0xcc, BYTES);
    REQUIRE_OK((pinstage_status)drv.htod_async(dev, pinned, BYTES, nb));
    REQUIRE_OK((pinstage_status)drv.stream_sync(nb));
    memset(pinned, 0xdd, BYTES);
    REQUIRE_OK((pinstage_status)drv.dtoh_sync(back, dev, sizeof back));
    CHECK_EQ(first_not(back, sizeof back, 0xcc), -1);
    normal();
}

static void legacy_copy_is_not_ordered_after_a_non_blocking_stream(void) {
    unsigned char back[64];
    device_set(0x01);
    slow();
    /* Wrong: work on a non-blocking stream, then a synchronous (legacy) copy. */
    REQUIRE_OK((pinstage_status)drv.memset_async(dev, 0x02, BYTES, nb));
    REQUIRE_OK((pinstage_status)drv.dtoh_sync(back, dev, sizeof back));
    CHECK_EQ(first_not(back, sizeof back, 0x01), -1); /* old data */
    /* Right: synchronize the stream first. */
    REQUIRE_OK((pinstage_status)drv.stream_sync(nb));
    REQUIRE_OK((pinstage_status)drv.dtoh_sync(back, dev, sizeof back));
    CHECK_EQ(first_not(back, sizeof back, 0x02), -1);
    /* A blocking stream is ordered before the legacy copy without help. */
    REQUIRE_OK((pinstage_status)drv.memset_async(dev, 0x03, BYTES, blk));
    REQUIRE_OK((pinstage_status)drv.dtoh_sync(back, dev, sizeof back));
    CHECK_EQ(first_not(back, sizeof back, 0x03), -1);
    normal();
}

static void pageable_upload_returns_before_it_lands(void) {
    unsigned char *src = malloc(BYTES), back[64];
    device_set(0x21);
    memset(src, 0x22, BYTES);
    slow();
    REQUIRE_OK((pinstage_status)drv.htod_sync(dev, src, BYTES));
    memset(src, 0x23, BYTES); /* the source was staged: reusing it is fine */
    /* Wrong: read through a non-blocking stream with no other ordering. */
    REQUIRE_OK((pinstage_status)drv.dtoh_async(pinned, dev, 64, nb));
    REQUIRE_OK((pinstage_status)drv.stream_sync(nb));
    CHECK_EQ(first_not(pinned, 64, 0x21), -1);
    /* Right: wait for the legacy stream. */
    REQUIRE_OK((pinstage_status)drv.stream_sync(CU_STREAM_LEGACY));
    REQUIRE_OK((pinstage_status)drv.dtoh_async(back, dev, 64, nb));
    CHECK_EQ(first_not(back, 64, 0x22), -1);
    normal();
    free(src);
}

static void async_upload_from_pageable_memory_is_staged_at_the_call(void) {
    unsigned char *src = malloc(BYTES), back[64];
    memset(src, 0x31, BYTES);
    slow();
    REQUIRE_OK((pinstage_status)drv.htod_async(dev, src, BYTES, nb));
    memset(src, 0x32, BYTES);
    REQUIRE_OK((pinstage_status)drv.stream_sync(nb));
    REQUIRE_OK((pinstage_status)drv.dtoh_sync(back, dev, sizeof back));
    CHECK_EQ(first_not(back, sizeof back, 0x31), -1);
    /* An async download into pageable memory completes before returning. */
    unsigned char *dst = calloc(1, BYTES);
    REQUIRE_OK((pinstage_status)drv.dtoh_async(dst, dev, BYTES, nb));
    CHECK_EQ(first_not(dst, BYTES, 0x31), -1);
    normal();
    free(dst);
    free(src);
}

static void events_order_work_across_streams(void) {
    CUevent ev;
    device_set(0x41);
    REQUIRE_OK((pinstage_status)drv.event_create(&ev, 0));
    slow();
    /* Wrong: a copy on another non-blocking stream, unordered. */
    CUstream other;
    REQUIRE_OK(pinstage_stream_create(&other, PINSTAGE_STREAM_NON_BLOCKING));
    REQUIRE_OK((pinstage_status)drv.memset_async(dev, 0x42, BYTES, nb));
    REQUIRE_OK((pinstage_status)drv.dtoh_async(pinned, dev, 64, other));
    REQUIRE_OK((pinstage_status)drv.stream_sync(other));
    CHECK_EQ(first_not(pinned, 64, 0x41), -1);
    CHECK_EQ(event_query(ev), CUDA_SUCCESS); /* never recorded: complete */
    /* Right: record an event after the work and wait on it. */
    REQUIRE_OK((pinstage_status)drv.memset_async(dev, 0x43, BYTES, nb));
    REQUIRE_OK((pinstage_status)drv.event_record(ev, nb));
    CHECK_EQ(event_query(ev), CUDA_ERROR_NOT_READY);
    CHECK_EQ(stream_query(nb), CUDA_ERROR_NOT_READY);
    REQUIRE_OK((pinstage_status)drv.stream_wait_event(other, ev, 0));
    REQUIRE_OK((pinstage_status)drv.dtoh_async(pinned, dev, 64, other));
    REQUIRE_OK((pinstage_status)drv.stream_sync(other));
    CHECK_EQ(first_not(pinned, 64, 0x43), -1);
    CHECK_EQ(event_query(ev), CUDA_SUCCESS);
    normal();
    drv.event_destroy(ev);
    pinstage_stream_destroy(other);
}

static int host_calls[4], host_call_count;
static void record_call(void *arg) { host_calls[host_call_count++] = (int)(intptr_t)arg; }

static void host_functions_run_in_stream_order(void) {
    host_call_count = 0;
    for (int i = 0; i < 4; i++) {
        REQUIRE_OK((pinstage_status)drv.memset_async(dev, (unsigned char)i, BYTES, nb));
        REQUIRE_OK((pinstage_status)launch_host_func(nb, record_call, (void *)(intptr_t)(i + 1)));
    }
    REQUIRE_OK((pinstage_status)drv.stream_sync(nb));
    CHECK_EQ(host_call_count, 4);
    for (int i = 0; i < 4; i++) CHECK_EQ(host_calls[i], i + 1);
    CHECK_EQ(stream_query(nb), CUDA_SUCCESS);
}

/* Device addresses are not host addresses: dereferencing one crashes. */
static void dereferencing_a_device_pointer_crashes(void) {
    fflush(NULL);
    pid_t child = fork();
    if (child == 0) {
        volatile unsigned char *p = (volatile unsigned char *)(uintptr_t)dev;
        signal(SIGSEGV, SIG_DFL);
        signal(SIGBUS, SIG_DFL);
        _exit(p[0] == 0x99 ? 3 : 4);
    }
    int status = 0;
    waitpid(child, &status, 0);
    CHECK(WIFSIGNALED(status));
}

static void arguments_are_checked_as_the_driver_does(void) {
    unsigned char host[16];
    CUdeviceptr d;
    REQUIRE_OK((pinstage_status)mem_alloc(&d, 256));
    CHECK_EQ(drv.dtoh_sync(host, d + 250, 16), CUDA_ERROR_INVALID_VALUE); /* past the end */
    CHECK_EQ(drv.dtoh_sync(host, d + 240, 16), CUDA_SUCCESS);
    CHECK_EQ(drv.htod_sync(d, NULL, 16), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(mem_free(d), CUDA_SUCCESS);
    CHECK_EQ(mem_free(d), CUDA_ERROR_INVALID_VALUE);                   /* double free */
    CHECK_EQ(drv.dtoh_sync(host, d, 16), CUDA_ERROR_INVALID_VALUE);    /* freed */
    CHECK_EQ(drv.free_host(host), CUDA_ERROR_INVALID_VALUE);           /* not pinned */
    CUstream s;
    REQUIRE_OK(pinstage_stream_create(&s, 0));
    REQUIRE_OK(pinstage_stream_destroy(s));
    CHECK_EQ(drv.stream_sync(s), CUDA_ERROR_INVALID_HANDLE);
    CHECK_EQ(drv.memset_async(dev, 0, 16, (CUstream)(uintptr_t)0x1234), CUDA_ERROR_INVALID_HANDLE);
    CHECK_EQ(event_query((CUevent)(uintptr_t)0x1234), CUDA_ERROR_INVALID_HANDLE);
    CUevent ev;
    REQUIRE_OK((pinstage_status)drv.event_create(&ev, 0));
    REQUIRE_OK((pinstage_status)drv.event_destroy(ev));
    CHECK_EQ(drv.event_record(ev, nb), CUDA_ERROR_INVALID_HANDLE);

    unsigned char *mem = malloc(8192);
    unsigned type = 0;
    CHECK_EQ(pointer_attribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)mem), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(host_register(mem, 8192, 0), CUDA_SUCCESS);
    CHECK_EQ(host_register(mem + 100, 10, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
    CHECK_EQ(pointer_attribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)mem + 5), CUDA_SUCCESS);
    CHECK_EQ(type, CU_MEMORYTYPE_HOST);
    CHECK_EQ(pointer_attribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, dev), CUDA_SUCCESS);
    CHECK_EQ(type, CU_MEMORYTYPE_DEVICE);
    CHECK_EQ(host_unregister(mem + 1), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
    CHECK_EQ(host_unregister(mem), CUDA_SUCCESS);
    free(mem);

    /* The 32-bit-size ABI of cuMemAllocHost is refused, as a pinned version should be. */
    void *fn = (void *)1;
    CUdriverProcAddressQueryResult q = 0;
    CHECK_EQ(get_proc_raw("cuMemAllocHost", &fn, 2000, 1, &q), CUDA_ERROR_NOT_FOUND);
    CHECK_EQ(q, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    CHECK(fn == NULL);
    CHECK_EQ(get_proc_raw("cuNothing", &fn, 13000, 1, &q), CUDA_ERROR_NOT_FOUND);
    CHECK_EQ(q, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
}

static void faults_and_counts(void) {
    unsigned char host[16];
    emu->reset_calls();
    CHECK_EQ(emu->calls("cuMemcpyDtoH"), 0);
    CHECK_EQ(emu->fail("cuMemcpyDtoH", 2, 999, 0), 0);
    CHECK_EQ(drv.dtoh_sync(host, dev, 16), CUDA_SUCCESS);
    CHECK_EQ(drv.dtoh_sync(host, dev, 16), 999);
    CHECK_EQ(drv.dtoh_sync(host, dev, 16), CUDA_SUCCESS);
    CHECK_EQ(emu->calls("cuMemcpyDtoH"), 3);
    CHECK_EQ(emu->fail("cuMemcpyDtoH", 1, 2, 1), 0);
    CHECK_EQ(drv.dtoh_sync(host, dev, 16), 2);
    CHECK_EQ(drv.dtoh_sync(host, dev, 16), 2);
    emu->clear_faults();
    CHECK_EQ(drv.dtoh_sync(host, dev, 16), CUDA_SUCCESS);
    CHECK_EQ(emu->fail("cuNoSuchThing", 1, 1, 0), -1);
    CHECK(emu->calls(NULL) >= emu->calls("cuMemcpyDtoH"));

    pinstage_emu_live a = live_now(), b;
    void *p;
    REQUIRE_OK((pinstage_status)drv.alloc_host(&p, 1000));
    b = live_now();
    CHECK_EQ(b.pinned_allocations, a.pinned_allocations + 1);
    CHECK_EQ(b.pinned_bytes, a.pinned_bytes + 1000);
    CHECK_EQ(first_not(p, 1000, 0), -1); /* fresh pinned memory is zeroed */
    drv.free_host(p);
    CHECK_NO_LEAK(a);
}

/* Virtual memory of this process, in KiB (0 if unknown). */
static long vm_size_kib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmSize: %ld", &kib) == 1) break;
    if (f) fclose(f);
    return kib;
}

/* A destroyed stream's worker is joined. An unjoined thread keeps its stack
 * mapped (8 MiB here): after 2000 cycles that is 16 GiB of address space,
 * and near 32,700 cycles cuStreamCreate fails. */
static void streams_can_be_created_and_destroyed_without_end(void) {
    long before = vm_size_kib();
    for (int i = 0; i < 2000; i++) {
        CUstream s;
        pinstage_status r = pinstage_stream_create(&s, i % 2 ? PINSTAGE_STREAM_NON_BLOCKING : 0);
        if (r) {
            fprintf(stderr, "  cycle %d: %s\n", i, pinstage_last_error_message());
            CHECK_OK(r);
            return;
        }
        CHECK_OK(pinstage_stream_destroy(s));
    }
    CHECK_EQ(live_now().streams, 2); /* nb and blk */
    /* Half a stack per cycle at most: sanitizer runtimes keep some memory
     * per thread they have seen, an unjoined thread keeps its whole stack.
     * Workers end when they next run, which on a loaded machine lags: each
     * later create joins those that have. */
    long grown = vm_size_kib() - before;
    for (int i = 0; i < 100 && grown > 2000L * 4096; i++) {
        struct timespec nap = {0, 20 * 1000 * 1000};
        nanosleep(&nap, NULL);
        CUstream s;
        if (pinstage_stream_create(&s, 0) == PINSTAGE_SUCCESS) pinstage_stream_destroy(s);
        grown = vm_size_kib() - before;
    }
    if (grown > 2000L * 4096) fprintf(stderr, "  address space grew by %ld KiB\n", grown);
    CHECK(grown <= 2000L * 4096);
}

/* The last release of the primary context takes its memory with it: using
 * it afterwards fails as on a real driver, instead of passing. Run last: it
 * frees what the other tests allocated. */
static void a_destroyed_context_takes_its_memory(void) {
    void *p;
    CUdeviceptr d;
    REQUIRE_OK((pinstage_status)drv.alloc_host(&p, 4096));
    REQUIRE_OK((pinstage_status)mem_alloc(&d, 4096));
    pinstage_emu_live before = live_now();
    CHECK(before.pinned_allocations >= 1 && before.device_allocations >= 1);
    /* test_setup's retain and one more: release both. */
    REQUIRE_OK(pinstage_context_init(0));
    CHECK_OK(pinstage_context_release(0));
    CHECK(live_now().device_allocations == before.device_allocations); /* still retained */
    CHECK_OK(pinstage_context_release(0));
    pinstage_emu_live after = live_now();
    CHECK_EQ(after.pinned_allocations, 0);
    CHECK_EQ(after.pinned_bytes, 0);
    CHECK_EQ(after.device_allocations, 0);
    REQUIRE_OK(pinstage_context_init(0));
    CHECK_EQ(drv.free_host(p), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(mem_free(d), CUDA_ERROR_INVALID_VALUE);
    char host[16];
    CHECK_EQ(drv.dtoh_sync(host, d, sizeof host), CUDA_ERROR_INVALID_VALUE);
}

int main(void) {
    test_setup();
    if (!emu) {
        printf("skipped: these tests examine the emulated driver itself\n");
        return TEST_SKIPPED;
    }
    REQUIRE_OK(pinstage_driver_get_proc("cuLaunchHostFunc", 10000, (void **)&launch_host_func));
    REQUIRE_OK(pinstage_driver_get_proc("cuStreamQuery", 2000, (void **)&stream_query));
    REQUIRE_OK(pinstage_driver_get_proc("cuEventQuery", 2000, (void **)&event_query));
    REQUIRE_OK(pinstage_driver_get_proc("cuMemHostRegister", 6050, (void **)&host_register));
    REQUIRE_OK(pinstage_driver_get_proc("cuMemHostUnregister", 4000, (void **)&host_unregister));
    REQUIRE_OK(pinstage_driver_get_proc("cuPointerGetAttribute", 4000, (void **)&pointer_attribute));
    REQUIRE_OK(pinstage_driver_get_proc("cuMemAlloc", 3020, (void **)&mem_alloc));
    REQUIRE_OK(pinstage_driver_get_proc("cuMemFree", 3020, (void **)&mem_free));
    *(void **)&get_proc_raw = dlsym(dlopen(driver_info.path, RTLD_NOW | RTLD_NOLOAD), "cuGetProcAddress_v2");
    REQUIRE_OK(pinstage_stream_create(&nb, PINSTAGE_STREAM_NON_BLOCKING));
    REQUIRE_OK(pinstage_stream_create(&blk, 0));
    REQUIRE_OK((pinstage_status)mem_alloc(&dev, BYTES));
    REQUIRE_OK((pinstage_status)drv.alloc_host((void **)&pinned, BYTES));

    RUN(download_read_before_it_landed);
    RUN(pinned_memory_reused_before_the_upload_ran);
    RUN(legacy_copy_is_not_ordered_after_a_non_blocking_stream);
    RUN(pageable_upload_returns_before_it_lands);
    RUN(async_upload_from_pageable_memory_is_staged_at_the_call);
    RUN(events_order_work_across_streams);
    RUN(host_functions_run_in_stream_order);
    RUN(dereferencing_a_device_pointer_crashes);
    RUN(arguments_are_checked_as_the_driver_does);
    RUN(faults_and_counts);
    RUN(streams_can_be_created_and_destroyed_without_end);

    drv.free_host(pinned);
    mem_free(dev);
    pinstage_stream_destroy(nb);
    pinstage_stream_destroy(blk);
    RUN(a_destroyed_context_takes_its_memory);
    return test_finish();
}
