/* SPDX-License-Identifier: MIT */
/* The asynchronous ring: no slot is written while a copy still uses it (both
 * directions, same stream and across streams), ordering against queued
 * work on every stream kind, the wait and would-block modes, tickets and
 * view lifetime, teardown with copies in flight, a driver failure at every
 * call, bad input, and rings used from several threads at once.
 *
 * Copies are kept in flight on purpose: on the emulator by a slow DMA
 * (PINSTAGE_EMU_LATENCY_US-style timing set per test), on a GPU by device
 * work queued ahead of them. A ring that reused a slot too early then moves
 * the wrong bytes, which the checks read without synchronizing first. */
#include <pthread.h>

#include "check.h"

#define K 1024u
#define M (1024u * 1024u)

static CUstream nonblocking, nonblocking2, blocking;

static pinstage_ring *make_ring(unsigned slots, unsigned flags) {
    pinstage_ring *ring;
    REQUIRE_OK(pinstage_ring_create(&ring, slots, flags));
    return ring;
}

static pinstage_devbuf *device_u8(size_t bytes) {
    pinstage_devbuf *d;
    REQUIRE_OK(pinstage_devbuf_alloc_u8(&d, bytes));
    return d;
}

/* Device memory holding the pattern `seed`. */
static pinstage_devbuf *device_with(size_t bytes, unsigned seed) {
    pinstage_devbuf *d = device_u8(bytes);
    unsigned char *p = malloc(bytes);
    fill_pattern(p, bytes, seed);
    write_device(d, p);
    free(p);
    return d;
}

/* The device buffer holds the pattern `seed`, read without synchronizing. */
static void check_device(const pinstage_devbuf *d, unsigned seed) {
    size_t bytes = pinstage_devbuf_bytes(d);
    unsigned char *back = malloc(bytes);
    read_landed(d, back);
    long at = pattern_mismatch(back, bytes, seed);
    if (at >= 0) fprintf(stderr, "  device buffer of %zu bytes, pattern %u: first wrong byte at %ld\n", bytes, seed, at);
    CHECK_EQ(at, -1);
    free(back);
}

static void check_view(const void *view, size_t bytes, unsigned seed) {
    CHECK(view != NULL);
    if (!view) return;
    long at = pattern_mismatch(view, bytes, seed);
    if (at >= 0) fprintf(stderr, "  view of %zu bytes, pattern %u: first wrong byte at %ld\n", bytes, seed, at);
    CHECK_EQ(at, -1);
}

/* Ordinary memory holding the pattern `seed`, made before the copies a test
 * keeps in flight (making it takes longer than some of them). */
static unsigned char *source_for(size_t bytes, unsigned seed) {
    unsigned char *src = malloc(bytes);
    fill_pattern(src, bytes, seed);
    return src;
}

/* Uploads from ordinary memory, then scribbles over it and frees it: the
 * call copied it, so the device must still get what it held. */
static pinstage_status upload_source(pinstage_ring *ring, pinstage_devbuf *d, unsigned char *src, CUstream stream) {
    size_t bytes = pinstage_devbuf_bytes(d);
    pinstage_status s = pinstage_ring_upload_async(ring, d, src, bytes, stream);
    memset(src, 0xee, bytes);
    free(src);
    return s;
}

static pinstage_status upload_pattern(pinstage_ring *ring, pinstage_devbuf *d, unsigned seed, CUstream stream) {
    return upload_source(ring, d, source_for(pinstage_devbuf_bytes(d), seed), stream);
}

typedef struct {
    unsigned seed;
    int calls;
} pattern_fill;

static void fill_with_pattern(void *dst, size_t n, void *user) {
    pattern_fill *f = user;
    fill_pattern(dst, n, f->seed); /* u8 elements: n is bytes */
    f->calls++;
}

/* Emulated latency per operation for the tests that assert a slot was still
 * busy when the next call asked: delay_stream's three operations keep it
 * busy 150 ms. At 5 ms (15 ms in all) a ThreadSanitizer run on a 2-CPU
 * machine busy with another test suite once stalled the test thread longer,
 * the copy landed first and no wait was counted. */
#define HELD_LATENCY_US 50000

/* Keeps `stream` busy for a while (device work), so what is queued next
 * stays in flight. */
static void delay_stream(CUstream stream) {
    static pinstage_devbuf *scratch;
    if (!scratch) scratch = device_u8(4 * K);
    for (int i = 0; i < (emu ? 1 : 3); i++) queue_busy_work(stream, scratch, 0x11);
}

/* ---- No slot is written while a copy uses it -------------------------------------- */

