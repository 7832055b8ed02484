/* SPDX-License-Identifier: MIT */
/* Fault injection through the emulated driver, for every public operation:
 * the driver's status comes back with the failing call named, counters do not
 * move, the buffer stays usable (the same call then succeeds with the exact
 * bytes), and nothing leaks. */
#include "check.h"

#define N (112 * 112 * 3) /* staged by default */
#define BYTES (N * sizeof(float))
#define FAULT 999          /* CUDA_ERROR_UNKNOWN */
#define OOM 2              /* CUDA_ERROR_OUT_OF_MEMORY */

static pinstage_buffer *buf;
static pinstage_devbuf *dev;
static CUstream stream;
static unsigned char src[BYTES], back[BYTES];
static unsigned seed = 1;

static void fill_seeded(void *dst, size_t n, void *user) {
    (void)user;
    fill_pattern(dst, n * sizeof(float), seed);
}

/* Each operation moves a fresh pattern, then verify() proves its bytes. */
static pinstage_status op_upload_with(void) { return pinstage_buffer_upload_with(buf, dev, N, stream, fill_seeded, NULL); }
static pinstage_status op_upload(void) {
    fill_pattern(src, BYTES, seed);
    return pinstage_buffer_upload(buf, dev, src, N, stream);
}
static pinstage_status op_download_into(void) {
    const void *view;
    pinstage_status s = pinstage_buffer_download_into(buf, dev, N, stream, &view);
    if (!s) memcpy(back, view, BYTES);
    return s;
}
static pinstage_status op_download(void) { return pinstage_buffer_download(buf, back, N, dev, stream); }

static void put_pattern_on_device(void) {
    fill_pattern(src, BYTES, seed);
    REQUIRE_OK(pinstage_devbuf_copy_from_host(dev, src, N));
    REQUIRE_OK((pinstage_status)drv.ctx_sync());
}

static void verify_device_has_pattern(void) {
    memset(back, 0, BYTES);
    REQUIRE_OK((pinstage_status)drv.ctx_sync());
    REQUIRE_OK(pinstage_devbuf_copy_to_host(dev, back, N));
    CHECK_EQ(pattern_mismatch(back, BYTES, seed), -1);
}

static void verify_back_has_pattern(void) { CHECK_EQ(pattern_mismatch(back, BYTES, seed), -1); }

typedef struct {
    const char *entry;   /* driver entry point to fail */
    unsigned long nth;   /* which call of it, counted from the operation's start */
    int code;
    int direct;          /* threshold 0: the pageable path */
    pinstage_status (*op)(void);
    void (*before)(void);
    void (*verify)(void);
    const char *named;   /* what the message must name */
} transfer_fault;

/* Staged routes (the engine at this size) end with cuEventRecord and a poll
 * of cuEventQuery; the pageable path's upload likewise, its download waits
 * for the stream that way, then copies with cuMemcpyDtoH. */
