/* SPDX-License-Identifier: MIT */
/* The copy engine: chunks through event-guarded slots, host copies shared
 * by the pool's threads while the calling thread makes the driver calls.
 *
 * Slots: chunk k lives at offset (k % PS_ENGINE_SLOTS) * chunk of the stage.
 * A slot is written (upload) or read (download) again only after the event
 * recorded behind its previous DMA has completed, so no DMA ever reads or
 * writes bytes still in use. The call ends by waiting for the event behind
 * the last DMA; on any failure it joins the host copy in flight and drains
 * the stream before returning, or reports that it could not.
 *
 * Overlap: uploads post the host copy of chunk k+1 to the pool, then enqueue
 * the DMA of chunk k, then join; downloads post the copy-out of chunk k,
 * enqueue the DMA of chunk k+3 into the slot freed by chunk k-1, then join.
 * The caller's driver calls (a few microseconds each) thus hide behind the
 * workers' copies.
 *
 * Chunk sizes ramp up from 1/16 of the chunk at the start and down again at
 * the end of a long transfer: the first chunk's host copy (uploads) or DMA
 * (downloads) and the last chunk's DMA or copy-out overlap nothing, so
 * making them small shortens the pipeline's fill and drain. */
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "copy.h"
#include "engine.h"
#include "status.h"

/* Below this, a piece of a host copy is not worth another thread. */
#define MIN_PIECE ((size_t)8 << 10)
/* Smallest first chunk of a ramp. */
#define MIN_RAMP ((size_t)256 << 10)
/* Chunks a ramped schedule may have; longer schedules are uniform. */
#define MAX_SCHEDULE 64

static size_t chunk_bytes(size_t bytes, const ps_plan *plan) {
    size_t chunk = plan->chunk ? plan->chunk : bytes;
    if (chunk > PS_ENGINE_MAX_CHUNK) chunk = PS_ENGINE_MAX_CHUNK;
    return chunk < bytes ? chunk : bytes;
}

size_t ps_engine_footprint(size_t bytes, const ps_plan *plan) {
    size_t chunk = chunk_bytes(bytes, plan);
    size_t ring = chunk * PS_ENGINE_SLOTS;
    return bytes < ring ? bytes : ring;
}

/* ---- The chunk schedule ------------------------------------------------------------ */

typedef struct {
    size_t bytes, chunk, n;
    int ramped;
    size_t offset[MAX_SCHEDULE + 1]; /* when ramped */
} schedule;

static void make_schedule(schedule *s, size_t bytes, size_t chunk) {
    s->bytes = bytes;
    s->chunk = chunk;
    s->ramped = 0;
    s->n = (bytes + chunk - 1) / chunk;
    size_t first = chunk / 16 < MIN_RAMP ? MIN_RAMP : chunk / 16;
    /* Only where every slot is used anyway: a ramp makes more chunks than
     * bytes / chunk, and the footprint must stay what ps_engine_footprint
     * says. */
    if (bytes < PS_ENGINE_SLOTS * chunk || first >= chunk) return;
    size_t front[MAX_SCHEDULE], back[MAX_SCHEDULE], nf = 0, nb = 0, rest = bytes;
    for (size_t size = first; rest && size < chunk && nf < 16; size *= 2) {
        rest -= front[nf++] = size < rest ? size : rest;
        if (rest) rest -= back[nb++] = size < rest ? size : rest;
    }
    size_t middle = (rest + chunk - 1) / chunk;
    if (nf + nb + middle > MAX_SCHEDULE) return;
    size_t k = 0, at = 0;
    for (size_t i = 0; i < nf; i++) s->offset[k++] = at, at += front[i];
    for (size_t i = 0; i < middle; i++) s->offset[k++] = at, at += chunk < rest - i * chunk ? chunk : rest - i * chunk;
    for (size_t i = nb; i-- > 0;) s->offset[k++] = at, at += back[i];
    s->offset[k] = at;
    s->n = k;
    s->ramped = 1;
}

static size_t chunk_offset(const schedule *s, size_t k) { return s->ramped ? s->offset[k] : k * s->chunk; }