static void uploads_never_overwrite_a_slot_in_flight(void) {
    size_t sizes[] = {1, 64 * K - 1, 64 * K, 300 * K + 5, 2 * M + 3}; /* the last copied by the pool */
    enum { N = sizeof sizes / sizeof sizes[0] };
    if (emu) emu->set_timing(5000, 2);
    for (unsigned slots = 1; slots <= 2; slots++) {
        pinstage_ring *ring = make_ring(slots, 0);
        pinstage_devbuf *d[2 * N];
        unsigned char *src[2 * N];
        for (unsigned i = 0; i < 2 * N; i++) {
            d[i] = device_u8(sizes[i % N]);
            src[i] = source_for(sizes[i % N], 2000 + slots * 100 + i);
        }
        for (unsigned i = 0; i < 2 * N; i++) {
            delay_stream(nonblocking);
            if (i % 2) {
                /* Fills in the call, once the slot is free. */
                pattern_fill f = {2000 + slots * 100 + i, 0};
                CHECK_OK(pinstage_ring_upload_with_async(ring, d[i], sizes[i % N], nonblocking, fill_with_pattern, &f));
                CHECK_EQ(f.calls, 1);
                free(src[i]);
            } else {
                CHECK_OK(upload_source(ring, d[i], src[i], nonblocking));
            }
        }
        CHECK_OK(pinstage_ring_synchronize(ring));
        for (unsigned i = 0; i < 2 * N; i++) check_device(d[i], 2000 + slots * 100 + i);
        pinstage_ring_stats st;
        pinstage_ring_get_stats(ring, &st);
        CHECK_EQ(st.uploads, 2 * N);
        CHECK_EQ(st.downloads, 0);
        uint64_t bytes = 0;
        for (unsigned i = 0; i < 2 * N; i++) bytes += sizes[i % N];
        CHECK_EQ(st.bytes_uploaded, bytes);
        /* Every upload after the first `slots` found its slot busy (on a
         * GPU, a fill in the call can outlast the copy before it). */
        CHECK(st.slot_waits >= (emu ? N : 1) && st.slot_waits <= 2 * N - slots);
        CHECK(st.slot_wait_ns > 0);
        CHECK_EQ(st.pinned_bytes, slots * ((2 * M + 3 + 64 * K - 1) / (64 * K) * 64 * K));
        CHECK_OK(pinstage_ring_free(ring));
        for (unsigned i = 0; i < 2 * N; i++) pinstage_devbuf_free(d[i]);
    }
    if (emu) emu->set_timing(20, 4);
}

static void downloads_never_overwrite_a_slot_in_flight(void) {
    size_t bytes = 300 * K;
    if (emu) emu->set_timing(5000, 2);
    pinstage_ring *ring = make_ring(2, 0);
    pinstage_devbuf *d[6];
    pinstage_ticket t[6];
    for (unsigned i = 0; i < 6; i++) d[i] = device_with(bytes, 2100 + i);
    /* Two in flight at a time; each next one takes the slot just collected. */
    delay_stream(nonblocking);
    CHECK_OK(pinstage_ring_download_async(ring, d[0], bytes, nonblocking, &t[0]));
    CHECK_OK(pinstage_ring_download_async(ring, d[1], bytes, nonblocking, &t[1]));
    CHECK(t[0] != 0 && t[1] != 0 && t[0] != t[1]);
    for (unsigned i = 2; i < 6; i++) {
        const void *view;
        CHECK_OK(pinstage_ring_wait(ring, t[i - 2], &view));
        check_view(view, bytes, 2100 + i - 2);
        CHECK_OK(pinstage_ring_release(ring, t[i - 2]));
        delay_stream(nonblocking);
        CHECK_OK(pinstage_ring_download_async(ring, d[i], bytes, nonblocking, &t[i]));
    }
    for (unsigned i = 4; i < 6; i++) {
        const void *view;
        CHECK_OK(pinstage_ring_wait(ring, t[i], &view));
        check_view(view, bytes, 2100 + i);
    }
    pinstage_ring_stats st;
    pinstage_ring_get_stats(ring, &st);
    CHECK_EQ(st.downloads, 6);
    CHECK_EQ(st.bytes_downloaded, 6 * bytes);
    CHECK_EQ(st.slot_waits, 0); /* downloads wait on the device, never here */
    CHECK_EQ(st.pinned_allocations, 2);
    CHECK_OK(pinstage_ring_free(ring));
    for (unsigned i = 0; i < 6; i++) pinstage_devbuf_free(d[i]);
    if (emu) emu->set_timing(20, 4);
}

/* A download released before it landed still owns its slot until it does:
 * an upload given that slot must not fill it before the download's DMA has
 * written it. Then the reverse: a download into a slot an upload still
 * reads. Both on one stream and across two. */
static void a_slot_changes_direction_only_after_its_copy(void) {
    size_t bytes = 256 * K;
    if (emu) emu->set_timing(5000, 2);
    for (int cross = 0; cross < 2; cross++) {
        CUstream a = nonblocking, b = cross ? nonblocking2 : nonblocking;
        pinstage_ring *ring = make_ring(1, 0);
        pinstage_devbuf *src = device_with(bytes, 2200), *dst = device_u8(bytes);
        unsigned char *first = source_for(bytes, 2201 + cross), *second = source_for(bytes, 2205 + cross);
        pinstage_ticket t;
        delay_stream(a);
        CHECK_OK(pinstage_ring_download_async(ring, src, bytes, a, &t));
        CHECK_OK(pinstage_ring_release(ring, t));
        CHECK_OK(upload_source(ring, dst, first, b));
        CHECK_OK(pinstage_ring_synchronize(ring));
        check_device(dst, 2201 + cross);

        /* An upload in flight on a, then a download into its slot on b. */
        pinstage_devbuf *up = device_u8(bytes), *down = device_with(bytes, 2210 + cross);
        delay_stream(a);
        CHECK_OK(upload_source(ring, up, second, a));
        CHECK_OK(pinstage_ring_download_async(ring, down, bytes, b, &t));
        const void *view;
        CHECK_OK(pinstage_ring_wait(ring, t, &view));
        check_view(view, bytes, 2210 + cross);
        check_device(up, 2205 + cross); /* the upload read the slot before the download wrote it */
        CHECK_OK(pinstage_ring_free(ring));
        pinstage_devbuf_free(src);
        pinstage_devbuf_free(dst);
        pinstage_devbuf_free(up);
        pinstage_devbuf_free(down);
    }
    if (emu) emu->set_timing(20, 4);
}

