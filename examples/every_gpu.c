/* SPDX-License-Identifier: MIT */
/* Every GPU of the host at once: one thread per GPU, each with a staging
 * buffer bound to its GPU (its context, its NUMA node), uploading frames from
 * ordinary memory and reading results back, every byte checked; then where
 * each buffer's pinned memory and copy threads ended up.
 *
 *   every_gpu [frames]      (default 100)
 *
 * Uses the current driver: PINSTAGE_DRIVER=.../libpinstage_emu.so with
 * PINSTAGE_EMU_DEVICES=4 runs it without a GPU. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pinstage.h"

#define ELEMS (3 * 640 * 640)
#define MAX_GPUS 16

typedef struct {
    int device;
    unsigned frames;
    unsigned long mismatches;
    pinstage_placement where;
    pinstage_stats stats;
    pinstage_status status;
    char error[256];
} gpu_worker;

#define TRY(call)                                                                                   \
    do {                                                                                            \
        if ((w->status = (call)) != PINSTAGE_SUCCESS) {                                             \
            snprintf(w->error, sizeof w->error, "%s", pinstage_last_error_message());               \
            goto out;                                                                               \
        }                                                                                           \
    } while (0)

static void *run_gpu(void *arg) {
    gpu_worker *w = arg;
    pinstage_binding gpu = pinstage_binding_for_device(w->device);
    pinstage_buffer *staging = NULL;
    pinstage_devbuf *tensor = NULL;
    CUstream stream = NULL;
    float *frame = malloc(ELEMS * sizeof *frame), *back = malloc(ELEMS * sizeof *back);
    if (!frame || !back) {
        w->status = PINSTAGE_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    /* The stream and device memory are made in the GPU's context; the buffer
     * switches to it by itself on every call. */
    TRY(pinstage_context_init(w->device));
    TRY(pinstage_stream_create(&stream, PINSTAGE_STREAM_NON_BLOCKING));
    TRY(pinstage_devbuf_alloc_f32(&tensor, ELEMS));
    TRY(pinstage_buffer_create(&staging));
    TRY(pinstage_buffer_bind(staging, &gpu));
    for (unsigned f = 0; f < w->frames; f++) {
        for (size_t i = 0; i < ELEMS; i++) frame[i] = (float)((i + f + (size_t)w->device * 7) % 251);
        TRY(pinstage_buffer_upload_f32(staging, tensor, frame, ELEMS, stream));
        TRY(pinstage_buffer_download_f32(staging, back, ELEMS, tensor, stream));
        w->mismatches += memcmp(frame, back, ELEMS * sizeof *frame) != 0;
    }
    pinstage_buffer_stats(staging, &w->stats);
    TRY(pinstage_buffer_get_placement(staging, &w->where));
out:
    if (w->status && !*w->error) snprintf(w->error, sizeof w->error, "out of host memory");
    pinstage_buffer_free(staging);
    pinstage_devbuf_free(tensor);
    pinstage_stream_destroy(stream);
    pinstage_context_release(w->device);
    free(frame);
    free(back);
    return NULL;
}

int main(int argc, char **argv) {
    unsigned frames = argc > 1 ? (unsigned)strtoul(argv[1], NULL, 10) : 100;
    pinstage_driver_info info;
    int count = 0;
    if (pinstage_driver_get_info(&info) || pinstage_device_count(&count)) {
        fprintf(stderr, "every_gpu: %s\n", pinstage_last_error_message());
        return 1;
    }
    if (info.emulated) printf("note: running on the emulated driver (%s), not a GPU\n", info.path);
    if (count > MAX_GPUS) count = MAX_GPUS;
    printf("%d GPU(s), %d NUMA node(s) on this host\n", count, pinstage_numa_node_count());
    gpu_worker workers[MAX_GPUS];
    pthread_t threads[MAX_GPUS];
    memset(workers, 0, sizeof workers);
    for (int d = 0; d < count; d++) {
        workers[d].device = d;
        workers[d].frames = frames;
        if (pthread_create(&threads[d], NULL, run_gpu, &workers[d])) return 1;
    }
    int failed = 0;
    for (int d = 0; d < count; d++) {
        pthread_join(threads[d], NULL);
        const gpu_worker *w = &workers[d];
        if (w->status || w->mismatches) {
            fprintf(stderr, "every_gpu: GPU %d: %s, %lu mismatching frames\n", d,
                    w->status ? w->error : "transfers done", w->mismatches);
            failed = 1;
            continue;
        }
        printf("GPU %d: %u frames each way, %llu staged (%llu by the copy engine), %llu pinned allocation(s); GPU on "
               "node %d, pinned memory placed on %d and found on %d, copy threads on %d\n",
               d, frames, (unsigned long long)w->stats.staged_transfers, (unsigned long long)w->stats.engine_transfers,
               (unsigned long long)w->stats.pinned_allocations, w->where.device_node, w->where.memory_node,
               w->where.memory_found, w->where.worker_node);
    }
    return failed;
}
