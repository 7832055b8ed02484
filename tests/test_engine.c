/* SPDX-License-Identifier: MIT */
/* The copy engine and the routes around it: exact bytes at every chunk
 * boundary with slots reused while DMAs are slow, ordering against queued
 * work on every stream kind, a driver failure at each stage of a pipeline,
 * page-locked and partly page-locked host memory, the pinned footprint. */
#include <unistd.h>

#include "check.h"

#define K 1024u
#define M (1024u * 1024u)

static CUstream nonblocking, blocking;
static CUresult (*host_register)(void *, size_t, unsigned);
static CUresult (*host_unregister)(void *);


static pinstage_buffer *engine_buffer(size_t chunk, unsigned threads) {
    pinstage_buffer *buf;
    pinstage_profile *p;
    REQUIRE_OK(pinstage_buffer_create(&buf));
    REQUIRE_OK(pinstage_profile_fixed(&p, PINSTAGE_ROUTE_ENGINE, chunk, threads));
    REQUIRE_OK(pinstage_buffer_set_profile(buf, p));
    pinstage_profile_free(p);
    return buf;
}

/* Round trip of `bytes` through `buf`, checked without synchronizing. */
static void round_trip(pinstage_buffer *buf, size_t bytes, unsigned seed, CUstream stream) {
    pinstage_devbuf *d;
    unsigned char *src = malloc(bytes), *back = malloc(bytes);
    REQUIRE_OK(pinstage_devbuf_alloc_u8(&d, bytes));
    fill_pattern(src, bytes, seed);
    CHECK_OK(pinstage_buffer_upload(buf, d, src, bytes, stream));
    memset(back, 0, bytes);
    read_landed(d, back);
    long at = pattern_mismatch(back, bytes, seed);
    if (at >= 0) fprintf(stderr, "  upload of %zu bytes: first wrong byte at %ld\n", bytes, at);
    CHECK_EQ(at, -1);
    fill_pattern(src, bytes, seed + 1);
    write_device(d, src);
    memset(back, 0, bytes);
    CHECK_OK(pinstage_buffer_download(buf, back, bytes, d, stream));
    at = pattern_mismatch(back, bytes, seed + 1);
    if (at >= 0) fprintf(stderr, "  download of %zu bytes: first wrong byte at %ld\n", bytes, at);
    CHECK_EQ(at, -1);
    pinstage_devbuf_free(d);
    free(src);
    free(back);
}

/* 64 KiB chunks: one element, below one chunk, chunk +- 1, a full ring of
 * slots +- 1, many reuses of each slot, a size no chunk divides; with one
 * thread, two, and all. With slow DMAs (on the emulator), a slot reused
 * before its DMA finished shows up as wrong bytes. */
static void every_chunk_boundary_moves_exact_bytes(void) {
    size_t sizes[] = {1, 1000, 64 * K - 1, 64 * K, 64 * K + 1, 4 * 64 * K - 1, 4 * 64 * K, 4 * 64 * K + 1,
                      10 * 64 * K + 123, 37 * 64 * K + 5};
    unsigned threads[] = {1, 2, 0};
    if (emu) emu->set_timing(300, 2); /* every DMA slow next to the host copies */
    for (size_t t = 0; t < 3; t++) {
        pinstage_buffer *buf = engine_buffer(64 * K, threads[t]);
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
            round_trip(buf, sizes[i], 1000 + (unsigned)(t * 100 + i * 2), i % 2 ? nonblocking : blocking);
        pinstage_stats st;
        pinstage_buffer_stats(buf, &st);
        CHECK_EQ(st.engine_transfers, 2 * sizeof sizes / sizeof sizes[0]);
        CHECK_EQ(st.staged_transfers, st.engine_transfers);
        CHECK_EQ(st.pageable_transfers, 0);
        /* Slots of one chunk at most: four for uploads, eight for downloads. */
        CHECK(pinstage_buffer_capacity(buf) <= 8 * 64 * K);
        pinstage_buffer_free(buf);
    }
    if (emu) emu->set_timing(20, 4);
}

/* Long transfers ramp their chunks up and down; the ring stays 4 chunks
 * for uploads and 8 for downloads. */
