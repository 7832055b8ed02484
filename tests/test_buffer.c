/* SPDX-License-Identifier: MIT */
/* The staging buffer's life cycle: creation, capacity, reserve, shrink,
 * threshold and counters. */
#include "check.h"

#define G PINSTAGE_CAPACITY_GRANULARITY

static void constants_match_the_seed(void) {
    CHECK_EQ(PINSTAGE_DEFAULT_AUTO_STAGE_MAX_BYTES, 512 * 1024);
    CHECK_EQ(PINSTAGE_CAPACITY_GRANULARITY, 64 * 1024);
}

static void create_pins_nothing(void) {
    pinstage_buffer *buf = NULL;
    unsigned long calls = driver_calls();
    CHECK_OK(pinstage_buffer_create(&buf));
    CHECK(buf != NULL);
    CHECK_EQ(driver_calls(), calls);
    CHECK_EQ(pinstage_buffer_capacity(buf), 0);
    CHECK_EQ(pinstage_buffer_auto_stage_max_bytes(buf), PINSTAGE_AUTO_STAGE_PROFILE);
    pinstage_stats st;
    memset(&st, 0xff, sizeof st);
    pinstage_buffer_stats(buf, &st);
    CHECK_EQ(st.pinned_allocations, 0);
    CHECK_EQ(st.staged_transfers, 0);
    CHECK_EQ(st.pageable_transfers, 0);
    CHECK_EQ(st.bytes_uploaded, 0);
    CHECK_EQ(st.bytes_downloaded, 0);
    CHECK_EQ(st.pin_time_ns, 0);
    CHECK_EQ(st.peak_capacity, 0);
    CHECK_EQ(st.engine_transfers, 0);
    CHECK_EQ(st.pinned_host_transfers, 0);
    CHECK_EQ(st.retired_blocks, 0);
    pinstage_buffer_free(buf);
    CHECK_EQ(driver_calls(), calls);
    pinstage_buffer_free(NULL); /* accepted */
}

static void with_capacity_rounds_up_and_pins_once(void) {
    pinstage_emu_live before = live_now();
    pinstage_buffer *buf = NULL;
    CHECK_OK(pinstage_buffer_create_with_capacity(&buf, 1));
    CHECK_EQ(pinstage_buffer_capacity(buf), G);
    pinstage_stats st;
    pinstage_buffer_stats(buf, &st);
    CHECK_EQ(st.pinned_allocations, 1);
    CHECK_EQ(st.peak_capacity, G);
    if (emu) CHECK_EQ(live_now().pinned_allocations, before.pinned_allocations + 1);
    pinstage_buffer_free(buf);

    CHECK_OK(pinstage_buffer_create_with_capacity(&buf, 3 * G + 7));
    CHECK_EQ(pinstage_buffer_capacity(buf), 4 * G);
    pinstage_buffer_free(buf);
    CHECK_OK(pinstage_buffer_create_with_capacity(&buf, 2 * G));
    CHECK_EQ(pinstage_buffer_capacity(buf), 2 * G);
    pinstage_buffer_free(buf);
    CHECK_NO_LEAK(before);
}