static const transfer_fault transfer_faults[] = {
    {"cuMemAllocHost", 1, OOM, 0, op_upload_with, NULL, verify_device_has_pattern, "cuMemAllocHost_v2"},
    {"cuMemcpyHtoDAsync", 1, FAULT, 0, op_upload_with, NULL, verify_device_has_pattern, "cuMemcpyHtoDAsync_v2"},
    {"cuEventRecord", 1, FAULT, 0, op_upload_with, NULL, verify_device_has_pattern, "cuEventRecord"},
    {"cuEventQuery", 1, FAULT, 0, op_upload_with, NULL, verify_device_has_pattern, "cuEventQuery"},
    {"cuMemAllocHost", 1, OOM, 0, op_download_into, put_pattern_on_device, verify_back_has_pattern, "cuMemAllocHost_v2"},
    {"cuMemcpyDtoHAsync", 1, FAULT, 0, op_download_into, put_pattern_on_device, verify_back_has_pattern, "cuMemcpyDtoHAsync_v2"},
    {"cuEventRecord", 1, FAULT, 0, op_download_into, put_pattern_on_device, verify_back_has_pattern, "cuEventRecord"},
    {"cuEventQuery", 1, FAULT, 0, op_download_into, put_pattern_on_device, verify_back_has_pattern, "cuEventQuery"},
    {"cuMemAllocHost", 1, OOM, 0, op_upload, NULL, verify_device_has_pattern, "cuMemAllocHost_v2"},
    {"cuMemcpyHtoDAsync", 1, FAULT, 0, op_upload, NULL, verify_device_has_pattern, "cuMemcpyHtoDAsync_v2"},
    {"cuEventRecord", 1, FAULT, 0, op_upload, NULL, verify_device_has_pattern, "cuEventRecord"},
    {"cuEventQuery", 1, FAULT, 0, op_upload, NULL, verify_device_has_pattern, "cuEventQuery"},
    {"cuMemAllocHost", 1, OOM, 0, op_download, put_pattern_on_device, verify_back_has_pattern, "cuMemAllocHost_v2"},
    {"cuMemcpyDtoHAsync", 1, FAULT, 0, op_download, put_pattern_on_device, verify_back_has_pattern, "cuMemcpyDtoHAsync_v2"},
    {"cuEventRecord", 1, FAULT, 0, op_download, put_pattern_on_device, verify_back_has_pattern, "cuEventRecord"},
    {"cuEventQuery", 1, FAULT, 0, op_download, put_pattern_on_device, verify_back_has_pattern, "cuEventQuery"},
    /* The pageable path. */
    {"cuMemcpyHtoDAsync", 1, FAULT, 1, op_upload, NULL, verify_device_has_pattern, "cuMemcpyHtoDAsync_v2"},
    {"cuEventRecord", 1, FAULT, 1, op_upload, NULL, verify_device_has_pattern, "cuEventRecord"},
    {"cuEventQuery", 1, FAULT, 1, op_upload, NULL, verify_device_has_pattern, "cuEventQuery"},
    {"cuEventQuery", 1, FAULT, 1, op_download, put_pattern_on_device, verify_back_has_pattern, "cuEventQuery"},
    {"cuMemcpyDtoH", 1, FAULT, 1, op_download, put_pattern_on_device, verify_back_has_pattern, "cuMemcpyDtoH_v2"},
};

static void transfers_survive_each_driver_failure(void) {
    for (size_t i = 0; i < sizeof transfer_faults / sizeof transfer_faults[0]; i++) {
        const transfer_fault *f = &transfer_faults[i];
        seed++;
        if (f->before) f->before();
        if (!strcmp(f->entry, "cuMemAllocHost")) pinstage_buffer_shrink_to_fit(buf); /* force a pin */
        pinstage_buffer_set_auto_stage_max_bytes(buf, f->direct ? 0 : PINSTAGE_AUTO_STAGE_PROFILE);
        pinstage_stats before, after;
        pinstage_buffer_stats(buf, &before);
        size_t capacity = pinstage_buffer_capacity(buf);

        emu->fail(f->entry, f->nth, f->code, 0);
        pinstage_status s = f->op();
        emu->clear_faults();
        if (s != f->code)
            fprintf(stderr, "  case %zu: %s call %lu failing\n", i, f->entry, f->nth);
        CHECK_STATUS(s, f->code);
        CHECK_MESSAGE(f->named);
        pinstage_buffer_stats(buf, &after);
        CHECK_EQ(after.staged_transfers, before.staged_transfers);
        CHECK_EQ(after.pageable_transfers, before.pageable_transfers);
        CHECK_EQ(after.bytes_uploaded, before.bytes_uploaded);
        CHECK_EQ(after.bytes_downloaded, before.bytes_downloaded);
        CHECK_EQ(after.pinned_allocations, before.pinned_allocations);
        CHECK_EQ(pinstage_buffer_capacity(buf), capacity);

        /* Still usable, with no synchronization in between: the same
         * operation succeeds and moves the right bytes. */
        seed++;
        if (f->before) f->before();
        CHECK_OK(f->op());
        f->verify();
    }
}

/* A driver that fails from some call on (a lost context, say) and
 * recovers: while even the drain after a failed wait fails, nobody can say
 * whether a DMA still uses the pinned block, so the buffer drops it; the
 * next transfer after recovery pins a fresh one and moves the right bytes,
 * with no synchronization in between. */
static void a_persistent_failure_then_recovery(void) {
    pinstage_stats st0, st1;
    pinstage_buffer_set_auto_stage_max_bytes(buf, PINSTAGE_AUTO_STAGE_PROFILE);
    pinstage_buffer_stats(buf, &st0);
    emu->fail("cuEventQuery", 1, 719 /* LAUNCH_FAILED */, 1);
    emu->fail("cuStreamSynchronize", 1, 719, 1);
    for (int i = 0; i < 3; i++) CHECK_STATUS(op_upload(), 719);
    CHECK_STATUS(op_download(), 719);
    emu->clear_faults();
    pinstage_buffer_stats(buf, &st1);
    CHECK_EQ(st1.retired_blocks, st0.retired_blocks + 4);
    CHECK_EQ(st1.staged_transfers, st0.staged_transfers);
    seed++;
    CHECK_OK(op_upload());
    verify_device_has_pattern();
}