static void ramped_transfers_move_exact_bytes(void) {
    pinstage_buffer *buf = engine_buffer(1 * M, 0);
    round_trip(buf, 6 * M + 7, 1200, nonblocking);
    round_trip(buf, 2 * M + 1, 1202, blocking); /* fits the stage: downloads ramp, each chunk its own place */
    round_trip(buf, 1 * M + 1, 1203, nonblocking); /* download: 256 KiB, 512 KiB + 1, 256 KiB */
    round_trip(buf, 9 * M - 3, 1204, NULL);
    round_trip(buf, 4 * M, 1206, nonblocking);
    CHECK_EQ(pinstage_buffer_capacity(buf), 8 * M); /* the 9 MiB download's ring */
    pinstage_buffer_free(buf);
}

/* A transfer shorter than the ring of four chunks fits the stage whole,
 * each chunk at its own offset, and the pinned memory is the transfer's
 * size. An upload (4.7 MiB in 2 MiB chunks: three) waits on no slot and
 * records one event; a download's chunks ramp (256 KiB, 512 KiB, 1 MiB,
 * the rest, 1 MiB, 512 KiB, 256 KiB). Slow DMAs make a chunk placed over
 * another, or a download's chunk opened before its own DMA landed, show up
 * as wrong bytes. */
static void a_transfer_that_fits_the_stage_ramps_in_place(void) {
    size_t bytes = 4915200;
    if (emu) emu->set_timing(300, 2);
    for (unsigned t = 0; t < 3; t++) {
        pinstage_buffer *buf = engine_buffer(2 * M, t == 0 ? 1 : t == 1 ? 3 : 0);
        CUstream stream = t % 2 ? blocking : nonblocking;
        pinstage_devbuf *d;
        unsigned char *src = malloc(bytes), *back = malloc(bytes);
        REQUIRE_OK(pinstage_devbuf_alloc_u8(&d, bytes));
        fill_pattern(src, bytes, 1400 + t);
        if (emu) emu->reset_calls();
        CHECK_OK(pinstage_buffer_upload(buf, d, src, bytes, stream));
        if (emu) {
            CHECK_EQ(emu->calls("cuMemcpyHtoDAsync"), 3);
            CHECK_EQ(emu->calls("cuEventRecord"), 1);
            /* No slot to wait for: no event is asked about before the last DMA. */
            const char *calls[256];
            size_t made = emu->trace(calls, 256), last_dma = 0, first_query = made;
            for (size_t i = 0; i < made && i < 256; i++) {
                if (!strcmp(calls[i], "cuMemcpyHtoDAsync")) last_dma = i;
                if (!strcmp(calls[i], "cuEventQuery") && first_query == made) first_query = i;
            }
            CHECK(first_query > last_dma);
        }
        memset(back, 0, bytes);
        read_landed(d, back);
        CHECK_EQ(pattern_mismatch(back, bytes, 1400 + t), -1);
        fill_pattern(src, bytes, 1410 + t);
        write_device(d, src);
        memset(back, 0, bytes);
        if (emu) emu->reset_calls();
        CHECK_OK(pinstage_buffer_download(buf, back, bytes, d, stream));
        if (emu) {
            CHECK_EQ(emu->calls("cuMemcpyDtoHAsync"), 7);
            CHECK_EQ(emu->calls("cuEventRecord"), 7); /* one per chunk: the next waits on it */
        }
        CHECK_EQ(pattern_mismatch(back, bytes, 1410 + t), -1);
        CHECK(pinstage_buffer_capacity(buf) < bytes + 64 * K);
        pinstage_devbuf_free(d);
        free(src);
        free(back);
        pinstage_buffer_free(buf);
    }
    if (emu) emu->set_timing(20, 4);
}

typedef struct {
    const char *entry;
    unsigned long nth;
    int d2h;
} fault_case;

/* Fails call `c` of one transfer of `bytes` through a warmed engine buffer
 * of `chunk`, source or destination filled with `seed`'s pattern: the error
 * and its message come back, nothing is counted, nothing leaks. Returns the
 * buffer, for the call after the failure. */
