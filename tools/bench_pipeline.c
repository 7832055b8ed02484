/* SPDX-License-Identifier: MIT */
/* pinstage-bench --pipeline: what the ring buys a frame pipeline.
 *
 * Per frame: the CPU fills a 640x640x3 f32 frame (a fixed busy time, and a
 * stamp written every 1024 elements), uploads it, the device copies it into
 * an output tensor on the same stream (the "model"), the output is
 * downloaded and the CPU checks the stamps (the consume step).
 *  - sync: pinstage_buffer_upload_with / download_into, one frame at a time.
 *  - ring: pinstage_ring_upload_with_async / download_async; frame k's copies
 *    run while the CPU fills frame k+1, and frame k is consumed after frame
 *    k+1 is enqueued.
 * The fill time is a multiple of one frame's transfer time, measured first
 * as the median frame time of the sync pipeline with nothing to fill.
 * Rounds alternate the two pipelines; frames per second is frames / wall
 * time of the round, median over rounds. A wrong stamp fails the run. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

#define FRAME_ELEMS ((size_t)640 * 640 * 3)
#define STAMP_EVERY 1024

typedef int (*dtod_async_fn)(CUdeviceptr, CUdeviceptr, size_t, CUstream);

typedef struct {
    unsigned frame;
    double fill_us;
} frame_fill;

/* The CPU's work on a frame: busy for fill_us, stamps across the frame. */
static void fill_frame(float *dst, size_t n, void *user) {
    const frame_fill *f = user;
    double until = bench_now_us() + f->fill_us;
    for (size_t i = 0; i < n; i += STAMP_EVERY) dst[i] = (float)f->frame;
    while (bench_now_us() < until) {
    }
}

static void no_fill(float *dst, size_t n, void *user) {
    (void)dst, (void)n, (void)user;
}

/* The consume step: every stamp is the frame's. */
static int frame_ok(const float *view, unsigned frame) {
    for (size_t i = 0; i < FRAME_ELEMS; i += STAMP_EVERY)
        if (view[i] != (float)frame) return 0;
    return 1;
}

typedef struct {
    CUstream stream;
    dtod_async_fn dtod;
    pinstage_buffer *buffer;
    pinstage_ring *ring;
    pinstage_devbuf *input, *output;
    unsigned next_frame; /* distinct stamps across runs */
    const char *failed;  /* what went wrong, for the message */
} pipeline;

static pinstage_status model(pipeline *p) {
    return (pinstage_status)p->dtod(pinstage_devbuf_ptr(p->output), pinstage_devbuf_ptr(p->input),
                                    FRAME_ELEMS * sizeof(float), p->stream);
}

/* Runs `frames` frames one at a time; *us gets each frame's time if given. */
static pinstage_status run_sync(pipeline *p, unsigned frames, double fill_us, double *us) {
    for (unsigned k = 0; k < frames; k++) {
        double start = bench_now_us();
        frame_fill f = {p->next_frame++, fill_us};
        const float *view;
        pinstage_status s = pinstage_buffer_upload_with_f32(p->buffer, p->input, FRAME_ELEMS, p->stream, fill_frame, &f);
        if (!s) s = model(p);
        if (!s) s = pinstage_buffer_download_into_f32(p->buffer, p->output, FRAME_ELEMS, p->stream, &view);
        if (s) return s;
        if (!frame_ok(view, f.frame)) {
            p->failed = "the synchronous pipeline read a wrong frame";
            return PINSTAGE_ERROR_INVALID_VALUE;
        }
        if (us) us[k] = bench_now_us() - start;
    }
    return PINSTAGE_SUCCESS;
}

/* Frame k is consumed once frame k+1 is enqueued. */
static pinstage_status run_ring(pipeline *p, unsigned frames, double fill_us) {
    pinstage_ticket pending = 0;
    unsigned pending_frame = 0;
    for (unsigned k = 0; k <= frames; k++) {
        pinstage_ticket ticket = 0;
        frame_fill f = {p->next_frame, fill_us};
        if (k < frames) {
            p->next_frame++;
            pinstage_status s = pinstage_ring_upload_with_async_f32(p->ring, p->input, FRAME_ELEMS, p->stream, fill_frame, &f);
            if (!s) s = model(p);
            if (!s) s = pinstage_ring_download_async_f32(p->ring, p->output, FRAME_ELEMS, p->stream, &ticket);
            if (s) return s;
        }
        if (pending) {
            const void *view;
            pinstage_status s = pinstage_ring_wait(p->ring, pending, &view);
            if (s) return s;
            if (!frame_ok(view, pending_frame)) {
                p->failed = "the ring pipeline read a wrong frame";
                return PINSTAGE_ERROR_INVALID_VALUE;
            }
            if ((s = pinstage_ring_release(p->ring, pending))) return s;
        }
        pending = ticket;
        pending_frame = f.frame;
    }
    return PINSTAGE_SUCCESS;
}