static size_t chunk_len(const schedule *s, size_t k) {
    if (s->ramped) return s->offset[k + 1] - s->offset[k];
    size_t at = k * s->chunk;
    return s->bytes - at < s->chunk ? s->bytes - at : s->chunk;
}

/* ---- Host copies ------------------------------------------------------------------- */

/* Non-temporal stores for the large pieces of an upload: the pinned bytes
 * are read next by the DMA engine, not by this core, so caching them only
 * costs read-for-ownership traffic. In one grid of settings on the H200
 * machine the best 64 MiB upload took 1507 us with them and 1691 us without;
 * downloads, whose destination the program reads next, were faster with
 * plain stores. */
static void copy_stream(unsigned char *dst, const unsigned char *src, size_t len) {
#if defined(__SSE2__)
    size_t head = (16 - ((uintptr_t)dst & 15)) & 15;
    if (head > len) head = len;
    memcpy(dst, src, head);
    dst += head, src += head, len -= head;
    size_t body = len & ~(size_t)63;
    for (size_t i = 0; i < body; i += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)(src + i));
        __m128i b = _mm_loadu_si128((const __m128i *)(src + i + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(src + i + 32));
        __m128i d = _mm_loadu_si128((const __m128i *)(src + i + 48));
        _mm_stream_si128((__m128i *)(dst + i), a);
        _mm_stream_si128((__m128i *)(dst + i + 16), b);
        _mm_stream_si128((__m128i *)(dst + i + 32), c);
        _mm_stream_si128((__m128i *)(dst + i + 48), d);
    }
    memcpy(dst + body, src + body, len - body);
    /* Streaming stores are weakly ordered: fence before the piece counts as done. */
    _mm_sfence();
#else
    memcpy(dst, src, len);
#endif
}

/* One host copy split into pieces for the pool. */
typedef struct {
    unsigned char *dst;
    const unsigned char *src;
    size_t len;
    unsigned pieces;
    int stream; /* non-temporal stores */
} split_copy;

static size_t piece_start(const split_copy *c, unsigned i) {
    if (i >= c->pieces) return c->len;
    /* Cache-line boundaries, so no two threads write the same line. */
    return (size_t)((unsigned long long)c->len * i / c->pieces) & ~(size_t)63;
}

static void copy_piece(void *arg, unsigned i) {
    const split_copy *c = arg;
    size_t a = piece_start(c, i), b = piece_start(c, i + 1);
    if (b <= a) return;
    if (c->stream)
        copy_stream(c->dst + a, c->src + a, b - a);
    else
        memcpy(c->dst + a, c->src + a, b - a);
}

/* Pieces at or above this use streaming stores. */
#define STREAM_MIN_PIECE ((size_t)64 << 10)

static void host_copy_post(ps_pool *pool, ps_job *job, split_copy *c, unsigned threads, int stream, void *dst,
                           const void *src, size_t len) {
    size_t most = len / MIN_PIECE;
    unsigned pieces = threads;
    if (pieces > most) pieces = most ? (unsigned)most : 1;
    if (pieces > PS_POOL_MAX_PIECES) pieces = PS_POOL_MAX_PIECES;
    *c = (split_copy){dst, src, len, pieces, stream && len / pieces >= STREAM_MIN_PIECE};
    ps_pool_post(pool, job, pieces, copy_piece, c);
}

static unsigned plan_threads(ps_pool *pool, const ps_plan *plan) {
    unsigned all = ps_pool_workers(pool) + 1;
    return plan->threads && plan->threads < all ? plan->threads : all;
}

void ps_engine_copy_in(ps_pool *pool, void *pinned, const void *src, size_t len) {
    split_copy copy;
    ps_job job;
    host_copy_post(pool, &job, &copy, ps_pool_workers(pool) + 1, 1, pinned, src, len);
    ps_pool_join(pool, &job);
}

/* ---- Uploads ------------------------------------------------------------------------- */

