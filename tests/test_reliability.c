/* SPDX-License-Identifier: MIT */
/* What a long-lived service relies on beyond the fault sweep: re-entry from
 * a fill callback is refused, pinned memory that cannot be had degrades to
 * the pageable path (or fails, when strict) under a process or buffer
 * limit, a release the driver refuses is reported and retried, helpers name
 * the real cause of a failure. */
#include <pthread.h>

#include "check.h"

#define K 1024u

static CUstream stream;

/* ---- Re-entry ------------------------------------------------------------------------ */

typedef struct {
    pinstage_buffer *buf;
    pinstage_ring *ring;
    pinstage_devbuf *dev;
    pinstage_status got[6];
} reentry;

static void fill_calling_its_own_buffer(void *dst, size_t n, void *user) {
    reentry *r = user;
    const void *view;
    unsigned char small[16];
    r->got[0] = pinstage_buffer_reserve(r->buf, 16u << 20);
    r->got[1] = pinstage_buffer_upload(r->buf, r->dev, dst, n, stream);
    r->got[2] = pinstage_buffer_download_into(r->buf, r->dev, n, stream, &view);
    r->got[3] = pinstage_buffer_shrink_to_fit(r->buf);
    r->got[4] = pinstage_buffer_free(r->buf);
    r->got[5] = pinstage_buffer_download(r->buf, small, 16, r->dev, stream); /* n mismatch is checked first */
    fill_pattern(dst, n, 77);
}

static void fill_calling_its_own_ring(void *dst, size_t n, void *user) {
    reentry *r = user;
    pinstage_ticket t;
    r->got[0] = pinstage_ring_reserve(r->ring, 16u << 20);
    r->got[1] = pinstage_ring_upload_async(r->ring, r->dev, dst, n, stream);
    r->got[2] = pinstage_ring_download_async(r->ring, r->dev, n, stream, &t);
    r->got[3] = pinstage_ring_synchronize(r->ring);
    r->got[4] = pinstage_ring_free(r->ring);
    r->got[5] = pinstage_ring_release(r->ring, 1);
    fill_pattern(dst, n, 78);
}