typedef struct {
    double multiple, fill_us;
    double sync_fps[16], ring_fps[16];
    double sync_median, ring_median;
    uint64_t slot_waits;
} pipeline_result;

static pinstage_status measure_fill(pipeline *p, const pipeline_options *o, pipeline_result *r) {
    pinstage_status s;
    pinstage_ring_stats before, after;
    double sync[16], ring[16];
    pinstage_ring_get_stats(p->ring, &before);
    for (unsigned round = 0; round < o->rounds; round++) {
        for (int which = 0; which < 2; which++) {
            int ring_now = (round % 2) ^ which; /* alternate which goes first */
            double start = bench_now_us();
            s = ring_now ? run_ring(p, o->frames, r->fill_us) : run_sync(p, o->frames, r->fill_us, NULL);
            if (s) return s;
            double fps = o->frames / ((bench_now_us() - start) / 1e6);
            if (ring_now) r->ring_fps[round] = ring[round] = fps;
            else r->sync_fps[round] = sync[round] = fps;
        }
    }
    pinstage_ring_get_stats(p->ring, &after);
    r->slot_waits = after.slot_waits - before.slot_waits;
    r->sync_median = bench_median(sync, o->rounds);
    r->ring_median = bench_median(ring, o->rounds);
    return PINSTAGE_SUCCESS;
}

/* How long upload_with_async takes to return, against upload_with, the
 * same frame and a fill that writes nothing; the stream is idle (the ring
 * synchronized, untimed) before each call, so a slot is free and neither
 * call waits behind the other's copy. */
static pinstage_status measure_return(pipeline *p, unsigned reps, double *async_us, double *sync_us) {
    double *a = malloc(reps * sizeof *a), *b = malloc(reps * sizeof *b);
    pinstage_status s = a && b ? PINSTAGE_SUCCESS : PINSTAGE_ERROR_OUT_OF_MEMORY;
    for (unsigned i = 0; i < reps && !s; i++) {
        if ((s = pinstage_ring_synchronize(p->ring))) break;
        double start = bench_now_us();
        s = pinstage_ring_upload_with_async_f32(p->ring, p->input, FRAME_ELEMS, p->stream, no_fill, NULL);
        a[i] = bench_now_us() - start;
        if (s || (s = pinstage_ring_synchronize(p->ring))) break; /* the stream idle for both */
        start = bench_now_us();
        s = pinstage_buffer_upload_with_f32(p->buffer, p->input, FRAME_ELEMS, p->stream, no_fill, NULL);
        b[i] = bench_now_us() - start;
    }
    if (!s) s = pinstage_ring_synchronize(p->ring);
    if (!s) {
        *async_us = bench_median(a, reps);
        *sync_us = bench_median(b, reps);
    }
    free(a);
    free(b);
    return s;
}