static void reserve_keeps_old_memory_on_failure(void) {
    pinstage_buffer *b;
    REQUIRE_OK(pinstage_buffer_create_with_capacity(&b, 65536));
    pinstage_emu_live before = live_now();
    /* A non-memory failure: the old allocation is kept. */
    emu->fail("cuMemAllocHost", 1, FAULT, 0);
    CHECK_STATUS(pinstage_buffer_reserve(b, 200000), FAULT);
    CHECK_MESSAGE("pinstage_buffer_reserve: cuMemAllocHost_v2 failed: CUDA_ERROR_UNKNOWN");
    CHECK_EQ(pinstage_buffer_capacity(b), 65536);
    CHECK_NO_LEAK(before);
    /* Out of memory once: the old one is released and the retry succeeds. */
    emu->fail("cuMemAllocHost", 1, OOM, 0);
    CHECK_OK(pinstage_buffer_reserve(b, 200000));
    CHECK_EQ(pinstage_buffer_capacity(b), 4 * 65536);
    CHECK_EQ(live_now().pinned_allocations, before.pinned_allocations);
    /* Out of memory twice: capacity 0, still usable. */
    emu->fail("cuMemAllocHost", 1, OOM, 1);
    CHECK_STATUS(pinstage_buffer_reserve(b, 1 << 20), OOM);
    emu->clear_faults();
    CHECK_EQ(pinstage_buffer_capacity(b), 0);
    CHECK_EQ(live_now().pinned_allocations, before.pinned_allocations - 1);
    pinstage_stats st;
    pinstage_buffer_stats(b, &st);
    CHECK_EQ(st.pinned_allocations, 2);
    CHECK_EQ(st.peak_capacity, 4 * 65536);
    CHECK_OK(pinstage_buffer_reserve(b, 1));
    CHECK_EQ(pinstage_buffer_capacity(b), 65536);
    pinstage_buffer_free(b);
}

/* Releasing pinned memory cannot fail the caller (the calls return void); a
 * refused cuMemFreeHost still leaves an empty, usable buffer. */
static void a_refused_release_leaves_a_usable_buffer(void) {
    pinstage_buffer *b;
    REQUIRE_OK(pinstage_buffer_create_with_capacity(&b, 1000));
    emu->fail("cuMemFreeHost", 1, FAULT, 0);
    pinstage_buffer_shrink_to_fit(b);
    CHECK_EQ(emu->calls("cuMemFreeHost") > 0, 1);
    CHECK_EQ(pinstage_buffer_capacity(b), 0);
    seed++;
    pinstage_buffer *saved = buf;
    buf = b;
    CHECK_OK(op_upload());
    verify_device_has_pattern();
    buf = saved;
    pinstage_buffer_free(b);
}

static void creation_failures_leak_nothing(void) {
    pinstage_emu_live before = live_now();
    pinstage_buffer *b = (pinstage_buffer *)0x1;
    emu->fail("cuMemAllocHost", 1, OOM, 0);
    CHECK_STATUS(pinstage_buffer_create_with_capacity(&b, 1000), OOM);
    CHECK_MESSAGE("pinstage_buffer_create_with_capacity");
    CHECK(b == NULL);
    pinstage_devbuf *d = (pinstage_devbuf *)0x1;
    emu->fail("cuMemAlloc", 1, OOM, 0);
    CHECK_STATUS(pinstage_devbuf_alloc_f32(&d, 100), OOM);
    CHECK_MESSAGE("cuMemAlloc_v2");
    CHECK(d == NULL);
    CUstream s = (CUstream)0x1;
    emu->fail("cuStreamCreate", 1, OOM, 0);
    CHECK_STATUS(pinstage_stream_create(&s, 0), OOM);
    CHECK(s == NULL);
    CHECK_NO_LEAK(before);
}