/* An upload on stream a, then an upload on stream b into the same slot. */
static void cross_stream_uploads_wait_for_the_other_stream(void) {
    size_t bytes = 512 * K;
    if (emu) emu->set_timing(HELD_LATENCY_US, 2);
    pinstage_ring *ring = make_ring(1, 0);
    pinstage_devbuf *x = device_u8(bytes), *y = device_u8(bytes);
    unsigned char *first = source_for(bytes, 2300), *second = source_for(bytes, 2301);
    delay_stream(nonblocking);
    CHECK_OK(upload_source(ring, x, first, nonblocking));
    CHECK_OK(upload_source(ring, y, second, nonblocking2));
    pinstage_ring_stats st;
    pinstage_ring_get_stats(ring, &st);
    CHECK_EQ(st.slot_waits, 1);
    check_device(x, 2300); /* landed: the second upload waited for it */
    CHECK_OK(pinstage_ring_free(ring));
    check_device(y, 2301);
    pinstage_devbuf_free(x);
    pinstage_devbuf_free(y);
    if (emu) emu->set_timing(20, 4);
}

/* ---- Ordering against queued work ------------------------------------------------- */

static void copies_are_ordered_after_queued_work_on_every_stream_kind(void) {
    CUstream streams[] = {nonblocking, blocking, NULL};
    size_t bytes = 300 * K;
    pinstage_ring *ring = make_ring(3, 0);
    pinstage_devbuf *d = device_u8(bytes);
    for (size_t i = 0; i < 3; i++) {
        queue_busy_work(streams[i], d, 0x5a);
        pinstage_ticket t;
        const void *view;
        CHECK_OK(pinstage_ring_download_async(ring, d, bytes, streams[i], &t));
        CHECK_OK(pinstage_ring_wait(ring, t, &view));
        CHECK(view && first_not(view, bytes, 0x5a) == -1);
        queue_busy_work(streams[i], d, 0x6b);
        CHECK_OK(upload_pattern(ring, d, 2400 + (unsigned)i, streams[i]));
        CHECK_OK(pinstage_ring_synchronize(ring));
        check_device(d, 2400 + (unsigned)i); /* not overwritten by the memset queued before */
    }
    CHECK_OK(pinstage_ring_free(ring));
    pinstage_devbuf_free(d);
}

/* ---- Full rings --------------------------------------------------------------------- */

static void a_nonblocking_ring_refuses_instead_of_waiting(void) {
    size_t bytes = 128 * K;
    if (emu) emu->set_timing(HELD_LATENCY_US, 2);
    pinstage_ring *ring = make_ring(1, PINSTAGE_RING_NONBLOCKING);
    pinstage_devbuf *x = device_u8(bytes), *y = device_u8(bytes);
    pattern_fill f = {2500, 0};
    unsigned char *second = source_for(bytes, 2501);
    delay_stream(nonblocking);
    CHECK_OK(pinstage_ring_upload_with_async(ring, x, bytes, nonblocking, fill_with_pattern, &f));
    pattern_fill g = {2501, 0};
    unsigned long calls = driver_calls();
    CHECK_STATUS(pinstage_ring_upload_with_async(ring, y, bytes, nonblocking, fill_with_pattern, &g), PINSTAGE_ERROR_NOT_READY);
    CHECK_MESSAGE("busy");
    CHECK_EQ(g.calls, 0);
    if (emu) CHECK_EQ(driver_calls() - calls, 1); /* one cuEventQuery */
    CHECK_STATUS(pinstage_ring_upload_async(ring, y, second, bytes, nonblocking), PINSTAGE_ERROR_NOT_READY);
    free(second);
    pinstage_ring_stats st;
    pinstage_ring_get_stats(ring, &st);
    CHECK_EQ(st.would_block, 2);
    CHECK_EQ(st.uploads, 1);
    CHECK_EQ(st.slot_waits, 0);
    CHECK_OK(pinstage_ring_synchronize(ring));
    CHECK_OK(pinstage_ring_upload_with_async(ring, y, bytes, nonblocking, fill_with_pattern, &g));
    CHECK_OK(pinstage_ring_synchronize(ring));
    check_device(x, 2500);
    check_device(y, 2501);
    CHECK_OK(pinstage_ring_free(ring));
    pinstage_devbuf_free(x);
    pinstage_devbuf_free(y);
    if (emu) emu->set_timing(20, 4);
}

