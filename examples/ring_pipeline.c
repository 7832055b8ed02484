/* SPDX-License-Identifier: MIT */
/* The frame pipeline with overlap: the CPU prepares frame k+1 while frame k
 * crosses the bus and the device works on it.
 *
 * Per frame: write a 640x640x3 f32 frame straight into a ring slot
 * (upload_with_async returns before the copy lands), queue the "model" on
 * the same stream (a device-to-device copy into the output tensor), queue
 * the download (a ticket), and only then collect the previous frame's
 * result and check it. A ring of 4 slots: an upload and a download in flight
 * per frame, two frames deep. Every slot is reused only once its copy has
 * finished; the ring's stats say how often the CPU had to wait for one.
 *
 *   ring_pipeline [frames]      (default 100)
 *
 * Uses the current driver: PINSTAGE_DRIVER=.../libpinstage_emu.so runs it
 * without a GPU. */
#include <stdio.h>
#include <stdlib.h>

#include "pinstage.h"

#define ELEMS (3 * 640 * 640)

typedef int (*memcpy_dtod_async_fn)(CUdeviceptr, CUdeviceptr, size_t, CUstream);

static float pixel(size_t i, unsigned frame) { return (float)((i + frame) % 251) / 251.0f; }

static void fill_frame(float *dst, size_t n, void *user) {
    unsigned frame = *(const unsigned *)user;
    for (size_t i = 0; i < n; i++) dst[i] = pixel(i, frame); /* decode + preprocess */
}

/* The previous frame's result, read in place from its slot. */
static int consume(pinstage_ring *ring, pinstage_ticket ticket, unsigned frame) {
    const void *view;
    pinstage_status s = pinstage_ring_wait(ring, ticket, &view);
    if (s) {
        fprintf(stderr, "ring_pipeline: %s: %s\n", pinstage_status_name(s), pinstage_last_error_message());
        return 1;
    }
    const float *result = view;
    for (size_t i = 0; i < ELEMS; i++)
        if (result[i] != pixel(i, frame)) {
            fprintf(stderr, "ring_pipeline: frame %u element %zu is %g\n", frame, i, result[i]);
            return 1;
        }
    pinstage_ring_release(ring, ticket); /* done with the view: its slot may go first */
    return 0;
}

#define TRY(call)                                                                            \
    do {                                                                                     \
        pinstage_status s_ = (call);                                                         \
        if (s_ != PINSTAGE_SUCCESS) {                                                        \
            fprintf(stderr, "ring_pipeline: %s: %s\n", pinstage_status_name(s_),             \
                    pinstage_last_error_message());                                          \
            return 1;                                                                        \
        }                                                                                    \
    } while (0)

int main(int argc, char **argv) {
    unsigned frames = argc > 1 ? (unsigned)strtoul(argv[1], NULL, 10) : 100;
    pinstage_driver_info info;
    TRY(pinstage_driver_get_info(&info));
    if (info.emulated) printf("note: running on the emulated driver (%s), not a GPU\n", info.path);
    TRY(pinstage_context_init(0));

    memcpy_dtod_async_fn dtod;
    TRY(pinstage_driver_get_proc("cuMemcpyDtoDAsync", 3020, (void **)&dtod));
    CUstream stream;
    pinstage_ring *ring;
    pinstage_devbuf *input, *output;
    TRY(pinstage_stream_create(&stream, PINSTAGE_STREAM_NON_BLOCKING));
    TRY(pinstage_ring_create(&ring, 4, 0));
    TRY(pinstage_ring_reserve(ring, ELEMS * sizeof(float))); /* pinned once, before the loop */
    TRY(pinstage_devbuf_alloc_f32(&input, ELEMS));
    TRY(pinstage_devbuf_alloc_f32(&output, ELEMS));

    pinstage_ticket previous = 0;
    for (unsigned frame = 0; frame < frames; frame++) {
        pinstage_ticket ticket;
        TRY(pinstage_ring_upload_with_async_f32(ring, input, ELEMS, stream, fill_frame, &frame));
        TRY(dtod(pinstage_devbuf_ptr(output), pinstage_devbuf_ptr(input), ELEMS * sizeof(float), stream));
        TRY(pinstage_ring_download_async_f32(ring, output, ELEMS, stream, &ticket));
        /* Frame `frame` is on its way; the CPU now finishes the one before. */
        if (previous && consume(ring, previous, frame - 1)) return 1;
        previous = ticket;
    }
    if (previous && consume(ring, previous, frames - 1)) return 1;

    pinstage_ring_stats st;
    pinstage_ring_get_stats(ring, &st);
    printf("%u frames of %zu bytes each way: %llu uploads, %llu downloads, %llu pinned allocation(s), "
           "%llu waits for a busy slot (%.3f ms)\n",
           frames, (size_t)ELEMS * sizeof(float), (unsigned long long)st.uploads, (unsigned long long)st.downloads,
           (unsigned long long)st.pinned_allocations, (unsigned long long)st.slot_waits, st.slot_wait_ns / 1e6);
    if (st.pinned_allocations != 4 || st.uploads != frames || st.downloads != frames) {
        fprintf(stderr, "ring_pipeline: expected one pinned allocation per slot and one copy each way a frame\n");
        return 1;
    }
    TRY(pinstage_ring_free(ring)); /* waits for anything still in flight */
    pinstage_devbuf_free(input);
    pinstage_devbuf_free(output);
    pinstage_stream_destroy(stream);
    pinstage_context_release(0);
    printf("ok\n");
    return 0;
}