static pinstage_buffer *fail_one_transfer(size_t chunk, size_t bytes, const fault_case *c, unsigned seed,
                                          pinstage_devbuf *dev, unsigned char *src, unsigned char *back) {
    pinstage_buffer *buf = engine_buffer(chunk, 0);
    round_trip(buf, bytes, seed - 10, nonblocking); /* warm: pinned and events exist */
    pinstage_stats before, after;
    pinstage_buffer_stats(buf, &before);
    pinstage_emu_live live = live_now();
    fill_pattern(src, bytes, seed);
    if (c->d2h) write_device(dev, src);
    emu->fail(c->entry, c->nth, 999, 0);
    pinstage_status s = c->d2h ? pinstage_buffer_download(buf, back, bytes, dev, nonblocking)
                               : pinstage_buffer_upload(buf, dev, src, bytes, nonblocking);
    emu->clear_faults();
    if (s != 999) fprintf(stderr, "  %s of %zu bytes: %s call %lu\n", c->d2h ? "download" : "upload", bytes, c->entry, c->nth);
    CHECK_STATUS(s, 999);
    CHECK_MESSAGE(c->entry);
    pinstage_buffer_stats(buf, &after);
    CHECK_EQ(after.staged_transfers, before.staged_transfers);
    CHECK_EQ(after.engine_transfers, before.engine_transfers);
    CHECK_EQ(after.bytes_uploaded, before.bytes_uploaded);
    CHECK_EQ(after.bytes_downloaded, before.bytes_downloaded);
    CHECK_EQ(after.retired_blocks, 0); /* the drain could wait: the block stays */
    CHECK_NO_LEAK(live);
    return buf;
}

/* A download that fits the stage reuses its four events across its seven
 * ramped chunks: a failure at any of its driver calls leaves the buffer as
 * it was, and the next download into the same places is exact. */
static void a_failure_in_a_ramped_download_leaves_the_buffer_usable(void) {
    if (!emu) return;
    const fault_case cases[] = {
        {"cuMemcpyDtoHAsync", 1, 1}, {"cuMemcpyDtoHAsync", 4, 1}, {"cuMemcpyDtoHAsync", 5, 1},
        {"cuMemcpyDtoHAsync", 7, 1}, {"cuEventRecord", 2, 1},     {"cuEventRecord", 5, 1},
        {"cuEventRecord", 7, 1},     {"cuEventQuery", 1, 1},      {"cuEventQuery", 3, 1},
    };
    size_t bytes = 4915200;
    unsigned char *src = malloc(bytes), *back = malloc(bytes);
    pinstage_devbuf *d;
    REQUIRE_OK(pinstage_devbuf_alloc_u8(&d, bytes));
    emu->set_timing(200, 2);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        unsigned seed = 1810 + (unsigned)i * 3;
        pinstage_buffer *buf = fail_one_transfer(2 * M, bytes, &cases[i], seed, d, src, back);
        fill_pattern(src, bytes, seed + 1);
        write_device(d, src);
        memset(back, 0, bytes);
        CHECK_OK(pinstage_buffer_download(buf, back, bytes, d, nonblocking));
        CHECK_EQ(pattern_mismatch(back, bytes, seed + 1), -1);
        pinstage_buffer_free(buf);
    }
    emu->set_timing(20, 4);
    pinstage_devbuf_free(d);
    free(src);
    free(back);
}

/* Pinned memory is bounded by the slots, not the transfer: uploads pin at
 * most 4 chunks of 8 MiB, downloads 8 of 2 MiB. */
static void a_large_transfer_pins_at_most_32_mib(void) {
    size_t bytes = emu ? 40 * M : 256 * M;
    pinstage_buffer *buf;
    REQUIRE_OK(pinstage_buffer_create(&buf));
    pinstage_buffer_set_auto_stage_max_bytes(buf, SIZE_MAX); /* staged, through the engine */
    round_trip(buf, bytes, 1300, nonblocking);
    pinstage_stats st;
    pinstage_buffer_stats(buf, &st);
    CHECK(st.peak_capacity <= 32 * M);
    CHECK_EQ(st.engine_transfers, 2);
    if (emu) CHECK(live_now().pinned_bytes <= 32 * M + 64 * K);

    /* A download alone goes round 8 slots of at most 2 MiB: 16 MiB. */
    unsigned char *host = malloc(bytes);
    pinstage_devbuf *d;
    REQUIRE_OK(pinstage_devbuf_alloc_u8(&d, bytes));
    fill_pattern(host, bytes, 1301);
    CHECK_OK(pinstage_buffer_upload(buf, d, host, bytes, nonblocking));
    pinstage_buffer *down;
    REQUIRE_OK(pinstage_buffer_create(&down));
    pinstage_buffer_set_auto_stage_max_bytes(down, SIZE_MAX);
    memset(host, 0, bytes);
    CHECK_OK(pinstage_buffer_download(down, host, bytes, d, nonblocking));
    CHECK_EQ(pattern_mismatch(host, bytes, 1301), -1);
    pinstage_buffer_stats(down, &st);
    CHECK_EQ(st.engine_transfers, 1);
    CHECK(st.peak_capacity <= 16 * M);
    pinstage_buffer_free(down);
    pinstage_devbuf_free(d);
    free(host);
    pinstage_buffer_free(buf);
}

