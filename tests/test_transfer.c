/* SPDX-License-Identifier: MIT */
/* Every transfer path moves the exact bytes, counts itself, and is ordered
 * against the stream it is given, on the emulated and the real driver. */
#include "check.h"

#define SEED_SMALL (112 * 112 * 3) /* the seed's shapes, in f32 elements */
#define SEED_MID (128 * 128 * 3)
#define SEED_LARGE (640 * 640 * 3)

static CUstream nonblocking, blocking;

/* Reads device memory after all queued work, through the driver directly. */
static void read_device(const pinstage_devbuf *d, void *out) {
    REQUIRE_OK((pinstage_status)drv.ctx_sync());
    REQUIRE_OK(pinstage_devbuf_copy_to_host(d, out, pinstage_devbuf_len(d)));
}


typedef struct {
    unsigned seed;
    size_t calls;
    size_t n;
} fill_state;

static void fill_with_pattern(void *dst, size_t n, void *user) {
    fill_state *f = user;
    f->calls++;
    f->n = n;
    fill_pattern(dst, n * sizeof(float), f->seed);
}

static void upload_with_round_trips(void) {
    size_t sizes[] = {1, SEED_SMALL, SEED_MID, SEED_LARGE};
    pinstage_buffer *buf;
    REQUIRE_OK(pinstage_buffer_create(&buf));
    for (size_t i = 0; i < 4; i++) {
        size_t n = sizes[i], bytes = n * sizeof(float);
        pinstage_devbuf *d;
        REQUIRE_OK(pinstage_devbuf_alloc_f32(&d, n));
        fill_state f = {.seed = 100 + (unsigned)i};
        CHECK_OK(pinstage_buffer_upload_with(buf, d, n, nonblocking, fill_with_pattern, &f));
        CHECK_EQ(f.calls, 1);
        CHECK_EQ(f.n, n);
        void *back = malloc(bytes);
        read_landed(d, back);
        CHECK_EQ(pattern_mismatch(back, bytes, f.seed), -1);
        free(back);
        pinstage_devbuf_free(d);
    }
    pinstage_stats st;
    pinstage_buffer_stats(buf, &st);
    CHECK_EQ(st.staged_transfers, 4);
    CHECK_EQ(st.pageable_transfers, 0);
    CHECK_EQ(st.bytes_uploaded, (1 + SEED_SMALL + SEED_MID + SEED_LARGE) * sizeof(float));
    CHECK_EQ(st.bytes_downloaded, 0);
    pinstage_buffer_free(buf);
}

static void fill_nothing(void *dst, size_t n, void *user) {
    (void)dst, (void)n, (void)user;
}

static void fill_first_half(void *dst, size_t n, void *user) {
    memset(dst, *(unsigned char *)user, n / 2 * sizeof(float));
}

/* As the seed says: what fill leaves untouched is uploaded as it is. */
static void upload_with_uploads_untouched_elements_as_they_are(void) {
    size_t n = 4096, bytes = n * sizeof(float);
    pinstage_buffer *buf;
    pinstage_devbuf *d;
    unsigned char *back = malloc(bytes);
    REQUIRE_OK(pinstage_buffer_create(&buf));
    REQUIRE_OK(pinstage_devbuf_alloc_f32(&d, n));

    /* A fresh allocation is zeroes. */
    CHECK_OK(pinstage_buffer_upload_with(buf, d, n, NULL, fill_nothing, NULL));
    read_device(d, back);
    CHECK_EQ(first_not(back, bytes, 0), -1);

    fill_state f = {.seed = 7};
    CHECK_OK(pinstage_buffer_upload_with(buf, d, n, NULL, fill_with_pattern, &f));
    unsigned char value = 0x3c;
    CHECK_OK(pinstage_buffer_upload_with(buf, d, n, NULL, fill_first_half, &value));
    read_device(d, back);
    CHECK_EQ(first_not(back, bytes / 2, value), -1);
    unsigned char *want = malloc(bytes);
    fill_pattern(want, bytes, 7);
    CHECK(memcmp(back + bytes / 2, want + bytes / 2, bytes / 2) == 0);
    free(want);
    free(back);
    pinstage_devbuf_free(d);
    pinstage_buffer_free(buf);
}