int bench_pipeline(const pipeline_options *o, const bench_context *ctx, FILE *text, FILE *json) {
    pipeline p;
    memset(&p, 0, sizeof p);
    pipeline_result results[8];
    double transfer_us = 0, async_us = 0, sync_us = 0;
    const unsigned return_reps = 200;
    pinstage_status s = pinstage_driver_get_proc("cuMemcpyDtoDAsync", 3020, (void **)&p.dtod);
    if (!s) s = pinstage_stream_create(&p.stream, PINSTAGE_STREAM_NON_BLOCKING);
    if (!s) s = pinstage_buffer_create_with_capacity(&p.buffer, FRAME_ELEMS * sizeof(float));
    if (!s) s = pinstage_ring_create(&p.ring, o->slots, 0);
    if (!s) s = pinstage_ring_reserve(p.ring, FRAME_ELEMS * sizeof(float));
    if (!s) s = pinstage_devbuf_alloc_f32(&p.input, FRAME_ELEMS);
    if (!s) s = pinstage_devbuf_alloc_f32(&p.output, FRAME_ELEMS);

    /* Warm both, then one frame's transfer time with nothing to fill. */
    if (!s) s = run_sync(&p, 20, 0, NULL);
    if (!s) s = run_ring(&p, 20, 0);
    if (!s) {
        double *us = malloc(o->frames * sizeof *us);
        s = us ? run_sync(&p, o->frames, 0, us) : PINSTAGE_ERROR_OUT_OF_MEMORY;
        if (!s) transfer_us = bench_median(us, o->frames);
        free(us);
    }
    for (size_t i = 0; i < o->nfills && !s; i++) {
        results[i].multiple = o->fills[i];
        results[i].fill_us = o->fills[i] * transfer_us;
        if (!o->quiet) fprintf(stderr, "[pipeline] fill %.2fx transfer time (%.1f us)\n", o->fills[i], results[i].fill_us);
        s = measure_fill(&p, o, &results[i]);
    }
    if (!s) s = measure_return(&p, return_reps, &async_us, &sync_us);
    pinstage_ring_stats ring_stats;
    pinstage_ring_get_stats(p.ring, &ring_stats);
    if (s)
        fprintf(stderr, "pinstage-bench: pipeline: %s: %s\n", pinstage_status_name(s),
                p.failed ? p.failed : pinstage_last_error_message());
    pinstage_status freed = pinstage_ring_free(p.ring);
    if (!s && freed) {
        fprintf(stderr, "pinstage-bench: pipeline: %s\n", pinstage_last_error_message());
        s = freed;
    }
    pinstage_buffer_free(p.buffer);
    pinstage_devbuf_free(p.input);
    pinstage_devbuf_free(p.output);
    if (p.stream) pinstage_stream_destroy(p.stream);
    if (s) return 1;

    const size_t bytes = FRAME_ELEMS * sizeof(float);
    if (text) {
        bench_text_context(text, ctx);
        fprintf(text, "# method: frames / wall time of %u consecutive frames, median of %u rounds, the two pipelines\n"
                      "#   alternating; the fill busies the CPU for the time shown and stamps the frame\n", o->frames, o->rounds);
        fprintf(text, "# frame pipeline: 640x640x3 f32 (%zu bytes) up, device copy, down; %u frames x %u rounds, "
                      "ring of %u slots\n", bytes, o->frames, o->rounds, o->slots);
        fprintf(text, "# one frame's transfer time (sync, nothing to fill): %.1f us\n", transfer_us);
        fprintf(text, "%-10s %10s %12s %12s %8s %11s\n", "fill", "fill_us", "sync_fps", "ring_fps", "ring/sync",
                "slot_waits");
        for (size_t i = 0; i < o->nfills; i++) {
            char label[32];
            snprintf(label, sizeof label, "%gx", results[i].multiple);
            fprintf(text, "%-10s %10.1f %12.1f %12.1f %8.2fx %11llu\n", label, results[i].fill_us,
                    results[i].sync_median, results[i].ring_median, results[i].ring_median / results[i].sync_median,
                    (unsigned long long)results[i].slot_waits);
        }
        fprintf(text, "# upload_with_async returns in %.2f us, upload_with in %.2f us (%.1f%%), %zu bytes, "
                      "fill writing nothing, median of %u\n",
                async_us, sync_us, 100 * async_us / sync_us, bytes, return_reps);
    }
    if (json) {
        fprintf(json, "{\n  \"schema\": \"pinstage-bench-pipeline/1\",\n");
        bench_json_context(json, ctx, "frames / wall time of a round of consecutive frames; median over rounds; "
                                      "sync and ring rounds alternating");
        fprintf(json, ",\n  \"frame_bytes\": %zu,\n  \"frame_shape\": \"640x640x3 f32\",\n", bytes);
        fprintf(json, "  \"frames\": %u,\n  \"rounds\": %u,\n  \"ring_slots\": %u,\n  \"transfer_us\": %.3f,\n",
                o->frames, o->rounds, o->slots, transfer_us);
        fprintf(json, "  \"pipelines\": [\n");
        for (size_t i = 0; i < o->nfills; i++) {
            const pipeline_result *r = &results[i];
            fprintf(json, "    {\"fill_multiple\": %g, \"fill_us\": %.3f, \"sync_fps\": %.3f, \"ring_fps\": %.3f, "
                          "\"ratio\": %.4f, \"slot_waits\": %llu, \"sync_fps_rounds\": [",
                    r->multiple, r->fill_us, r->sync_median, r->ring_median, r->ring_median / r->sync_median,
                    (unsigned long long)r->slot_waits);
            for (unsigned k = 0; k < o->rounds; k++) fprintf(json, "%s%.3f", k ? ", " : "", r->sync_fps[k]);
            fprintf(json, "], \"ring_fps_rounds\": [");
            for (unsigned k = 0; k < o->rounds; k++) fprintf(json, "%s%.3f", k ? ", " : "", r->ring_fps[k]);
            fprintf(json, "]}%s\n", i + 1 < o->nfills ? "," : "");
        }
        fprintf(json, "  ],\n  \"call_return\": {\"bytes\": %zu, \"reps\": %u, \"upload_with_async_us\": %.3f, "
                      "\"upload_with_us\": %.3f, \"ratio\": %.4f},\n",
                bytes, return_reps, async_us, sync_us, async_us / sync_us);
        fprintf(json, "  \"ring_stats\": {\"uploads\": %llu, \"downloads\": %llu, \"slot_waits\": %llu, "
                      "\"slot_wait_ns\": %llu, \"pinned_allocations\": %llu, \"peak_pinned_bytes\": %zu}\n}\n",
                (unsigned long long)ring_stats.uploads, (unsigned long long)ring_stats.downloads,
                (unsigned long long)ring_stats.slot_waits, (unsigned long long)ring_stats.slot_wait_ns,
                (unsigned long long)ring_stats.pinned_allocations, ring_stats.peak_pinned_bytes);
    }
    return 0;
}