pinstage_status ps_engine_h2d(const ps_driver *d, ps_pool *pool, const ps_stage *stage, CUdeviceptr dst,
                              const void *src, size_t bytes, CUstream stream, const ps_plan *plan,
                              int *in_flight, const char *caller) {
    const unsigned char *from = src;
    schedule sch;
    make_schedule(&sch, bytes, chunk_bytes(bytes, plan));
    size_t n = sch.n, chunk = sch.chunk;
    unsigned threads = plan_threads(pool, plan);
    pinstage_status s = PINSTAGE_SUCCESS;
    split_copy copy;
    ps_job job;
    int enqueued = 0;
    *in_flight = 0;

    host_copy_post(pool, &job, &copy, threads, 1, stage->pinned, from, chunk_len(&sch, 0));
    ps_pool_join(pool, &job);
    for (size_t k = 0; k < n && !s; k++) {
        size_t slot = k % PS_ENGINE_SLOTS;
        /* Chunk k+1's host copy runs while chunk k's DMA is enqueued, once
         * the DMA that last read its slot has finished. */
        if (k + 1 < n) {
            size_t next = (k + 1) % PS_ENGINE_SLOTS;
            if (k + 1 >= PS_ENGINE_SLOTS && (s = ps_wait_event(d, stage->events[next], chunk, caller))) break;
            host_copy_post(pool, &job, &copy, threads, 1, stage->pinned + next * chunk, from + chunk_offset(&sch, k + 1),
                           chunk_len(&sch, k + 1));
        }
        s = ps_enqueue_h2d(d, dst + chunk_offset(&sch, k), stage->pinned + slot * chunk, chunk_len(&sch, k), stream,
                           caller);
        enqueued |= !s;
        /* An event only where a later chunk waits for this slot, and at the end. */
        if (!s && (k + PS_ENGINE_SLOTS < n || k + 1 == n)) s = ps_record(d, stage->events[slot], stream, caller);
        if (k + 1 < n) ps_pool_join(pool, &job);
    }
    /* Landed: the last DMA's event follows every earlier one on the stream. */
    if (!s) s = ps_wait_event(d, stage->events[(n - 1) % PS_ENGINE_SLOTS], ps_engine_footprint(bytes, plan), caller);
    if (s && enqueued) *in_flight = ps_drain(d, stage->events[0], stream);
    return s;
}

/* ---- Downloads ------------------------------------------------------------------------ */

/* Enqueues chunk k's DMA into its slot and records the slot's event. */
static pinstage_status d2h_chunk(const ps_driver *d, const ps_stage *stage, const schedule *sch, CUdeviceptr src,
                                 size_t k, CUstream stream, const char *caller) {
    size_t slot = k % PS_ENGINE_SLOTS;
    pinstage_status s = ps_enqueue_d2h(d, stage->pinned + slot * sch->chunk, src + chunk_offset(sch, k),
                                       chunk_len(sch, k), stream, caller);
    return s ? s : ps_record(d, stage->events[slot], stream, caller);
}

pinstage_status ps_engine_d2h(const ps_driver *d, ps_pool *pool, const ps_stage *stage, void *dst,
                              CUdeviceptr src, size_t bytes, CUstream stream, const ps_plan *plan,
                              int *in_flight, const char *caller) {
    unsigned char *to = dst;
    schedule sch;
    make_schedule(&sch, bytes, chunk_bytes(bytes, plan));
    size_t n = sch.n, chunk = sch.chunk;
    const size_t ahead = PS_ENGINE_SLOTS - 1; /* DMAs queued ahead of the copy-out */
    unsigned threads = plan_threads(pool, plan);
    pinstage_status s = PINSTAGE_SUCCESS;
    split_copy copy;
    ps_job job;
    *in_flight = 0;

    for (size_t k = 0; k < n && k < ahead && !s; k++) s = d2h_chunk(d, stage, &sch, src, k, stream, caller);
    for (size_t k = 0; k < n && !s; k++) {
        size_t slot = k % PS_ENGINE_SLOTS;
        if ((s = ps_wait_event(d, stage->events[slot], chunk_len(&sch, k), caller))) break;
        host_copy_post(pool, &job, &copy, threads, 0, to + chunk_offset(&sch, k), stage->pinned + slot * chunk,
                       chunk_len(&sch, k));
        /* Into the slot chunk k-1 was copied out of. */
        if (k + ahead < n) s = d2h_chunk(d, stage, &sch, src, k + ahead, stream, caller);
        ps_pool_join(pool, &job);
    }
    if (s) *in_flight = ps_drain(d, stage->events[0], stream);
    return s;
}