/* Work queued on the stream comes first, for every route and stream kind. */
static void every_route_is_ordered_after_queued_work(void) {
    CUstream streams[] = {nonblocking, blocking, NULL};
    int routes[] = {PINSTAGE_ROUTE_PAGEABLE, PINSTAGE_ROUTE_STAGED, PINSTAGE_ROUTE_ENGINE};
    size_t bytes = 300 * K;
    unsigned char *host = malloc(bytes);
    pinstage_devbuf *d;
    REQUIRE_OK(pinstage_devbuf_alloc_u8(&d, bytes));
    for (size_t s = 0; s < 3; s++)
        for (size_t r = 0; r < 3; r++) {
            pinstage_buffer *buf;
            pinstage_profile *p;
            REQUIRE_OK(pinstage_buffer_create(&buf));
            REQUIRE_OK(pinstage_profile_fixed(&p, routes[r], 64 * K, 0));
            REQUIRE_OK(pinstage_buffer_set_profile(buf, p));
            pinstage_profile_free(p);
            queue_busy_work(streams[s], d, 0x5a);
            CHECK_OK(pinstage_buffer_download(buf, host, bytes, d, streams[s]));
            CHECK_EQ(first_not(host, bytes, 0x5a), -1);
            fill_pattern(host, bytes, 1400 + (unsigned)(s * 3 + r));
            queue_busy_work(streams[s], d, 0x7c);
            CHECK_OK(pinstage_buffer_upload(buf, d, host, bytes, streams[s]));
            memset(host, 0, bytes);
            read_landed(d, host);
            CHECK_EQ(pattern_mismatch(host, bytes, 1400 + (unsigned)(s * 3 + r)), -1);
            pinstage_buffer_free(buf);
        }
    pinstage_devbuf_free(d);
    free(host);
}

/* The pageable download waits for the stream's queued work by an event only
 * when there is some: an idle stream is asked (cuStreamQuery), which answers
 * at once, where an event on it completes only once the GPU has seen it. */
static void a_pageable_download_records_an_event_only_for_queued_work(void) {
    if (!emu) {
        printf("#   skipped: counts the emulator's calls\n");
        return;
    }
    size_t bytes = 300 * K;
    unsigned char *host = malloc(bytes);
    pinstage_devbuf *d;
    pinstage_buffer *buf;
    pinstage_profile *p;
    REQUIRE_OK(pinstage_devbuf_alloc_u8(&d, bytes));
    REQUIRE_OK(pinstage_buffer_create(&buf));
    REQUIRE_OK(pinstage_profile_fixed(&p, PINSTAGE_ROUTE_PAGEABLE, 0, 0));
    REQUIRE_OK(pinstage_buffer_set_profile(buf, p));
    pinstage_profile_free(p);
    CHECK_OK(pinstage_buffer_download(buf, host, bytes, d, nonblocking)); /* its events made */
    struct {
        CUstream stream;
        int busy;
        unsigned long queries, records;
    } cases[] = {{nonblocking, 0, 1, 0}, {nonblocking, 1, 1, 1}, {blocking, 0, 1, 0}, {NULL, 1, 0, 0}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        unsigned char value = (unsigned char)(0x30 + c);
        queue_busy_work(cases[c].stream, d, value);
        if (!cases[c].busy) CHECK_EQ(drv.stream_sync(cases[c].stream), CUDA_SUCCESS);
        unsigned long queries = emu->calls("cuStreamQuery"), records = emu->calls("cuEventRecord");
        CHECK_OK(pinstage_buffer_download(buf, host, bytes, d, cases[c].stream));
        CHECK_EQ(first_not(host, bytes, value), -1);
        CHECK_EQ(emu->calls("cuStreamQuery") - queries, cases[c].queries);
        CHECK_EQ(emu->calls("cuEventRecord") - records, cases[c].records);
    }
    pinstage_stats st;
    pinstage_buffer_stats(buf, &st);
    CHECK_EQ(st.pageable_transfers, 5);
    pinstage_buffer_free(buf);
    pinstage_devbuf_free(d);
    free(host);
}