static void with_capacity_rejects_zero_and_overflow(void) {
    pinstage_buffer *buf = (pinstage_buffer *)0x1;
    unsigned long calls = driver_calls();
    CHECK_STATUS(pinstage_buffer_create_with_capacity(&buf, 0), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK(buf == NULL);
    CHECK_MESSAGE("bytes is 0");
    buf = (pinstage_buffer *)0x1;
    CHECK_STATUS(pinstage_buffer_create_with_capacity(&buf, SIZE_MAX), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK(buf == NULL);
    CHECK_MESSAGE("overflows");
    CHECK_STATUS(pinstage_buffer_create_with_capacity(NULL, 10), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_STATUS(pinstage_buffer_create(NULL), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_EQ(driver_calls(), calls);
}

static void reserve_is_grow_only(void) {
    pinstage_emu_live before = live_now();
    pinstage_buffer *buf;
    REQUIRE_OK(pinstage_buffer_create(&buf));
    CHECK_OK(pinstage_buffer_reserve(buf, 100 * 1024));
    CHECK_EQ(pinstage_buffer_capacity(buf), 2 * G);
    pinstage_stats st;
    pinstage_buffer_stats(buf, &st);
    CHECK_EQ(st.pinned_allocations, 1);

    /* Smaller or equal requests change nothing and call no driver. */
    unsigned long calls = driver_calls();
    CHECK_OK(pinstage_buffer_reserve(buf, 1));
    CHECK_OK(pinstage_buffer_reserve(buf, 2 * G));
    CHECK_EQ(pinstage_buffer_capacity(buf), 2 * G);
    CHECK_EQ(driver_calls(), calls);

    CHECK_OK(pinstage_buffer_reserve(buf, 2 * G + 1));
    CHECK_EQ(pinstage_buffer_capacity(buf), 3 * G);
    pinstage_buffer_stats(buf, &st);
    CHECK_EQ(st.pinned_allocations, 2);
    CHECK_EQ(st.peak_capacity, 3 * G);
    /* The old allocation was released: one pinned allocation is live. */
    if (emu) CHECK_EQ(live_now().pinned_allocations, before.pinned_allocations + 1);
    if (emu) CHECK_EQ(live_now().pinned_bytes, before.pinned_bytes + 3 * G);

    /* Bad requests change nothing. */
    calls = driver_calls();
    CHECK_STATUS(pinstage_buffer_reserve(buf, 0), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_STATUS(pinstage_buffer_reserve(buf, SIZE_MAX - 5), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_MESSAGE("overflows");
    CHECK_STATUS(pinstage_buffer_reserve(NULL, 10), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_EQ(pinstage_buffer_capacity(buf), 3 * G);
    CHECK_EQ(driver_calls(), calls);
    pinstage_buffer_free(buf);
    CHECK_NO_LEAK(before);
}

static void shrink_releases_and_keeps_counters(void) {
    pinstage_emu_live before = live_now();
    pinstage_buffer *buf;
    pinstage_devbuf *d;
    float host[1000];
    REQUIRE_OK(pinstage_buffer_create(&buf));
    REQUIRE_OK(pinstage_devbuf_alloc_f32(&d, 1000));
    for (int i = 0; i < 1000; i++) host[i] = (float)i;
    pinstage_buffer_set_auto_stage_max_bytes(buf, SIZE_MAX); /* 4000 bytes: staged, not pageable */
    CHECK_OK(pinstage_buffer_upload_f32(buf, d, host, 1000, NULL));
    CHECK_EQ(pinstage_buffer_capacity(buf), G);

    pinstage_buffer_shrink_to_fit(buf);
    CHECK_EQ(pinstage_buffer_capacity(buf), 0);
    if (emu) CHECK_EQ(live_now().pinned_allocations, before.pinned_allocations);
    pinstage_stats st;
    pinstage_buffer_stats(buf, &st);
    CHECK_EQ(st.pinned_allocations, 1);
    CHECK_EQ(st.staged_transfers, 1);
    CHECK_EQ(st.bytes_uploaded, sizeof host);
    CHECK_EQ(st.peak_capacity, G);

    /* The next transfer pins again. */
    float back[1000];
    CHECK_OK(pinstage_buffer_download_f32(buf, back, 1000, d, NULL));
    CHECK(memcmp(host, back, sizeof host) == 0);
    CHECK_EQ(pinstage_buffer_capacity(buf), G);
    pinstage_buffer_stats(buf, &st);
    CHECK_EQ(st.pinned_allocations, 2);
    CHECK(st.pin_time_ns > 0);

    pinstage_buffer_shrink_to_fit(buf);
    pinstage_buffer_shrink_to_fit(buf); /* twice is fine */
    pinstage_buffer_shrink_to_fit(NULL);
    pinstage_buffer_free(buf);
    pinstage_devbuf_free(d);
    CHECK_NO_LEAK(before);
}

static void threshold_is_settable(void) {
    pinstage_buffer *buf;
    REQUIRE_OK(pinstage_buffer_create(&buf));
    pinstage_buffer_set_auto_stage_max_bytes(buf, 0);
    CHECK_EQ(pinstage_buffer_auto_stage_max_bytes(buf), 0);
    pinstage_buffer_set_auto_stage_max_bytes(buf, SIZE_MAX);
    CHECK_EQ(pinstage_buffer_auto_stage_max_bytes(buf), SIZE_MAX);
    pinstage_buffer_set_auto_stage_max_bytes(buf, PINSTAGE_AUTO_STAGE_PROFILE);
    CHECK_EQ(pinstage_buffer_auto_stage_max_bytes(buf), PINSTAGE_AUTO_STAGE_PROFILE);
    pinstage_buffer_free(buf);
}

/* A pipeline cycling through shapes settles at its high-water mark. */
static void steady_state_pins_once(void) {
    pinstage_buffer *buf;
    size_t sizes[] = {150528 / 4, 196608 / 4, 4096, 196608 / 4, 150528 / 4};
    REQUIRE_OK(pinstage_buffer_create(&buf));
    pinstage_buffer_set_auto_stage_max_bytes(buf, SIZE_MAX); /* every size staged */
    float *host = calloc(196608 / 4, sizeof *host);
    for (int round = 0; round < 3; round++)
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            pinstage_devbuf *d;
            REQUIRE_OK(pinstage_devbuf_alloc_f32(&d, sizes[i]));
            CHECK_OK(pinstage_buffer_upload_f32(buf, d, host, sizes[i], NULL));
            pinstage_devbuf_free(d);
        }
    pinstage_stats st;
    pinstage_buffer_stats(buf, &st);
    /* 150528 bytes round up to three granules, which also hold 196608. */
    CHECK_EQ(st.pinned_allocations, 1);
    CHECK_EQ(pinstage_buffer_capacity(buf), 196608);
    CHECK_EQ(st.staged_transfers, 15);
    free(host);
    pinstage_buffer_free(buf);
}

int main(void) {
    test_setup();
    RUN(constants_match_the_seed);
    RUN(create_pins_nothing);
    RUN(with_capacity_rounds_up_and_pins_once);
    RUN(with_capacity_rejects_zero_and_overflow);
    RUN(reserve_is_grow_only);
    RUN(shrink_releases_and_keeps_counters);
    RUN(threshold_is_settable);
    RUN(steady_state_pins_once);
    return test_finish();
}