static void download_into_returns_a_view_of_pinned_memory(void) {
    size_t sizes[] = {SEED_SMALL, SEED_LARGE};
    pinstage_buffer *buf;
    REQUIRE_OK(pinstage_buffer_create(&buf));
    for (size_t i = 0; i < 2; i++) {
        size_t n = sizes[i], bytes = n * sizeof(float);
        pinstage_devbuf *d;
        unsigned char *src = malloc(bytes);
        REQUIRE_OK(pinstage_devbuf_alloc_f32(&d, n));
        fill_pattern(src, bytes, 200 + (unsigned)i);
        write_device(d, src);
        const float *view = NULL;
        CHECK_OK(pinstage_buffer_download_into_f32(buf, d, n, nonblocking, &view));
        CHECK(view != NULL);
        if (view) CHECK_EQ(pattern_mismatch(view, bytes, 200 + (unsigned)i), -1);
        CHECK(pinstage_buffer_capacity(buf) >= bytes);
        /* The generic form returns the same memory. */
        const void *again = NULL;
        CHECK_OK(pinstage_buffer_download_into(buf, d, n, blocking, &again));
        CHECK(again == (const void *)view);
        free(src);
        pinstage_devbuf_free(d);
    }
    pinstage_stats st;
    pinstage_buffer_stats(buf, &st);
    CHECK_EQ(st.staged_transfers, 4);
    CHECK_EQ(st.bytes_downloaded, 2 * (SEED_SMALL + SEED_LARGE) * sizeof(float));
    CHECK_EQ(st.bytes_uploaded, 0);
    pinstage_buffer_free(buf);
}

/* upload / download with the seed's threshold set: staged at or below it,
 * the pageable path above it. */
