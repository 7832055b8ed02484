/* SPDX-License-Identifier: MIT */
/* A frame pipeline, the seed's example made real.
 *
 * Per frame: write a preprocessed 640x640x3 f32 frame straight into pinned
 * memory (upload_with), let the device work on it on the same stream (here a
 * device-to-device copy into the "output" tensor and a memset of the input,
 * standing in for a model), read the output in place (download_into), check
 * it. One staging buffer serves both directions and pins memory once.
 *
 *   frame_pipeline [frames]      (default 100)
 *
 * Uses the current driver: PINSTAGE_DRIVER=.../libpinstage_emu.so runs it
 * without a GPU. */
#include <stdio.h>
#include <stdlib.h>

#include "pinstage.h"

#define ELEMS (3 * 640 * 640)

typedef int (*memcpy_dtod_async_fn)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
typedef int (*memset_d8_async_fn)(CUdeviceptr, unsigned char, size_t, CUstream);

static void fill_frame(float *dst, size_t n, void *user) {
    unsigned frame = *(const unsigned *)user;
    for (size_t i = 0; i < n; i++) dst[i] = (float)((i + frame) % 251) / 251.0f; /* normalised pixels */
}

#define TRY(call)                                                                            \
    do {                                                                                     \
        pinstage_status s_ = (call);                                                         \
        if (s_ != PINSTAGE_SUCCESS) {                                                        \
            fprintf(stderr, "frame_pipeline: %s: %s\n", pinstage_status_name(s_),            \
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
    memset_d8_async_fn memset_async;
    TRY(pinstage_driver_get_proc("cuMemcpyDtoDAsync", 3020, (void **)&dtod));
    TRY(pinstage_driver_get_proc("cuMemsetD8Async", 3020, (void **)&memset_async));

    CUstream stream;
    pinstage_buffer *staging;
    pinstage_devbuf *input, *output;
    TRY(pinstage_stream_create(&stream, PINSTAGE_STREAM_NON_BLOCKING));
    /* Pre-sized: the pinned allocation stays out of the frame loop. */
    TRY(pinstage_buffer_create_with_capacity(&staging, ELEMS * sizeof(float)));
    TRY(pinstage_devbuf_alloc_f32(&input, ELEMS));
    TRY(pinstage_devbuf_alloc_f32(&output, ELEMS));

    for (unsigned frame = 0; frame < frames; frame++) {
        TRY(pinstage_buffer_upload_with_f32(staging, input, ELEMS, stream, fill_frame, &frame));
        /* The "model": output = input, then input is cleared, all queued on stream. */
        TRY(dtod(pinstage_devbuf_ptr(output), pinstage_devbuf_ptr(input), ELEMS * sizeof(float), stream));
        TRY(memset_async(pinstage_devbuf_ptr(input), 0, ELEMS * sizeof(float), stream));
        const float *result;
        TRY(pinstage_buffer_download_into_f32(staging, output, ELEMS, stream, &result));
        for (size_t i = 0; i < ELEMS; i++)
            if (result[i] != (float)((i + frame) % 251) / 251.0f) {
                fprintf(stderr, "frame_pipeline: frame %u element %zu is %g\n", frame, i, result[i]);
                return 1;
            }
    }

    pinstage_stats st;
    pinstage_buffer_stats(staging, &st);
    printf("%u frames of %zu bytes each way: %llu staged transfers, %llu pinned allocation(s), "
           "%.3f ms spent pinning\n",
           frames, (size_t)ELEMS * sizeof(float), (unsigned long long)st.staged_transfers,
           (unsigned long long)st.pinned_allocations, st.pin_time_ns / 1e6);
    if (st.pinned_allocations != 1 || st.staged_transfers != 2ull * frames) {
        fprintf(stderr, "frame_pipeline: expected one pinned allocation and two transfers a frame\n");
        return 1;
    }
    pinstage_devbuf_free(input);
    pinstage_devbuf_free(output);
    pinstage_buffer_free(staging);
    pinstage_stream_destroy(stream);
    pinstage_context_release(0);
    printf("ok\n");
    return 0;
}