/* ---- Page-locked host memory ----------------------------------------------------------- */

static void page_locked_memory_goes_straight_to_the_dma(void) {
    size_t bytes = 2 * M;
    void *pinned;
    pinstage_buffer *buf;
    pinstage_devbuf *d;
    REQUIRE_OK((pinstage_status)drv.alloc_host(&pinned, bytes));
    REQUIRE_OK(pinstage_buffer_create(&buf));
    REQUIRE_OK(pinstage_devbuf_alloc_u8(&d, bytes));
    unsigned char *back = malloc(bytes);
    fill_pattern(pinned, bytes, 1500);
    unsigned long copies = emu ? emu->calls("cuMemcpyHtoDAsync") : 0;
    CHECK_OK(pinstage_buffer_upload(buf, d, pinned, bytes, nonblocking));
    if (emu) CHECK_EQ(emu->calls("cuMemcpyHtoDAsync"), copies + 1); /* one DMA */
    read_landed(d, back);
    CHECK_EQ(pattern_mismatch(back, bytes, 1500), -1);
    fill_pattern(back, bytes, 1501);
    write_device(d, back);
    CHECK_OK(pinstage_buffer_download(buf, pinned, bytes, d, blocking));
    CHECK_EQ(pattern_mismatch(pinned, bytes, 1501), -1);
    pinstage_stats st;
    pinstage_buffer_stats(buf, &st);
    CHECK_EQ(st.pinned_host_transfers, 2);
    CHECK_EQ(st.staged_transfers, 0);
    CHECK_EQ(st.pageable_transfers, 0);
    CHECK_EQ(st.bytes_uploaded, bytes);
    CHECK_EQ(st.bytes_downloaded, bytes);
    CHECK_EQ(pinstage_buffer_capacity(buf), 0); /* nothing pinned for it */
    /* Also at a threshold of 0: page-locked memory is never staged. */
    pinstage_buffer_set_auto_stage_max_bytes(buf, 0);
    CHECK_OK(pinstage_buffer_upload(buf, d, (unsigned char *)pinned, bytes, nonblocking));
    pinstage_buffer_stats(buf, &st);
    CHECK_EQ(st.pinned_host_transfers, 3);
    drv.free_host(pinned);
    free(back);
    pinstage_devbuf_free(d);
    pinstage_buffer_free(buf);
}

/* The driver refuses an async copy whose host range is only partly
 * page-locked (seen on an H200; the emulator does the same): every route
 * must still move such memory. */