static void baseline_copies_report_failures(void) {
    seed++;
    fill_pattern(src, BYTES, seed);
    emu->fail("cuMemcpyHtoD", 1, FAULT, 0);
    CHECK_STATUS(pinstage_devbuf_copy_from_host(dev, src, N), FAULT);
    CHECK_MESSAGE("pinstage_devbuf_copy_from_host: cuMemcpyHtoD_v2 failed");
    emu->fail("cuMemcpyDtoH", 1, FAULT, 0);
    CHECK_STATUS(pinstage_devbuf_copy_to_host(dev, back, N), FAULT);
    CHECK_MESSAGE("cuMemcpyDtoH_v2");
    CHECK_OK(pinstage_devbuf_copy_from_host(dev, src, N));
    verify_device_has_pattern();
}

static void helpers_report_failures(void) {
    pinstage_devbuf *d;
    REQUIRE_OK(pinstage_devbuf_alloc_u8(&d, 64));
    emu->fail("cuMemFree", 1, FAULT, 0);
    CHECK_STATUS(pinstage_devbuf_free(d), FAULT); /* the handle is gone all the same */
    CHECK_MESSAGE("cuMemFree_v2");

    emu->fail("cuDevicePrimaryCtxRetain", 1, FAULT, 0);
    CHECK_STATUS(pinstage_context_init(0), FAULT);
    unsigned long releases = emu->calls("cuDevicePrimaryCtxRelease");
    emu->fail("cuCtxSetCurrent", 1, FAULT, 0);
    CHECK_STATUS(pinstage_context_init(0), FAULT);
    CHECK_EQ(emu->calls("cuDevicePrimaryCtxRelease"), releases + 1); /* the retain was undone */
    emu->fail("cuDevicePrimaryCtxRelease", 2, FAULT, 0);
    REQUIRE_OK(pinstage_context_init(0));
    CHECK_STATUS(pinstage_context_release(0), FAULT);
    CHECK_OK(pinstage_context_release(0)); /* retry releases it */

    CUstream s;
    REQUIRE_OK(pinstage_stream_create(&s, 0));
    emu->fail("cuStreamSynchronize", 1, FAULT, 0);
    CHECK_STATUS(pinstage_stream_synchronize(s), FAULT);
    emu->fail("cuStreamDestroy", 1, FAULT, 0);
    CHECK_STATUS(pinstage_stream_destroy(s), FAULT);
    CHECK_OK(pinstage_stream_destroy(s));

    int count;
    emu->fail("cuDeviceGetCount", 1, FAULT, 0);
    CHECK_STATUS(pinstage_device_count(&count), FAULT);
    pinstage_device_info info;
    emu->fail("cuDeviceGetName", 1, FAULT, 0);
    CHECK_STATUS(pinstage_device_get_info(0, &info), FAULT);
    emu->fail("cuDeviceGetAttribute", 3, FAULT, 0);
    CHECK_STATUS(pinstage_device_get_info(0, &info), FAULT);
    void *fn;
    emu->fail("cuGetProcAddress", 1, FAULT, 0);
    CHECK_STATUS(pinstage_driver_get_proc("cuMemsetD8Async", 3020, &fn), FAULT);
    CHECK(fn == NULL);
    emu->clear_faults();
}

int main(void) {
    test_setup();
    if (!emu) {
        printf("skipped: fault injection needs the emulated driver\n");
        return TEST_SKIPPED;
    }
    REQUIRE_OK(pinstage_stream_create(&stream, PINSTAGE_STREAM_NON_BLOCKING));
    REQUIRE_OK(pinstage_buffer_create(&buf));
    REQUIRE_OK(pinstage_devbuf_alloc_f32(&dev, N));
    pinstage_emu_live before = live_now();
    RUN(transfers_survive_each_driver_failure);
    RUN(a_persistent_failure_then_recovery);
    RUN(reserve_keeps_old_memory_on_failure);
    RUN(a_refused_release_leaves_a_usable_buffer);
    RUN(creation_failures_leak_nothing);
    RUN(baseline_copies_report_failures);
    RUN(helpers_report_failures);
    check_current_test = "no_leaks";
    pinstage_buffer_shrink_to_fit(buf);
    pinstage_emu_live now = live_now();
    /* One pinned allocation stays: the cuMemFreeHost the driver refused. */
    CHECK_EQ(now.pinned_allocations, 1);
    /* One device allocation stays: the cuMemFree the driver refused above. */
    CHECK_EQ(now.device_allocations, before.device_allocations + 1);
    CHECK_EQ(now.streams, before.streams);
    CHECK_EQ(now.events, before.events + 4); /* buf's slot events, freed with it */
    pinstage_devbuf_free(dev);
    pinstage_buffer_free(buf);
    pinstage_stream_destroy(stream);
    return test_finish();
}
