/* SPDX-License-Identifier: MIT */
/* Device buffers, the pageable baseline copies, and the context, device and
 * stream helpers. */
#include "check.h"

static void alloc_and_free(void) {
    pinstage_emu_live before = live_now();
    pinstage_devbuf *d = NULL;
    CHECK_OK(pinstage_devbuf_alloc(&d, 1000, 8, 8));
    CHECK(d != NULL);
    CHECK(pinstage_devbuf_ptr(d) != 0);
    CHECK_EQ(pinstage_devbuf_ptr(d) % 256, 0);
    CHECK_EQ(pinstage_devbuf_len(d), 1000);
    CHECK_EQ(pinstage_devbuf_elem_size(d), 8);
    CHECK_EQ(pinstage_devbuf_bytes(d), 8000);
    if (emu) {
        CHECK_EQ(live_now().device_allocations, before.device_allocations + 1);
        CHECK_EQ(live_now().device_bytes, before.device_bytes + 8000);
    }
    CHECK_OK(pinstage_devbuf_free(d));
    CHECK_NO_LEAK(before);
}

/* Wrapping never frees the caller's memory. */
static void wrap_does_not_take_ownership(void) {
    pinstage_devbuf *owner, *w;
    REQUIRE_OK(pinstage_devbuf_alloc_u8(&owner, 4096));
    unsigned long frees = emu ? emu->calls("cuMemFree") : 0;
    unsigned long calls = driver_calls();
    CHECK_OK(pinstage_devbuf_wrap_u8(&w, pinstage_devbuf_ptr(owner), 4096));
    CHECK_EQ(pinstage_devbuf_ptr(w), pinstage_devbuf_ptr(owner));
    CHECK_EQ(driver_calls(), calls); /* wrapping makes no driver call */
    CHECK_OK(pinstage_devbuf_free(w));
    if (emu) CHECK_EQ(emu->calls("cuMemFree"), frees);
    /* The memory is still usable through its owner. */
    unsigned char src[4096], back[4096];
    fill_pattern(src, sizeof src, 1);
    CHECK_OK(pinstage_devbuf_copy_from_host(owner, src, 4096));
    CHECK_OK(pinstage_devbuf_copy_to_host(owner, back, 4096));
    CHECK(memcmp(src, back, sizeof src) == 0);
    pinstage_devbuf_free(owner);
}

/* The baseline: synchronous pageable copies, exact bytes, the seed's shapes. */
static void pageable_copies_round_trip(void) {
    size_t sizes[] = {1, 112 * 112 * 3, 640 * 640 * 3};
    for (size_t i = 0; i < 3; i++) {
        size_t n = sizes[i], bytes = n * 4;
        pinstage_devbuf *d;
        unsigned char *src = malloc(bytes), *back = malloc(bytes);
        REQUIRE_OK(pinstage_devbuf_alloc_f32(&d, n));
        fill_pattern(src, bytes, 10 + (unsigned)i);
        CHECK_OK(pinstage_devbuf_copy_from_host(d, src, n));
        CHECK_OK(pinstage_devbuf_copy_to_host(d, back, n));
        CHECK(memcmp(src, back, bytes) == 0);
        free(src);
        free(back);
        pinstage_devbuf_free(d);
    }
}

/* copy_to_host runs on the legacy stream: ordered after blocking streams. */
static void pageable_copy_follows_blocking_streams(void) {
    CUstream s;
    pinstage_devbuf *d;
    unsigned char back[65536];
    REQUIRE_OK(pinstage_stream_create(&s, 0));
    REQUIRE_OK(pinstage_devbuf_alloc_u8(&d, sizeof back));
    queue_busy_work(s, d, 0x42);
    CHECK_OK(pinstage_devbuf_copy_to_host(d, back, sizeof back));
    CHECK_EQ(first_not(back, sizeof back, 0x42), -1);
    pinstage_devbuf_free(d);
    pinstage_stream_destroy(s);
}

static void device_and_context_helpers(void) {
    int count = -1;
    CHECK_OK(pinstage_device_count(&count));
    CHECK(count >= 1);
    pinstage_device_info info;
    memset(&info, 0, sizeof info);
    CHECK_OK(pinstage_device_get_info(0, &info));
    CHECK(info.name[0] != 0);
    CHECK(strlen(info.pci_bus_id) >= 7);
    CHECK(info.compute_major >= 1);
    CHECK(info.multiprocessors >= 1);
    CHECK(info.copy_engines >= 1);
    printf("#   device 0: %s, %s, sm_%d%d, %d copy engines\n", info.name, info.pci_bus_id,
           info.compute_major, info.compute_minor, info.copy_engines);
    /* Nested init/release pairs keep the context usable until the last. */
    CHECK_OK(pinstage_context_init(0));
    CHECK_OK(pinstage_context_release(0));
    pinstage_devbuf *d;
    CHECK_OK(pinstage_devbuf_alloc_u8(&d, 16));
    pinstage_devbuf_free(d);
}

static void stream_helpers(void) {
    pinstage_emu_live before = live_now();
    CUstream s = NULL, nb = NULL;
    CHECK_OK(pinstage_stream_create(&s, 0));
    CHECK_OK(pinstage_stream_create(&nb, PINSTAGE_STREAM_NON_BLOCKING));
    CHECK(s != NULL && nb != NULL && s != nb);
    if (emu) CHECK_EQ(live_now().streams, before.streams + 2);
    pinstage_devbuf *d;
    REQUIRE_OK(pinstage_devbuf_alloc_u8(&d, 4096));
    queue_busy_work(nb, d, 9);
    CHECK_OK(pinstage_stream_synchronize(nb));
    unsigned char back[4096];
    REQUIRE_OK((pinstage_status)drv.dtoh_async(back, pinstage_devbuf_ptr(d), 4096, nb));
    CHECK_EQ(first_not(back, 4096, 9), -1);
    CHECK_OK(pinstage_stream_synchronize(NULL));
    CHECK_OK(pinstage_stream_destroy(s));
    CHECK_OK(pinstage_stream_destroy(nb));
    pinstage_devbuf_free(d);
    CHECK_NO_LEAK(before);
    if (emu) {
        /* A destroyed stream is an invalid handle, reported as the driver does. */
        CHECK_STATUS(pinstage_stream_synchronize(s), 400 /* CUDA_ERROR_INVALID_HANDLE */);
        CHECK_MESSAGE("cuStreamSynchronize failed: CUDA_ERROR_INVALID_HANDLE");
    }
}

int main(void) {
    test_setup();
    RUN(alloc_and_free);
    RUN(wrap_does_not_take_ownership);
    RUN(pageable_copies_round_trip);
    RUN(pageable_copy_follows_blocking_streams);
    RUN(device_and_context_helpers);
    RUN(stream_helpers);
    return test_finish();
}