static void partly_page_locked_memory_is_staged(void) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE), bytes = 4 * M;
    unsigned char *host = NULL, *back = malloc(bytes);
    REQUIRE_OK(posix_memalign((void **)&host, page, bytes) ? PINSTAGE_ERROR_OUT_OF_MEMORY : 0);
    pinstage_devbuf *d;
    REQUIRE_OK(pinstage_devbuf_alloc_u8(&d, bytes));
    struct {
        const char *what;
        size_t first, second; /* registered ranges: [0, first) and [first, first + second) */
    } layouts[] = {{"first half registered", bytes / 2, 0}, {"registered in two pieces", bytes / 2, bytes / 2},
                   {"middle registered", 0, 0}};
    for (size_t i = 0; i < 3; i++) {
        if (i < 2) {
            REQUIRE_OK((pinstage_status)host_register(host, layouts[i].first, 0));
            if (layouts[i].second)
                REQUIRE_OK((pinstage_status)host_register(host + layouts[i].first, layouts[i].second, 0));
        } else {
            REQUIRE_OK((pinstage_status)host_register(host + M, M, 0));
        }
        printf("#   %s\n", layouts[i].what);
        /* What the driver itself does with the range (the middle case is
         * the driver's business: it may or may not take it). */
        if (i < 2)
            CHECK_EQ(drv.htod_async(pinstage_devbuf_ptr(d), host, bytes, nonblocking), CUDA_ERROR_INVALID_VALUE);
        for (size_t threshold = 0; threshold < 2; threshold++) {
            pinstage_buffer *buf;
            REQUIRE_OK(pinstage_buffer_create(&buf));
            /* 0: the pageable path is chosen, and must give way. */
            pinstage_buffer_set_auto_stage_max_bytes(buf, threshold ? SIZE_MAX : 0);
            unsigned seed = 1600 + (unsigned)(i * 4 + threshold * 2);
            fill_pattern(host, bytes, seed);
            CHECK_OK(pinstage_buffer_upload(buf, d, host, bytes, nonblocking));
            read_landed(d, back);
            CHECK_EQ(pattern_mismatch(back, bytes, seed), -1);
            fill_pattern(back, bytes, seed + 1);
            write_device(d, back);
            memset(host, 0, bytes);
            CHECK_OK(pinstage_buffer_download(buf, host, bytes, d, nonblocking));
            CHECK_EQ(pattern_mismatch(host, bytes, seed + 1), -1);
            pinstage_stats st;
            pinstage_buffer_stats(buf, &st);
            CHECK_EQ(st.staged_transfers + st.pageable_transfers, 2);
            if (i < 2) CHECK_EQ(st.staged_transfers, 2); /* the driver refuses these ranges */
            pinstage_buffer_free(buf);
        }
        if (i < 2) {
            REQUIRE_OK((pinstage_status)host_unregister(host));
            if (layouts[i].second) REQUIRE_OK((pinstage_status)host_unregister(host + layouts[i].first));
        } else {
            REQUIRE_OK((pinstage_status)host_unregister(host + M));
        }
    }
    pinstage_devbuf_free(d);
    free(host);
    free(back);
}

/* ---- Failures mid-pipeline (emulator) ------------------------------------------------- */

/* A driver failure at each stage of a 10-chunk pipeline, with slow DMAs in
 * flight: the status names the call, no counter moves, nothing leaks, and
 * the next transfer to another device buffer is exact, checked without
 * synchronizing first (a slot reused under a live DMA would show). */
static void a_failure_at_each_stage_leaves_no_dma_behind(void) {
    if (!emu) return;
    const fault_case cases[] = {
        {"cuMemcpyHtoDAsync", 1, 0}, {"cuMemcpyHtoDAsync", 5, 0}, {"cuMemcpyHtoDAsync", 10, 0},
        {"cuEventRecord", 1, 0},     {"cuEventRecord", 4, 0},     {"cuEventRecord", 7, 0},
        {"cuEventQuery", 1, 0},      {"cuEventQuery", 30, 0},
        {"cuMemcpyDtoHAsync", 1, 1}, {"cuMemcpyDtoHAsync", 4, 1}, {"cuMemcpyDtoHAsync", 10, 1},
        {"cuEventRecord", 1, 1},     {"cuEventRecord", 6, 1},     {"cuEventRecord", 10, 1},
        {"cuEventQuery", 1, 1},      {"cuEventQuery", 30, 1},
    };
    size_t bytes = 10 * 64 * K;
    unsigned char *src = malloc(bytes), *back = malloc(bytes);
    pinstage_devbuf *a, *b;
    REQUIRE_OK(pinstage_devbuf_alloc_u8(&a, bytes));
    REQUIRE_OK(pinstage_devbuf_alloc_u8(&b, bytes));
    emu->set_timing(200, 1);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        unsigned seed = 1710 + (unsigned)i * 3;
        pinstage_buffer *buf = fail_one_transfer(64 * K, bytes, &cases[i], seed, a, src, back);
        /* The next call, another device buffer, no synchronization. */
        fill_pattern(src, bytes, seed + 1);
        CHECK_OK(pinstage_buffer_upload(buf, b, src, bytes, nonblocking));
        read_landed(b, back);
        CHECK_EQ(pattern_mismatch(back, bytes, seed + 1), -1);
        if (!cases[i].d2h) {
            /* What the failed upload enqueued is not overwritten by the next. */
            read_landed(a, back);
            for (size_t c = 0; c < 10; c++) CHECK(memcmp(back + c * 64 * K, src + c * 64 * K, 64 * K) != 0);
        }
        pinstage_buffer_free(buf);
    }
    emu->set_timing(20, 4);
    pinstage_devbuf_free(a);
    pinstage_devbuf_free(b);
    free(src);
    free(back);
}

/* The seed's staged paths, a failed wait: the DMA it waited for may still
 * run; the next call must neither send its bytes to the failed call's
 * destination nor receive the failed call's bytes. */