static void a_fill_callback_cannot_reenter_its_own_buffer(void) {
    size_t bytes = 64 * K;
    reentry r = {0};
    unsigned char *back = malloc(bytes);
    REQUIRE_OK(pinstage_buffer_create(&r.buf));
    REQUIRE_OK(pinstage_ring_create(&r.ring, 2, 0));
    REQUIRE_OK(pinstage_devbuf_alloc_u8(&r.dev, bytes));
    CHECK_OK(pinstage_buffer_upload_with(r.buf, r.dev, bytes, stream, fill_calling_its_own_buffer, &r));
    for (int i = 0; i < 5; i++) CHECK_STATUS(r.got[i], PINSTAGE_ERROR_NOT_PERMITTED);
    CHECK_STATUS(r.got[5], PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_EQ(pinstage_buffer_capacity(r.buf), bytes); /* the reserve did not happen */
    read_landed(r.dev, back);
    CHECK_EQ(pattern_mismatch(back, bytes, 77), -1);
    pinstage_stats st;
    pinstage_buffer_stats(r.buf, &st);
    CHECK_EQ(st.staged_transfers, 1);

    memset(r.got, 0, sizeof r.got);
    CHECK_OK(pinstage_ring_upload_with_async(r.ring, r.dev, bytes, stream, fill_calling_its_own_ring, &r));
    for (int i = 0; i < 6; i++) CHECK_STATUS(r.got[i], PINSTAGE_ERROR_NOT_PERMITTED);
    CHECK_OK(pinstage_ring_synchronize(r.ring));
    read_landed(r.dev, back);
    CHECK_EQ(pattern_mismatch(back, bytes, 78), -1);
    CHECK_OK(pinstage_ring_free(r.ring));
    CHECK_OK(pinstage_buffer_free(r.buf));
    pinstage_devbuf_free(r.dev);
    free(back);
}

/* The typed download_into refuses a NULL view before any driver call. */
static void typed_download_into_refuses_a_null_view(void) {
    pinstage_buffer *buf;
    pinstage_devbuf *d;
    REQUIRE_OK(pinstage_buffer_create(&buf));
    REQUIRE_OK(pinstage_devbuf_alloc_f32(&d, 256));
    unsigned long calls = driver_calls();
    CHECK_STATUS(pinstage_buffer_download_into_f32(buf, d, 256, stream, NULL), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_MESSAGE("view is NULL");
    CHECK_EQ(driver_calls(), calls);
    pinstage_stats st;
    pinstage_buffer_stats(buf, &st);
    CHECK_EQ(st.staged_transfers, 0);
    pinstage_devbuf_free(d);
    pinstage_buffer_free(buf);
}

/* ---- Pinned limits and the pageable fallback ------------------------------------------- */

static void round_trip_bytes(pinstage_buffer *buf, pinstage_devbuf *d, size_t bytes, unsigned seed) {
    unsigned char *src = malloc(bytes), *back = malloc(bytes);
    fill_pattern(src, bytes, seed);
    CHECK_OK(pinstage_buffer_upload_u8(buf, d, src, bytes, stream));
    read_landed(d, back);
    CHECK_EQ(pattern_mismatch(back, bytes, seed), -1);
    memset(back, 0, bytes);
    CHECK_OK(pinstage_buffer_download_u8(buf, back, bytes, d, stream));
    CHECK_EQ(pattern_mismatch(back, bytes, seed), -1);
    free(src);
    free(back);
}

static void unpinnable_memory_degrades_to_the_pageable_path(void) {
    size_t bytes = 300 * K, held = 0, limit = 0;
    pinstage_buffer *buf;
    pinstage_devbuf *d;
    REQUIRE_OK(pinstage_buffer_create(&buf));
    pinstage_buffer_set_auto_stage_max_bytes(buf, SIZE_MAX); /* always staged, if it can be */
    REQUIRE_OK(pinstage_devbuf_alloc_u8(&d, bytes));
    pinstage_get_pinned_usage(&held, &limit);
    CHECK_EQ(limit, SIZE_MAX);
    pinstage_emu_live live = live_now();

    /* A process limit below what one transfer needs. */
    pinstage_set_pinned_limit(held + 64 * K);
    round_trip_bytes(buf, d, bytes, 501);
    pinstage_stats st;
    pinstage_buffer_stats(buf, &st);
    CHECK_EQ(st.pinned_fallbacks, 2);
    CHECK_EQ(st.pageable_transfers, 2);
    CHECK_EQ(st.staged_transfers, 0);
    CHECK_EQ(st.pinned_allocations, 0);
    CHECK_EQ(pinstage_buffer_capacity(buf), 0);
    CHECK_EQ(live_now().pinned_allocations, live.pinned_allocations);
    /* upload_with has no fallback; strict upload neither. No driver call. */
    const void *view;
    unsigned long allocs = emu ? emu->calls("cuMemAllocHost") : 0;
    CHECK_STATUS(pinstage_buffer_download_into(buf, d, bytes, stream, &view), PINSTAGE_ERROR_OUT_OF_MEMORY);
    CHECK_MESSAGE("pinned limit");
    pinstage_buffer_set_strict(buf, 1);
    unsigned char *host = calloc(1, bytes);
    CHECK_STATUS(pinstage_buffer_upload_u8(buf, d, host, bytes, stream), PINSTAGE_ERROR_OUT_OF_MEMORY);
    if (emu) CHECK_EQ(emu->calls("cuMemAllocHost"), allocs); /* the limit is checked before the driver */
    pinstage_buffer_stats(buf, &st);
    CHECK_EQ(st.pinned_fallbacks, 2);
    pinstage_set_pinned_limit(SIZE_MAX);
    round_trip_bytes(buf, d, bytes, 502);
    pinstage_buffer_stats(buf, &st);
    CHECK_EQ(st.staged_transfers, 2);
    pinstage_get_pinned_usage(&held, NULL);
    CHECK(held >= pinstage_buffer_capacity(buf));

    /* A buffer's own limit. */
    pinstage_buffer *small;
    REQUIRE_OK(pinstage_buffer_create(&small));
    pinstage_buffer_set_auto_stage_max_bytes(small, SIZE_MAX);
    pinstage_buffer_set_pinned_limit(small, 128 * K);
    round_trip_bytes(small, d, bytes, 503); /* falls back */
    pinstage_buffer_stats(small, &st);
    CHECK_EQ(st.pinned_fallbacks, 2);
    CHECK_STATUS(pinstage_buffer_reserve(small, bytes), PINSTAGE_ERROR_OUT_OF_MEMORY);
    CHECK_MESSAGE("buffer's pinned limit");
    CHECK_OK(pinstage_buffer_reserve(small, 100 * K));
    CHECK_EQ(pinstage_buffer_capacity(small), 128 * K);
    /* The driver itself out of pinned memory: the same fallback. */
    if (emu) {
        pinstage_buffer *other;
        REQUIRE_OK(pinstage_buffer_create(&other));
        pinstage_buffer_set_auto_stage_max_bytes(other, SIZE_MAX);
        unsigned char *src = malloc(bytes), *back = malloc(bytes);
        fill_pattern(src, bytes, 504);
        emu->fail("cuMemAllocHost", 1, PINSTAGE_ERROR_OUT_OF_MEMORY, 0);
        CHECK_OK(pinstage_buffer_upload_u8(other, d, src, bytes, stream));
        emu->fail("cuMemAllocHost", 1, PINSTAGE_ERROR_OUT_OF_MEMORY, 0);
        CHECK_OK(pinstage_buffer_download_u8(other, back, bytes, d, stream));
        emu->clear_faults();
        CHECK_EQ(pattern_mismatch(back, bytes, 504), -1);
        pinstage_buffer_stats(other, &st);
        CHECK_EQ(st.pinned_fallbacks, 2);
        free(src);
        free(back);
        pinstage_buffer_free(other);
    }
    free(host);
    pinstage_buffer_free(small);
    pinstage_buffer_free(buf);
    pinstage_devbuf_free(d);
}

/* ---- Refused releases --------------------------------------------------------------------- */

static void *free_without_a_context(void *arg) {
    /* A new thread: no context is current. The H200's driver releases
     * pinned memory all the same (so does the emulator). */
    return (void *)(intptr_t)pinstage_buffer_free(arg);
}

static void a_refused_release_is_reported_and_retried(void) {
    pinstage_buffer *buf;
    size_t held_before = 0, held = 0;
    pinstage_get_pinned_usage(&held_before, NULL);
    pinstage_emu_live live = live_now();
    REQUIRE_OK(pinstage_buffer_create_with_capacity(&buf, 256 * K));
    pthread_t t;
    void *result;
    REQUIRE_OK(pthread_create(&t, NULL, free_without_a_context, buf) ? PINSTAGE_ERROR_OUT_OF_MEMORY : 0);
    pthread_join(t, &result);
    CHECK_OK((pinstage_status)(intptr_t)result);
    pinstage_get_pinned_usage(&held, NULL);
    CHECK_EQ(held, held_before);
    CHECK_NO_LEAK(live);
    if (!emu) return;

    /* A free the driver refuses: reported, orphaned, still counted, and
     * released when asked again. */
    REQUIRE_OK(pinstage_buffer_create_with_capacity(&buf, 256 * K));
    emu->fail("cuMemFreeHost", 1, PINSTAGE_ERROR_INVALID_CONTEXT, 0);
    CHECK_STATUS(pinstage_buffer_free(buf), PINSTAGE_ERROR_INVALID_CONTEXT);
    CHECK_MESSAGE("pinstage_buffer_free: cuMemFreeHost failed");
    pinstage_get_pinned_usage(&held, NULL);
    CHECK_EQ(held - held_before, 256 * K);
    CHECK_EQ(live_now().pinned_allocations, live.pinned_allocations + 1);
    CHECK_OK(pinstage_pinned_retry_releases());
    pinstage_get_pinned_usage(&held, NULL);
    CHECK_EQ(held, held_before);
    CHECK_NO_LEAK(live);

    /* Inside a call that succeeds: counted, named, and released later. */
    REQUIRE_OK(pinstage_buffer_create_with_capacity(&buf, 64 * K));
    emu->fail("cuMemFreeHost", 1, 999, 0);
    CHECK_OK(pinstage_buffer_reserve(buf, 512 * K));
    CHECK_MESSAGE("cuMemFreeHost failed");
    pinstage_stats st;
    pinstage_buffer_stats(buf, &st);
    CHECK_EQ(st.release_failures, 1);
    CHECK_EQ(pinstage_buffer_capacity(buf), 512 * K);
    pinstage_get_pinned_usage(&held, NULL);
    CHECK_EQ(held - held_before, 512 * K + 64 * K);
    emu->fail("cuMemFreeHost", 1, 999, 0);
    CHECK_STATUS(pinstage_buffer_shrink_to_fit(buf), 999);
    CHECK_EQ(pinstage_buffer_capacity(buf), 0);
    /* The next allocation releases the orphans first. */
    CHECK_OK(pinstage_buffer_reserve(buf, 64 * K));
    pinstage_get_pinned_usage(&held, NULL);
    CHECK_EQ(held - held_before, 64 * K);
    CHECK_OK(pinstage_buffer_free(buf));
    CHECK_NO_LEAK(live);
}

/* ---- A failed cleanup does not hide the failure ------------------------------------------- */

static void fill_seeded(void *dst, size_t n, void *user) { fill_pattern(dst, n, *(unsigned *)user); }

/* When a call fails and the release it then makes is refused too, the
 * status and the message are still the first failure's: the refusal is
 * counted and the block orphaned, released later. */
static void a_refused_release_after_a_failure_keeps_the_first_failure(void) {
    if (!emu) return;
    pinstage_emu_live live = live_now();
    size_t bytes = 64 * K;
    unsigned seed = 31;
    unsigned char *back = malloc(bytes);
    pinstage_devbuf *dev;
    pinstage_buffer *buf;
    pinstage_stats st;
    REQUIRE_OK(pinstage_devbuf_alloc_u8(&dev, bytes));

    /* A fresh block whose copy failed goes back; its release is refused. */
    REQUIRE_OK(pinstage_buffer_create(&buf));
    emu->fail("cuMemcpyHtoDAsync", 1, 999, 0);
    emu->fail("cuMemFreeHost", 1, 998, 0);
    CHECK_STATUS(pinstage_buffer_upload_with(buf, dev, bytes, stream, fill_seeded, &seed), 999);
    CHECK_MESSAGE("pinstage_buffer_upload_with: cuMemcpyHtoDAsync_v2 failed");
    pinstage_buffer_stats(buf, &st);
    CHECK_EQ(st.release_failures, 1);
    CHECK_EQ(st.pinned_allocations, 0);
    CHECK_EQ(pinstage_buffer_capacity(buf), 0);
    emu->clear_faults();

    /* A failed wait retires the warm block; its release is refused. */
    CHECK_OK(pinstage_buffer_upload_with(buf, dev, bytes, stream, fill_seeded, &seed));
    emu->fail("cuEventQuery", 1, 999, 1);
    emu->fail("cuStreamSynchronize", 1, 999, 1);
    emu->fail("cuMemFreeHost", 1, 998, 0);
    seed = 32;
    CHECK_STATUS(pinstage_buffer_upload_with(buf, dev, bytes, stream, fill_seeded, &seed), 999);
    CHECK_MESSAGE("pinstage_buffer_upload_with: cuEventQuery failed");
    pinstage_buffer_stats(buf, &st);
    CHECK_EQ(st.retired_blocks, 1);
    CHECK_EQ(st.release_failures, 2);
    CHECK_EQ(pinstage_buffer_capacity(buf), 0);
    emu->clear_faults();
    seed = 33;
    CHECK_OK(pinstage_buffer_upload_with(buf, dev, bytes, stream, fill_seeded, &seed));
    read_landed(dev, back);
    CHECK_EQ(pattern_mismatch(back, bytes, 33), -1);

    /* Out of memory beside the held block, whose release is refused: the
     * allocation's failure is what the caller reads. */
    emu->fail("cuMemAllocHost", 1, PINSTAGE_ERROR_OUT_OF_MEMORY, 0);
    emu->fail("cuMemFreeHost", 1, 998, 0);
    CHECK_STATUS(pinstage_buffer_reserve(buf, 8 * bytes), PINSTAGE_ERROR_OUT_OF_MEMORY);
    CHECK_MESSAGE("pinstage_buffer_reserve: cuMemAllocHost_v2 failed");
    pinstage_buffer_stats(buf, &st);
    CHECK_EQ(st.release_failures, 3);
    emu->clear_faults();

    /* An orphan's refusal inside a later allocation is not that call's
     * failure: it succeeds, and the thread's message is left as it was. */
    CHECK_STATUS(pinstage_buffer_reserve(buf, 0), PINSTAGE_ERROR_INVALID_VALUE);
    emu->fail("cuMemFreeHost", 1, 998, 0);
    CHECK_OK(pinstage_buffer_reserve(buf, bytes));
    CHECK_MESSAGE("pinstage_buffer_reserve: bytes is 0");
    CHECK_OK(pinstage_pinned_retry_releases());
    CHECK_OK(pinstage_buffer_free(buf));

    /* The ring: a slot whose wait failed is retired, its release refused;
     * the free that found it reports the wait, not the release. */
    pinstage_ring *ring;
    REQUIRE_OK(pinstage_ring_create(&ring, 3, 0));
    CHECK_OK(pinstage_ring_upload_with_async(ring, dev, bytes, stream, fill_seeded, &seed));
    CHECK_OK(pinstage_ring_synchronize(ring));
    CHECK_OK(pinstage_ring_upload_with_async(ring, dev, bytes, stream, fill_seeded, &seed));
    emu->fail("cuEventQuery", 1, 999, 1);
    emu->fail("cuMemFreeHost", 1, 998, 0);
    CHECK_STATUS(pinstage_ring_synchronize(ring), 999);
    CHECK_MESSAGE("pinstage_ring_synchronize: cuEventQuery failed");
    pinstage_ring_stats rst;
    pinstage_ring_get_stats(ring, &rst);
    CHECK_EQ(rst.retired_blocks, 1);
    CHECK_EQ(rst.release_failures, 1);
    emu->clear_faults();
    CHECK_OK(pinstage_ring_upload_with_async(ring, dev, bytes, stream, fill_seeded, &seed));
    emu->fail("cuEventQuery", 1, 999, 1);
    emu->fail("cuMemFreeHost", 1, 998, 1);
    CHECK_STATUS(pinstage_ring_free(ring), 999);
    CHECK_MESSAGE("pinstage_ring_free: cuEventQuery failed");
    emu->clear_faults();

    CHECK_OK(pinstage_pinned_retry_releases());
    pinstage_devbuf_free(dev);
    free(back);
    CHECK_NO_LEAK(live);
}

/* ---- Helpers name the cause ---------------------------------------------------------------- */

static void helpers_name_the_real_cause(void) {
    pinstage_device_info info;
    CHECK_STATUS(pinstage_device_get_info(7, &info), 101);
    CHECK_MESSAGE("device 7 does not exist");
    if (!emu) return;
    emu->fail("cuDeviceGet", 1, 999, 0);
    CHECK_STATUS(pinstage_context_init(0), 999);
    CHECK_MESSAGE("cuDeviceGet failed");
    emu->fail("cuDevicePrimaryCtxGetState", 1, 999, 0);
    REQUIRE_OK(pinstage_context_init(0));
    CHECK_STATUS(pinstage_context_release(0), 999);
    CHECK_MESSAGE("cuDevicePrimaryCtxGetState");
    /* The first of the two releases failing leaves the caller's retain. */
    REQUIRE_OK(pinstage_context_init(0));
    unsigned long releases = emu->calls("cuDevicePrimaryCtxRelease");
    emu->fail("cuDevicePrimaryCtxRelease", 1, 999, 0);
    CHECK_STATUS(pinstage_context_release(0), 999);
    CHECK_EQ(emu->calls("cuDevicePrimaryCtxRelease"), releases + 1);
    CHECK_OK(pinstage_context_release(0));
    emu->fail("cuCtxGetCurrent", 1, 999, 0);
    emu->clear_faults();
}

int main(void) {
    test_setup();
    REQUIRE_OK(pinstage_stream_create(&stream, PINSTAGE_STREAM_NON_BLOCKING));
    pinstage_emu_live before = live_now();
    RUN(a_fill_callback_cannot_reenter_its_own_buffer);
    RUN(typed_download_into_refuses_a_null_view);
    RUN(unpinnable_memory_degrades_to_the_pageable_path);
    RUN(a_refused_release_is_reported_and_retried);
    RUN(a_refused_release_after_a_failure_keeps_the_first_failure);
    RUN(helpers_name_the_real_cause);
    check_current_test = "no_leaks";
    CHECK_NO_LEAK(before);
    pinstage_stream_destroy(stream);
    return test_finish();
}