static void slots_held_by_uncollected_tickets_are_never_handed_out(void) {
    size_t bytes = 64 * K;
    pinstage_ring *ring = make_ring(2, 0);
    pinstage_devbuf *a = device_with(bytes, 2600), *b = device_with(bytes, 2601), *c = device_u8(bytes);
    pinstage_ticket ta, tb, tc = 7;
    CHECK_OK(pinstage_ring_download_async(ring, a, bytes, nonblocking, &ta));
    CHECK_OK(pinstage_ring_download_async(ring, b, bytes, nonblocking, &tb));
    unsigned long calls = driver_calls();
    CHECK_STATUS(pinstage_ring_download_async(ring, c, bytes, nonblocking, &tc), PINSTAGE_ERROR_NOT_PERMITTED);
    CHECK_MESSAGE("neither completed nor released");
    CHECK_EQ(tc, 0);
    CHECK_STATUS(upload_pattern(ring, c, 2602, nonblocking), PINSTAGE_ERROR_NOT_PERMITTED);
    CHECK_EQ(driver_calls(), calls);
    const void *view;
    CHECK_OK(pinstage_ring_wait(ring, ta, &view));
    check_view(view, bytes, 2600);
    /* A collected download's slot may be handed out: the upload takes it. */
    CHECK_OK(upload_pattern(ring, c, 2602, nonblocking));
    CHECK_STATUS(pinstage_ring_wait(ring, ta, &view), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK(view == NULL);
    CHECK_OK(pinstage_ring_wait(ring, tb, &view));
    check_view(view, bytes, 2601);
    CHECK_OK(pinstage_ring_free(ring));
    check_device(c, 2602);
    pinstage_devbuf_free(a);
    pinstage_devbuf_free(b);
    pinstage_devbuf_free(c);
}

/* ---- Tickets and views -------------------------------------------------------------- */

static void views_live_until_their_slot_is_handed_out_again(void) {
    size_t bytes = 100 * K;
    pinstage_ring *ring = make_ring(3, 0);
    pinstage_devbuf *d[5];
    pinstage_ticket t[5];
    const void *view[5];
    for (unsigned i = 0; i < 5; i++) d[i] = device_with(bytes, 2700 + i);
    CHECK_OK(pinstage_ring_download_async(ring, d[0], bytes, nonblocking, &t[0]));
    CHECK_OK(pinstage_ring_wait(ring, t[0], &view[0]));
    /* Free slots come first: the two next downloads leave view 0 alone. */
    CHECK_OK(pinstage_ring_download_async(ring, d[1], bytes, nonblocking, &t[1]));
    CHECK_OK(pinstage_ring_download_async(ring, d[2], bytes, nonblocking, &t[2]));
    CHECK_OK(pinstage_ring_wait(ring, t[2], &view[2]));
    CHECK_OK(pinstage_ring_wait(ring, t[1], &view[1]));
    for (unsigned i = 0; i < 3; i++) check_view(view[i], bytes, 2700 + i);
    /* Completing again returns the same view. */
    const void *again;
    CHECK_OK(pinstage_ring_wait(ring, t[1], &again));
    CHECK(again == view[1]);
    CHECK_OK(pinstage_ring_poll(ring, t[1], &again));
    CHECK(again == view[1]);
    /* All three collected: the oldest is handed out, its view ends. */
    CHECK_OK(pinstage_ring_download_async(ring, d[3], bytes, nonblocking, &t[3]));
    CHECK_STATUS(pinstage_ring_wait(ring, t[0], &again), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_MESSAGE("not outstanding");
    CHECK_OK(pinstage_ring_wait(ring, t[3], &view[3]));
    CHECK(view[3] == view[0]);
    check_view(view[1], bytes, 2701);
    check_view(view[2], bytes, 2702);
    /* Released early: that slot goes before the older collected one. */
    CHECK_OK(pinstage_ring_release(ring, t[2]));
    CHECK_STATUS(pinstage_ring_release(ring, t[2]), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_OK(pinstage_ring_download_async(ring, d[4], bytes, nonblocking, &t[4]));
    CHECK_OK(pinstage_ring_wait(ring, t[4], &view[4]));
    CHECK(view[4] == view[2]);
    check_view(view[1], bytes, 2701);
    check_view(view[4], bytes, 2704);
    CHECK_STATUS(pinstage_ring_wait(ring, 0, &again), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_STATUS(pinstage_ring_wait(ring, t[4] + 1000, &again), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_OK(pinstage_ring_free(ring));
    for (unsigned i = 0; i < 5; i++) pinstage_devbuf_free(d[i]);
}

static void poll_says_not_ready_until_the_copy_lands(void) {
    size_t bytes = 256 * K;
    if (emu) emu->set_timing(6000, 2);
    pinstage_ring *ring = make_ring(2, 0);
    pinstage_devbuf *d = device_with(bytes, 2800);
    pinstage_ticket t;
    const void *view = &view;
    delay_stream(nonblocking);
    CHECK_OK(pinstage_ring_download_async(ring, d, bytes, nonblocking, &t));
    CHECK_STATUS(pinstage_ring_poll(ring, t, &view), PINSTAGE_ERROR_NOT_READY);
    CHECK(view == NULL);
    int polls = 0;
    pinstage_status s;
    while ((s = pinstage_ring_poll(ring, t, &view)) == PINSTAGE_ERROR_NOT_READY) polls++;
    CHECK_OK(s);
    check_view(view, bytes, 2800);
    CHECK(polls > 0);
    CHECK_OK(pinstage_ring_free(ring));
    pinstage_devbuf_free(d);
    if (emu) emu->set_timing(20, 4);
}

/* ---- Sizes, reserve, stats ------------------------------------------------------------ */

static void reserve_keeps_allocations_out_of_the_loop(void) {
    size_t frame = 640 * 640 * 3 * sizeof(float);
    pinstage_ring *ring = make_ring(3, 0);
    pinstage_emu_live live = live_now();
    CHECK_OK(pinstage_ring_reserve(ring, frame));
    pinstage_ring_stats st;
    pinstage_ring_get_stats(ring, &st);
    size_t rounded = (frame + 64 * K - 1) / (64 * K) * (64 * K);
    CHECK_EQ(st.pinned_allocations, 3);
    CHECK_EQ(st.pinned_bytes, 3 * rounded);
    if (emu) CHECK_EQ(live_now().pinned_bytes - live.pinned_bytes, 3 * rounded);
    CHECK_OK(pinstage_ring_reserve(ring, frame / 2)); /* grow-only */
    pinstage_devbuf *in, *out;
    REQUIRE_OK(pinstage_devbuf_alloc_f32(&in, frame / 4));
    REQUIRE_OK(pinstage_devbuf_alloc_f32(&out, frame / 4));
    float *host = malloc(frame);
    for (size_t i = 0; i < frame / 4; i++) host[i] = (float)i;
    for (int rep = 0; rep < 4; rep++) {
        pinstage_ticket t;
        const float *view = NULL;
        CHECK_OK(pinstage_ring_upload_async_f32(ring, in, host, frame / 4, nonblocking));
        CHECK_OK(pinstage_ring_download_async_f32(ring, in, frame / 4, nonblocking, &t));
        CHECK_OK(pinstage_ring_wait(ring, t, (const void **)&view));
        CHECK(view && memcmp(view, host, frame) == 0);
        CHECK_OK(pinstage_ring_release(ring, t));
    }
    pinstage_ring_get_stats(ring, &st);
    CHECK_EQ(st.pinned_allocations, 3);
    CHECK_EQ(st.peak_pinned_bytes, 3 * rounded);
    CHECK_EQ(st.uploads, 4);
    CHECK_EQ(st.downloads, 4);
    /* Typed calls check the element. */
    pinstage_ticket t = 5;
    CHECK_STATUS(pinstage_ring_download_async_u8(ring, in, frame / 4, nonblocking, &t), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_EQ(t, 0);
    CHECK_OK(pinstage_ring_free(ring));
    pinstage_devbuf_free(in);
    pinstage_devbuf_free(out);
    CHECK_NO_LEAK(live);
    free(host);
}

/* ---- Teardown ---------------------------------------------------------------------------- */

static void free_waits_for_copies_in_flight(void) {
    size_t bytes = 512 * K;
    if (emu) emu->set_timing(6000, 2);
    pinstage_emu_live live = live_now();
    pinstage_devbuf *up[3], *down = device_with(bytes, 2900);
    pinstage_ring *ring = make_ring(4, 0);
    unsigned char *src[3];
    for (unsigned i = 0; i < 3; i++) up[i] = device_u8(bytes), src[i] = source_for(bytes, 2901 + i);
    for (unsigned i = 0; i < 3; i++) {
        delay_stream(i % 2 ? nonblocking : blocking);
        CHECK_OK(upload_source(ring, up[i], src[i], i % 2 ? nonblocking : blocking));
    }
    pinstage_ticket t;
    CHECK_OK(pinstage_ring_download_async(ring, down, bytes, nonblocking, &t)); /* never collected */
    CHECK_OK(pinstage_ring_free(ring));
    for (unsigned i = 0; i < 3; i++) check_device(up[i], 2901 + i);
    for (unsigned i = 0; i < 3; i++) pinstage_devbuf_free(up[i]);
    pinstage_devbuf_free(down);
    CHECK_NO_LEAK(live);
    CHECK_OK(pinstage_ring_free(NULL));
    /* A ring never used makes no driver call to go. */
    unsigned long calls = driver_calls();
    CHECK_OK(pinstage_ring_free(make_ring(8, 0)));
    CHECK_EQ(driver_calls(), calls);
    if (emu) emu->set_timing(20, 4);
}

/* ---- Bad input ----------------------------------------------------------------------- */

static void bad_input_changes_nothing_and_calls_no_driver(void) {
    size_t bytes = 4 * K;
    pinstage_ring *ring = make_ring(2, 0), *none = (pinstage_ring *)&ring;
    pinstage_devbuf *d = device_u8(bytes);
    unsigned char host[4 * K] = {0};
    pattern_fill f = {1, 0};
    pinstage_ticket t = 9;
    const void *view = host;
    unsigned long calls = driver_calls();
    pinstage_emu_live live = live_now();
    CHECK_STATUS(pinstage_ring_create(NULL, 2, 0), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_STATUS(pinstage_ring_create(&none, 0, 0), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK(none == NULL);
    CHECK_STATUS(pinstage_ring_create(&none, PINSTAGE_RING_MAX_SLOTS + 1, 0), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_MESSAGE("slots=65");
    CHECK_STATUS(pinstage_ring_create(&none, 2, 0x10), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_MESSAGE("unknown flags");
    CHECK_STATUS(pinstage_ring_upload_with_async(NULL, d, bytes, nonblocking, fill_with_pattern, &f), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_STATUS(pinstage_ring_upload_with_async(ring, NULL, bytes, nonblocking, fill_with_pattern, &f), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_STATUS(pinstage_ring_upload_with_async(ring, d, bytes, nonblocking, NULL, &f), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_MESSAGE("pinstage_ring_upload_with_async: fill is NULL");
    CHECK_STATUS(pinstage_ring_upload_with_async(ring, d, 0, nonblocking, fill_with_pattern, &f), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_STATUS(pinstage_ring_upload_with_async(ring, d, bytes - 1, nonblocking, fill_with_pattern, &f), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_MESSAGE("n=4095 but dst holds 4096 elements");
    CHECK_EQ(f.calls, 0);
    CHECK_STATUS(pinstage_ring_upload_async(ring, d, NULL, bytes, nonblocking), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_STATUS(pinstage_ring_upload_async(ring, d, host, bytes + 1, nonblocking), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_STATUS(pinstage_ring_download_async(ring, d, bytes, nonblocking, NULL), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_STATUS(pinstage_ring_download_async(ring, NULL, bytes, nonblocking, &t), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_EQ(t, 0);
    CHECK_STATUS(pinstage_ring_download_async(ring, d, 1, nonblocking, &t), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_STATUS(pinstage_ring_wait(NULL, 1, &view), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK(view == NULL);
    CHECK_STATUS(pinstage_ring_wait(ring, 1, NULL), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_STATUS(pinstage_ring_poll(ring, 1, &view), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_STATUS(pinstage_ring_release(ring, 1), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_STATUS(pinstage_ring_release(NULL, 1), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_STATUS(pinstage_ring_reserve(ring, 0), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_STATUS(pinstage_ring_reserve(ring, SIZE_MAX), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_MESSAGE("overflows");
    CHECK_STATUS(pinstage_ring_reserve(NULL, 1), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_STATUS(pinstage_ring_synchronize(NULL), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_OK(pinstage_ring_synchronize(ring)); /* nothing enqueued yet: nothing to do */
    CHECK_EQ(driver_calls(), calls);
    pinstage_ring_stats st;
    pinstage_ring_get_stats(ring, &st);
    CHECK_EQ(st.uploads + st.downloads + st.pinned_allocations + st.pinned_bytes, 0);
    pinstage_ring_get_stats(NULL, &st);
    CHECK_EQ(st.uploads, 0);
    pinstage_ring_get_stats(ring, NULL);
    CHECK_NO_LEAK(live);
    CHECK_OK(pinstage_ring_free(ring));
    pinstage_devbuf_free(d);
}

/* ---- Driver failures (emulator) ------------------------------------------------------- */

typedef enum { OP_UPLOAD_WITH, OP_UPLOAD, OP_DOWNLOAD, OP_WAIT, OP_POLL, OP_SYNCHRONIZE } ring_op;
static const char *const op_names[] = {"upload_with_async", "upload_async", "download_async", "wait", "poll", "synchronize"};

typedef struct {
    ring_op op;
    const char *entry;
    unsigned long nth;
    int cold;     /* on a ring never used: events and pinned memory made by this call */
    int busy;     /* the one slot's previous copy still in flight (slow DMA) */
    int retires;  /* the slot's block must be dropped (the wait that would tell failed) */
} fault_case;

/* Each call fails at each driver call it makes; afterwards the status and
 * message name the call, nothing leaked, the transfer counters did not
 * move, no copy was mixed up with another, and the next calls on the same
 * one-slot ring succeed with exactly the right bytes. */
static void a_driver_failure_in_any_call_leaves_the_ring_usable(void) {
    if (!emu) return;
    static const fault_case cases[] = {
        {OP_UPLOAD_WITH, "cuEventCreate", 1, 1, 0, 0},   {OP_UPLOAD_WITH, "cuEventCreate", 2, 1, 0, 0},
        {OP_UPLOAD_WITH, "cuMemAllocHost", 1, 1, 0, 0},  {OP_UPLOAD_WITH, "cuMemcpyHtoDAsync", 1, 0, 0, 0},
        {OP_UPLOAD_WITH, "cuEventRecord", 1, 0, 0, 0},   {OP_UPLOAD_WITH, "cuEventQuery", 1, 0, 1, 1},
        {OP_UPLOAD, "cuEventCreate", 1, 1, 0, 0},        {OP_UPLOAD, "cuMemAllocHost", 1, 1, 0, 0},
        {OP_UPLOAD, "cuMemcpyHtoDAsync", 1, 0, 1, 0},    {OP_UPLOAD, "cuEventRecord", 1, 0, 1, 0},
        {OP_UPLOAD, "cuEventQuery", 1, 0, 1, 1},         {OP_UPLOAD, "cuEventQuery", 2, 0, 1, 1},
        {OP_DOWNLOAD, "cuEventCreate", 1, 1, 0, 0},      {OP_DOWNLOAD, "cuMemAllocHost", 1, 1, 0, 0},
        {OP_DOWNLOAD, "cuMemcpyDtoHAsync", 1, 0, 0, 0},  {OP_DOWNLOAD, "cuMemcpyDtoHAsync", 1, 0, 1, 0},
        {OP_DOWNLOAD, "cuEventRecord", 1, 0, 0, 0},      {OP_DOWNLOAD, "cuEventRecord", 1, 0, 1, 0},
        {OP_DOWNLOAD, "cuStreamWaitEvent", 1, 0, 1, 0},  {OP_DOWNLOAD, "cuEventQuery", 1, 0, 1, 1},
        {OP_WAIT, "cuEventQuery", 1, 0, 1, 1},           {OP_WAIT, "cuEventQuery", 3, 0, 1, 1},
        {OP_POLL, "cuEventQuery", 1, 0, 1, 1},           {OP_SYNCHRONIZE, "cuEventQuery", 1, 0, 1, 1},
    };
    size_t bytes = 192 * K;
    unsigned char *back = malloc(bytes);
    pinstage_devbuf *prev = device_u8(bytes), *target = device_u8(bytes), *next = device_u8(bytes);
    pinstage_devbuf *source = device_with(bytes, 3000);
    /* 20 ms a queued op: a copy meant to be in flight when the failing call
     * runs still is, even on a loaded machine under a sanitizer. */
    emu->set_timing(20000, 2);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const fault_case *c = &cases[i];
        unsigned seed = 3100 + (unsigned)i * 4;
        pinstage_emu_live at_start = live_now();
        pinstage_ring *ring = make_ring(c->op == OP_UPLOAD_WITH && !strcmp(c->entry, "cuEventCreate") ? 2 : 1, 0);
        unsigned char *failing = source_for(bytes, seed + 1), *following = source_for(bytes, seed + 2);
        pinstage_ticket t = 0;
        /* The previous copy: an upload of seed to prev, landed or in flight. */
        if (!c->cold) {
            if (!c->busy) {
                CHECK_OK(upload_pattern(ring, prev, seed, nonblocking));
                CHECK_OK(pinstage_ring_synchronize(ring));
            } else if (c->op == OP_WAIT || c->op == OP_POLL || c->op == OP_SYNCHRONIZE) {
                CHECK_OK(pinstage_ring_download_async(ring, source, bytes, nonblocking, &t));
            } else {
                delay_stream(nonblocking);
                CHECK_OK(upload_pattern(ring, prev, seed, nonblocking));
            }
        }
        pinstage_ring_stats before, after;
        pinstage_ring_get_stats(ring, &before);
        pinstage_emu_live live = live_now();
        emu->fail(c->entry, c->nth, 999, c->retires); /* a failed wait stays failed: its drain fails too */
        if (c->retires) emu->fail("cuStreamSynchronize", 1, 999, 1);
        pinstage_status s = PINSTAGE_SUCCESS;
        pattern_fill f = {seed + 1, 0};
        pinstage_ticket got = 77;
        const void *view = back;
        switch (c->op) {
        case OP_UPLOAD_WITH: s = pinstage_ring_upload_with_async(ring, target, bytes, nonblocking, fill_with_pattern, &f); break;
        case OP_UPLOAD: s = pinstage_ring_upload_async(ring, target, failing, bytes, nonblocking); break;
        case OP_DOWNLOAD: s = pinstage_ring_download_async(ring, source, bytes, nonblocking, &got); break;
        case OP_WAIT: s = pinstage_ring_wait(ring, t, &view); break;
        case OP_POLL:
            s = pinstage_ring_poll(ring, t, &view);
            break;
        case OP_SYNCHRONIZE: s = pinstage_ring_synchronize(ring); break;
        }
        emu->clear_faults();
        if (s != 999) fprintf(stderr, "  case %zu: %s, %s call %lu\n", i, op_names[c->op], c->entry, c->nth);
        CHECK_STATUS(s, 999);
        CHECK_MESSAGE(c->entry);
        if (c->op == OP_DOWNLOAD) CHECK_EQ(got, 0);
        if (c->op == OP_WAIT || c->op == OP_POLL) CHECK(view == NULL);
        pinstage_ring_get_stats(ring, &after);
        CHECK_EQ(after.uploads, before.uploads);
        CHECK_EQ(after.downloads, before.downloads);
        CHECK_EQ(after.bytes_uploaded, before.bytes_uploaded);
        CHECK_EQ(after.retired_blocks, (uint64_t)c->retires);
        if (!c->retires && !c->cold) CHECK_NO_LEAK(live);
        if (c->retires) CHECK(live_now().pinned_bytes < live.pinned_bytes); /* released, not leaked */
        if (c->op == OP_UPLOAD_WITH && c->cold && !strcmp(c->entry, "cuEventCreate")) CHECK_EQ(f.calls, 0);
        if (c->op == OP_SYNCHRONIZE) {
            /* The failed download's ticket reports it, once. */
            CHECK_STATUS(pinstage_ring_wait(ring, t, &view), 999);
            CHECK_MESSAGE("failed");
            CHECK_STATUS(pinstage_ring_wait(ring, t, &view), PINSTAGE_ERROR_INVALID_VALUE);
        } else if (c->op == OP_WAIT || c->op == OP_POLL) {
            CHECK_STATUS(pinstage_ring_wait(ring, t, &view), PINSTAGE_ERROR_INVALID_VALUE);
        }
        /* The next calls: the one slot is free again, nothing is mixed up. */
        CHECK_OK(upload_source(ring, next, following, nonblocking));
        free(failing);
        pinstage_ticket again;
        const void *v2;
        CHECK_OK(pinstage_ring_download_async(ring, source, bytes, nonblocking, &again));
        CHECK_OK(pinstage_ring_wait(ring, again, &v2));
        check_view(v2, bytes, 3000);
        check_device(next, seed + 2);
        if (!c->cold && c->op != OP_DOWNLOAD && c->busy && c->op != OP_WAIT && c->op != OP_POLL && c->op != OP_SYNCHRONIZE)
            check_device(prev, seed); /* the copy in flight kept its own bytes */
        CHECK_OK(pinstage_ring_free(ring));
        CHECK_NO_LEAK(at_start);
    }
    emu->set_timing(20, 4);
    pinstage_devbuf_free(prev);
    pinstage_devbuf_free(target);
    pinstage_devbuf_free(next);
    pinstage_devbuf_free(source);
    free(back);
}

/* A failed stream: free reports its error and leaks nothing. */
static void free_reports_a_failed_stream_and_leaks_nothing(void) {
    if (!emu) return;
    size_t bytes = 256 * K;
    emu->set_timing(5000, 2);
    pinstage_emu_live live = live_now();
    pinstage_ring *ring = make_ring(2, 0);
    pinstage_devbuf *d = device_u8(bytes);
    delay_stream(nonblocking);
    CHECK_OK(upload_pattern(ring, d, 3500, nonblocking));
    emu->fail("cuEventQuery", 1, 999, 1);
    CHECK_STATUS(pinstage_ring_free(ring), 999);
    CHECK_MESSAGE("pinstage_ring_free");
    CHECK_MESSAGE("cuEventQuery");
    emu->clear_faults();
    pinstage_devbuf_free(d);
    CHECK_NO_LEAK(live);
    emu->set_timing(20, 4);
}

/* ---- Several threads ---------------------------------------------------------------- */

typedef struct {
    unsigned id;
    int failures;
} worker_args;

/* One ring and stream per thread, the pool shared by their large copies. */
static void *ring_worker(void *arg) {
    worker_args *w = arg;
    size_t bytes = (w->id % 2 ? 300 : 600) * K;
    CUstream stream;
    pinstage_ring *ring;
    pinstage_devbuf *d[3];
    unsigned char *src = malloc(bytes);
    /* A new thread has no current context: it takes the primary one. */
    if (pinstage_context_init(0) || pinstage_stream_create(&stream, PINSTAGE_STREAM_NON_BLOCKING) ||
        pinstage_ring_create(&ring, 2, 0)) {
        fprintf(stderr, "  thread %u: %s\n", w->id, pinstage_last_error_message());
        w->failures++;
        free(src);
        return NULL;
    }
    for (int i = 0; i < 3; i++)
        if (pinstage_devbuf_alloc_u8(&d[i], bytes)) w->failures++;
    for (unsigned rep = 0; rep < 12 && !w->failures; rep++) {
        unsigned seed = 4000 + w->id * 100 + rep;
        pinstage_devbuf *x = d[rep % 3];
        pinstage_ticket t;
        const void *view;
        fill_pattern(src, bytes, seed);
        pinstage_status s = pinstage_ring_upload_async(ring, x, src, bytes, stream);
        if (!s) s = pinstage_ring_download_async(ring, x, bytes, stream, &t);
        if (!s) s = pinstage_ring_wait(ring, t, &view);
        if (!s && pattern_mismatch(view, bytes, seed) != -1) s = -1;
        if (!s) s = pinstage_ring_release(ring, t);
        if (s) {
            fprintf(stderr, "  thread %u, round %u: %d %s\n", w->id, rep, s, s > 0 ? pinstage_last_error_message() : "wrong bytes");
            w->failures++;
        }
    }
    if (pinstage_ring_free(ring)) w->failures++;
    for (int i = 0; i < 3; i++) pinstage_devbuf_free(d[i]);
    pinstage_stream_destroy(stream);
    if (pinstage_context_release(0)) w->failures++;
    free(src);
    return NULL;
}

static void rings_on_several_threads_at_once(void) {
    enum { THREADS = 4 };
    pthread_t threads[THREADS];
    worker_args args[THREADS];
    for (unsigned i = 0; i < THREADS; i++) {
        args[i] = (worker_args){i, 0};
        REQUIRE_OK(pthread_create(&threads[i], NULL, ring_worker, &args[i]) ? PINSTAGE_ERROR_OUT_OF_MEMORY : 0);
    }
    for (unsigned i = 0; i < THREADS; i++) {
        pthread_join(threads[i], NULL);
        CHECK_EQ(args[i].failures, 0);
    }
}

int main(void) {
    test_setup();
    REQUIRE_OK(pinstage_stream_create(&nonblocking, PINSTAGE_STREAM_NON_BLOCKING));
    REQUIRE_OK(pinstage_stream_create(&nonblocking2, PINSTAGE_STREAM_NON_BLOCKING));
    REQUIRE_OK(pinstage_stream_create(&blocking, 0));
    delay_stream(nonblocking); /* its scratch buffer, made before the leak baseline */
    REQUIRE_OK((pinstage_status)drv.ctx_sync());
    pinstage_emu_live before = live_now();
    RUN(uploads_never_overwrite_a_slot_in_flight);
    RUN(downloads_never_overwrite_a_slot_in_flight);
    RUN(a_slot_changes_direction_only_after_its_copy);
    RUN(cross_stream_uploads_wait_for_the_other_stream);
    RUN(copies_are_ordered_after_queued_work_on_every_stream_kind);
    RUN(a_nonblocking_ring_refuses_instead_of_waiting);
    RUN(slots_held_by_uncollected_tickets_are_never_handed_out);
    RUN(views_live_until_their_slot_is_handed_out_again);
    RUN(poll_says_not_ready_until_the_copy_lands);
    RUN(reserve_keeps_allocations_out_of_the_loop);
    RUN(free_waits_for_copies_in_flight);
    RUN(bad_input_changes_nothing_and_calls_no_driver);
    RUN(a_driver_failure_in_any_call_leaves_the_ring_usable);
    RUN(free_reports_a_failed_stream_and_leaks_nothing);
    RUN(rings_on_several_threads_at_once);
    check_current_test = "no_leaks";
    CHECK_NO_LEAK(before);
    pinstage_stream_destroy(nonblocking);
    pinstage_stream_destroy(nonblocking2);
    pinstage_stream_destroy(blocking);
    return test_finish();
}