static void a_failed_wait_never_mixes_two_transfers(void) {
    if (!emu) return;
    size_t bytes = 256 * K;
    pinstage_devbuf *a, *b;
    unsigned char *src = malloc(bytes), *back = malloc(bytes);
    REQUIRE_OK(pinstage_devbuf_alloc_u8(&a, bytes));
    REQUIRE_OK(pinstage_devbuf_alloc_u8(&b, bytes));
    emu->set_timing(2000, 1);
    for (int persistent = 0; persistent < 2; persistent++) {
        pinstage_buffer *buf;
        REQUIRE_OK(pinstage_buffer_create(&buf));
        /* (a) a failed download_into, then upload_with to another buffer. */
        fill_pattern(src, bytes, 1800);
        write_device(a, src);
        const void *view;
        CHECK_OK(pinstage_buffer_download_into(buf, a, bytes, nonblocking, &view)); /* warm */
        emu->fail("cuEventQuery", 1, 700, persistent);
        if (persistent) emu->fail("cuStreamSynchronize", 1, 700, 1);
        fill_pattern(src, bytes, 1801);
        write_device(a, src);
        CHECK_STATUS(pinstage_buffer_download_into(buf, a, bytes, nonblocking, &view), 700);
        emu->clear_faults();
        fill_pattern(src, bytes, 1802);
        CHECK_OK(pinstage_buffer_upload(buf, b, src, bytes, nonblocking));
        read_landed(b, back);
        CHECK_EQ(pattern_mismatch(back, bytes, 1802), -1);
        /* (b) a failed upload, then an upload to another buffer. */
        fill_pattern(src, bytes, 1803);
        emu->fail("cuEventQuery", 1, 700, persistent);
        if (persistent) emu->fail("cuStreamSynchronize", 1, 700, 1);
        CHECK_STATUS(pinstage_buffer_upload(buf, a, src, bytes, nonblocking), 700);
        emu->clear_faults();
        fill_pattern(src, bytes, 1804);
        CHECK_OK(pinstage_buffer_upload(buf, b, src, bytes, nonblocking));
        read_landed(a, back);
        CHECK_EQ(pattern_mismatch(back, bytes, 1803), -1); /* the failed call's own bytes, landed */
        read_landed(b, back);
        CHECK_EQ(pattern_mismatch(back, bytes, 1804), -1);
        pinstage_stats st;
        pinstage_buffer_stats(buf, &st);
        CHECK_EQ(st.retired_blocks, persistent ? 2 : 0);
        pinstage_buffer_free(buf);
    }
    emu->set_timing(20, 4);
    pinstage_devbuf_free(a);
    pinstage_devbuf_free(b);
    free(src);
    free(back);
}

int main(void) {
    test_setup();
    TEST_PROC(memset_async, "cuMemsetD8Async", 3020);
    REQUIRE_OK(pinstage_driver_get_proc("cuMemHostRegister", 6050, (void **)&host_register));
    REQUIRE_OK(pinstage_driver_get_proc("cuMemHostUnregister", 4000, (void **)&host_unregister));
    REQUIRE_OK(pinstage_stream_create(&nonblocking, PINSTAGE_STREAM_NON_BLOCKING));
    REQUIRE_OK(pinstage_stream_create(&blocking, 0));
    pinstage_emu_live before = live_now();
    RUN(every_chunk_boundary_moves_exact_bytes);
    RUN(ramped_transfers_move_exact_bytes);
    RUN(a_transfer_that_fits_the_stage_ramps_in_place);
    RUN(a_failure_in_a_ramped_download_leaves_the_buffer_usable);
    RUN(a_large_transfer_pins_at_most_32_mib);
    RUN(every_route_is_ordered_after_queued_work);
    RUN(a_pageable_download_records_an_event_only_for_queued_work);
    RUN(page_locked_memory_goes_straight_to_the_dma);
    RUN(partly_page_locked_memory_is_staged);
    RUN(a_failure_at_each_stage_leaves_no_dma_behind);
    RUN(a_failed_wait_never_mixes_two_transfers);
    check_current_test = "no_leaks";
    CHECK_NO_LEAK(before);
    pinstage_stream_destroy(nonblocking);
    pinstage_stream_destroy(blocking);
    return test_finish();
}