static void slice_paths_follow_the_threshold(void) {
    size_t threshold = PINSTAGE_DEFAULT_AUTO_STAGE_MAX_BYTES;
    struct {
        size_t bytes;
        int staged;
    } cases[] = {
        {4, 1},
        {SEED_SMALL * 4, 1},
        {SEED_MID * 4, 1},
        {threshold, 1},
        {threshold + 4, 0},
        {SEED_LARGE * 4, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t bytes = cases[i].bytes, n = bytes / 4;
        pinstage_buffer *buf;
        pinstage_devbuf *d;
        unsigned char *src = malloc(bytes), *back = malloc(bytes);
        REQUIRE_OK(pinstage_buffer_create(&buf));
        pinstage_buffer_set_auto_stage_max_bytes(buf, threshold);
        REQUIRE_OK(pinstage_devbuf_alloc_f32(&d, n));
        fill_pattern(src, bytes, 300 + (unsigned)i);
        CHECK_OK(pinstage_buffer_upload(buf, d, src, n, nonblocking));
        read_landed(d, back);
        CHECK_EQ(pattern_mismatch(back, bytes, 300 + (unsigned)i), -1);
        memset(back, 0, bytes);
        CHECK_OK(pinstage_buffer_download(buf, back, n, d, nonblocking));
        CHECK_EQ(pattern_mismatch(back, bytes, 300 + (unsigned)i), -1);

        pinstage_stats st;
        pinstage_buffer_stats(buf, &st);
        CHECK_EQ(st.staged_transfers, cases[i].staged ? 2 : 0);
        CHECK_EQ(st.pageable_transfers, cases[i].staged ? 0 : 2);
        CHECK_EQ(st.bytes_uploaded, bytes);
        CHECK_EQ(st.bytes_downloaded, bytes);
        /* The direct path pins nothing. */
        CHECK_EQ(pinstage_buffer_capacity(buf), cases[i].staged ? ((bytes + 65535) / 65536) * 65536 : 0);
        CHECK_EQ(st.pinned_allocations, cases[i].staged ? 1 : 0);
        free(src);
        free(back);
        pinstage_devbuf_free(d);
        pinstage_buffer_free(buf);
    }
}

static void threshold_forces_either_path(void) {
    size_t n = SEED_LARGE, bytes = n * 4;
    pinstage_buffer *buf;
    pinstage_devbuf *d;
    unsigned char *src = malloc(bytes), *back = malloc(bytes);
    REQUIRE_OK(pinstage_buffer_create(&buf));
    REQUIRE_OK(pinstage_devbuf_alloc_f32(&d, n));
    fill_pattern(src, bytes, 400);

    pinstage_buffer_set_auto_stage_max_bytes(buf, SIZE_MAX); /* stage everything */
    CHECK_OK(pinstage_buffer_upload(buf, d, src, n, blocking));
    CHECK_OK(pinstage_buffer_download(buf, back, n, d, blocking));
    CHECK_EQ(pattern_mismatch(back, bytes, 400), -1);
    pinstage_stats st;
    pinstage_buffer_stats(buf, &st);
    CHECK_EQ(st.staged_transfers, 2);
    CHECK_EQ(st.pageable_transfers, 0);

    pinstage_devbuf *small;
    REQUIRE_OK(pinstage_devbuf_alloc_f32(&small, 16));
    pinstage_buffer_set_auto_stage_max_bytes(buf, 0); /* nothing staged */
    fill_pattern(src, 64, 401);
    CHECK_OK(pinstage_buffer_upload(buf, small, src, 16, blocking));
    memset(back, 0, 64);
    CHECK_OK(pinstage_buffer_download(buf, back, 16, small, blocking));
    CHECK_EQ(pattern_mismatch(back, 64, 401), -1);
    pinstage_buffer_stats(buf, &st);
    CHECK_EQ(st.staged_transfers, 2);
    CHECK_EQ(st.pageable_transfers, 2);

    /* upload_with and download_into stage whatever the threshold. */
    fill_state f = {.seed = 402};
    CHECK_OK(pinstage_buffer_upload_with(buf, small, 16, blocking, fill_with_pattern, &f));
    const void *view;
    CHECK_OK(pinstage_buffer_download_into(buf, small, 16, blocking, &view));
    CHECK_EQ(pattern_mismatch(view, 64, 402), -1);
    pinstage_buffer_stats(buf, &st);
    CHECK_EQ(st.staged_transfers, 4);
    CHECK_EQ(st.pageable_transfers, 2);
    free(src);
    free(back);
    pinstage_devbuf_free(d);
    pinstage_devbuf_free(small);
    pinstage_buffer_free(buf);
}

/* Work queued on the stream comes first, on both sides of the threshold,
 * for non-blocking, blocking and the legacy stream. */
static void transfers_are_ordered_after_queued_work(void) {
    CUstream streams[] = {nonblocking, blocking, NULL};
    const char *names[] = {"non-blocking", "blocking", "legacy"};
    size_t sizes[] = {SEED_SMALL, SEED_LARGE}; /* staged, then direct, by default */
    for (size_t s = 0; s < 3; s++)
        for (size_t z = 0; z < 2; z++) {
            size_t n = sizes[z], bytes = n * 4;
            CUstream stream = streams[s];
            pinstage_buffer *buf;
            pinstage_devbuf *d;
            unsigned char *host = malloc(bytes);
            REQUIRE_OK(pinstage_buffer_create(&buf));
            REQUIRE_OK(pinstage_devbuf_alloc_f32(&d, n));
            printf("#   %s stream, %zu bytes\n", names[s], bytes);

            /* download: sees the value the queued work leaves. */
            queue_busy_work(stream, d, 0x5a);
            CHECK_OK(pinstage_buffer_download(buf, host, n, d, stream));
            CHECK_EQ(first_not(host, bytes, 0x5a), -1);

            queue_busy_work(stream, d, 0x6b);
            const void *view;
            CHECK_OK(pinstage_buffer_download_into(buf, d, n, stream, &view));
            CHECK_EQ(first_not(view, bytes, 0x6b), -1);

            /* upload: lands after the queued work, and has landed on return. */
            fill_pattern(host, bytes, 500);
            queue_busy_work(stream, d, 0x7c);
            CHECK_OK(pinstage_buffer_upload(buf, d, host, n, stream));
            memset(host, 0, bytes);
            read_landed(d, host);
            CHECK_EQ(pattern_mismatch(host, bytes, 500), -1);

            fill_state f = {.seed = 501};
            queue_busy_work(stream, d, 0x8d);
            CHECK_OK(pinstage_buffer_upload_with(buf, d, n, stream, fill_with_pattern, &f));
            read_landed(d, host);
            CHECK_EQ(pattern_mismatch(host, bytes, 501), -1);
            read_device(d, host);
            CHECK_EQ(pattern_mismatch(host, bytes, 501), -1);

            free(host);
            pinstage_devbuf_free(d);
            pinstage_buffer_free(buf);
        }
}

/* Every element type round-trips through the typed calls, and a typed call
 * refuses a buffer of another element type before any driver call. */
#define TYPED_ROUND_TRIP(T, alloc, seed)                                           \
    do {                                                                           \
        enum { N = 333 };                                                          \
        T src[N], back[N];                                                         \
        pinstage_devbuf *d;                                                        \
        REQUIRE_OK(alloc(&d, N));                                                  \
        fill_pattern(src, sizeof src, seed);                                       \
        CHECK_OK(pinstage_upload(buf, d, (const T *)src, N, nonblocking));         \
        memset(back, 0, sizeof back);                                              \
        CHECK_OK(pinstage_download(buf, back, N, d, nonblocking));                 \
        CHECK(memcmp(src, back, sizeof src) == 0);                                 \
        CHECK_EQ(pinstage_devbuf_elem_size(d), sizeof(T));                         \
        CHECK_EQ(pinstage_devbuf_bytes(d), sizeof src);                            \
        pinstage_devbuf_free(d);                                                   \
    } while (0)

static void every_element_type_round_trips(void) {
    pinstage_buffer *buf;
    REQUIRE_OK(pinstage_buffer_create(&buf));
    TYPED_ROUND_TRIP(float, pinstage_devbuf_alloc_f32, 1);
    TYPED_ROUND_TRIP(double, pinstage_devbuf_alloc_f64, 2);
    TYPED_ROUND_TRIP(int8_t, pinstage_devbuf_alloc_i8, 3);
    TYPED_ROUND_TRIP(uint8_t, pinstage_devbuf_alloc_u8, 4);
    TYPED_ROUND_TRIP(int16_t, pinstage_devbuf_alloc_i16, 5);
    TYPED_ROUND_TRIP(uint16_t, pinstage_devbuf_alloc_u16, 6);
    TYPED_ROUND_TRIP(int32_t, pinstage_devbuf_alloc_i32, 7);
    TYPED_ROUND_TRIP(uint32_t, pinstage_devbuf_alloc_u32, 8);
    TYPED_ROUND_TRIP(int64_t, pinstage_devbuf_alloc_i64, 9);
    TYPED_ROUND_TRIP(uint64_t, pinstage_devbuf_alloc_u64, 10);
    TYPED_ROUND_TRIP(pinstage_f16, pinstage_devbuf_alloc_f16, 11);
    TYPED_ROUND_TRIP(pinstage_bf16, pinstage_devbuf_alloc_bf16, 12);
    TYPED_ROUND_TRIP(char, pinstage_devbuf_alloc_char, 14);
#if defined(__LP64__)
    TYPED_ROUND_TRIP(long long, pinstage_devbuf_alloc_ll, 15);
    TYPED_ROUND_TRIP(unsigned long long, pinstage_devbuf_alloc_ull, 16);
#endif
#if defined(__SIZEOF_INT128__)
    TYPED_ROUND_TRIP(pinstage_i128, pinstage_devbuf_alloc_i128, 17);
    TYPED_ROUND_TRIP(pinstage_u128, pinstage_devbuf_alloc_u128, 18);
#endif

    /* A user-defined element: 12-byte, 4-aligned RGB triple. */
    typedef struct {
        float r, g, b;
    } rgb;
    rgb src[50], back[50];
    pinstage_devbuf *d;
    REQUIRE_OK(pinstage_devbuf_alloc(&d, 50, sizeof(rgb), _Alignof(rgb)));
    fill_pattern(src, sizeof src, 13);
    CHECK_OK(pinstage_buffer_upload(buf, d, src, 50, blocking));
    CHECK_OK(pinstage_buffer_download(buf, back, 50, d, blocking));
    CHECK(memcmp(src, back, sizeof src) == 0);

    /* Element-type mismatch: refused, no driver call, counters unchanged. */
    pinstage_stats before, after;
    pinstage_buffer_stats(buf, &before);
    float f[50];
    const float *view = (const float *)0x1;
    unsigned long calls = driver_calls();
    CHECK_STATUS(pinstage_upload(buf, d, (const float *)f, 50, blocking), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_MESSAGE("12-byte elements");
    CHECK_STATUS(pinstage_buffer_download_f32(buf, f, 50, d, blocking), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_STATUS(pinstage_buffer_download_into_f32(buf, d, 50, blocking, &view), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK(view == NULL);
    CHECK_EQ(driver_calls(), calls);
    pinstage_buffer_stats(buf, &after);
    CHECK(memcmp(&before, &after, sizeof before) == 0);
    pinstage_devbuf_free(d);
    pinstage_buffer_free(buf);
}

static void fill_f32_ramp(float *dst, size_t n, void *user) {
    float base = *(float *)user;
    for (size_t i = 0; i < n; i++) dst[i] = base + (float)i;
}

static void typed_upload_with_passes_typed_pointers(void) {
    pinstage_buffer *buf;
    pinstage_devbuf *d;
    float back[1000], base = 0.5f;
    REQUIRE_OK(pinstage_buffer_create(&buf));
    REQUIRE_OK(pinstage_devbuf_alloc_f32(&d, 1000));
    CHECK_OK(pinstage_buffer_upload_with_f32(buf, d, 1000, nonblocking, fill_f32_ramp, &base));
    read_device(d, back);
    int ok = 1;
    for (int i = 0; i < 1000; i++) ok &= back[i] == 0.5f + (float)i;
    CHECK(ok);
    CHECK_STATUS(pinstage_buffer_upload_with_f32(buf, d, 1000, nonblocking, NULL, NULL),
                 PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_MESSAGE("fill is NULL");
    pinstage_devbuf_free(d);
    pinstage_buffer_free(buf);
}

/* A wrapped device pointer (memory owned elsewhere) is a full transfer target. */
static void wrapped_memory_is_a_transfer_target(void) {
    pinstage_buffer *buf;
    pinstage_devbuf *owner, *view;
    uint32_t src[777], back[777];
    REQUIRE_OK(pinstage_buffer_create(&buf));
    REQUIRE_OK(pinstage_devbuf_alloc_u32(&owner, 1000));
    /* A window into the middle of the allocation. */
    REQUIRE_OK(pinstage_devbuf_wrap_u32(&view, pinstage_devbuf_ptr(owner) + 100 * 4, 777));
    fill_pattern(src, sizeof src, 600);
    CHECK_OK(pinstage_upload(buf, view, (const uint32_t *)src, 777, nonblocking));
    CHECK_OK(pinstage_download(buf, back, 777, view, nonblocking));
    CHECK(memcmp(src, back, sizeof src) == 0);
    uint32_t all[1000];
    read_device(owner, all);
    CHECK(memcmp(all + 100, src, sizeof src) == 0);
    pinstage_devbuf_free(view);
    pinstage_devbuf_free(owner);
    pinstage_buffer_free(buf);
}

/* The pinned allocation misaligned for the element: download_into, whose
 * view the caller reads as elements, refuses before any copy; upload and
 * download copy bytes, which need no alignment. */
static void misaligned_pinned_memory_is_refused(void) {
    if (!emu) return; /* real drivers hand out page-aligned pinned memory */
    pinstage_buffer *buf;
    pinstage_devbuf *d;
    REQUIRE_OK(pinstage_devbuf_alloc(&d, 64, 64, 64));
    emu->set_pinned_alignment(16);
    REQUIRE_OK(pinstage_buffer_create(&buf));
    pinstage_buffer_set_auto_stage_max_bytes(buf, SIZE_MAX);
    unsigned char src[64 * 64], back[64 * 64];
    fill_pattern(src, sizeof src, 77);
    unsigned long copies = emu->calls("cuMemcpyHtoDAsync") + emu->calls("cuMemcpyDtoHAsync");
    const void *view = (const void *)1;
    CHECK_STATUS(pinstage_buffer_download_into(buf, d, 64, NULL, &view), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_MESSAGE("not aligned");
    CHECK(view == NULL);
    CHECK_EQ(emu->calls("cuMemcpyHtoDAsync") + emu->calls("cuMemcpyDtoHAsync"), copies);
    pinstage_stats st;
    pinstage_buffer_stats(buf, &st);
    CHECK_EQ(st.staged_transfers, 0);
    CHECK_EQ(st.bytes_downloaded, 0);
    CHECK_OK(pinstage_buffer_upload(buf, d, src, 64, NULL));
    CHECK_OK(pinstage_buffer_download(buf, back, 64, d, NULL));
    CHECK(memcmp(src, back, sizeof src) == 0);
    emu->set_pinned_alignment(0);
    pinstage_buffer_free(buf);
    /* 16-byte elements are fine in 16-aligned pinned memory. */
    emu->set_pinned_alignment(16);
    REQUIRE_OK(pinstage_buffer_create(&buf));
    pinstage_devbuf *d16;
    REQUIRE_OK(pinstage_devbuf_alloc(&d16, 256, 16, 16));
    CHECK_OK(pinstage_buffer_download_into(buf, d16, 256, NULL, &view));
    emu->set_pinned_alignment(0);
    pinstage_buffer_free(buf);
    pinstage_devbuf_free(d16);
    pinstage_devbuf_free(d);
}

int main(void) {
    test_setup();
    REQUIRE_OK(pinstage_stream_create(&nonblocking, PINSTAGE_STREAM_NON_BLOCKING));
    REQUIRE_OK(pinstage_stream_create(&blocking, 0));
    pinstage_emu_live before = live_now();
    RUN(upload_with_round_trips);
    RUN(upload_with_uploads_untouched_elements_as_they_are);
    RUN(download_into_returns_a_view_of_pinned_memory);
    RUN(slice_paths_follow_the_threshold);
    RUN(threshold_forces_either_path);
    RUN(transfers_are_ordered_after_queued_work);
    RUN(every_element_type_round_trips);
    RUN(typed_upload_with_passes_typed_pointers);
    RUN(wrapped_memory_is_a_transfer_target);
    RUN(misaligned_pinned_memory_is_refused);
    check_current_test = "no_leaks";
    CHECK_NO_LEAK(before);
    pinstage_stream_destroy(nonblocking);
    pinstage_stream_destroy(blocking);
    return test_finish();
}
