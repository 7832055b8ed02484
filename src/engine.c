/* SPDX-License-Identifier: MIT */
/* The copy engine: chunks through event-guarded slots, host copies shared
 * by the pool's threads while the calling thread makes the driver calls.
 *
 * Slots: chunk k lives at offset (k % slots) * chunk of the stage: 4 slots
 * of at most 8 MiB for uploads, 8 of at most 2 MiB for downloads (policy.h).
 * A slot is written (upload) or read (download) again only after the event
 * recorded behind its previous DMA has completed, so no DMA ever reads or
 * writes bytes still in use. The call ends by waiting for the event behind
 * the last DMA; on any failure it joins the host copy in flight and drains
 * the stream before returning, or reports that it could not.
 *
 * Flow: a transfer's host copy is one pool job whose blocks (a few to a few
 * hundred KiB) any running thread may claim, the calling thread included.
 * Uploads open a chunk's blocks once the DMA that last read its slot has
 * landed and enqueue the chunk's DMA the moment its last block is done;
 * downloads open a chunk's blocks once its DMA has landed and enqueue the
 * DMA into a slot the moment the chunk before has been copied out of it.
 * No barrier stands between chunks: threads copy chunk k+1..k+3 while chunk
 * k waits for its DMA or for a block a descheduled thread holds, and the
 * calling thread makes the driver calls between blocks of its own.
 *
 * Chunk sizes ramp up from 1/16 of the chunk (at least 256 KiB) at the
 * start and down again at the end of a transfer that goes round the ring:
 * the first chunk's host copy (uploads) or DMA (downloads) and the last
 * chunk's DMA or copy-out overlap nothing, so making them small shortens
 * the pipeline's fill and drain.
 *
 * A transfer shorter than the ring (bytes < slots * chunk) fits
 * the stage whole: each chunk has its own place at its own offset and no
 * slot is reused, so an upload opens every chunk at once and records one
 * event. A download that fits ramps too (each chunk its own place, the
 * events reused once seen): on the H200 machine a 16 MiB download in 8 MiB
 * chunks took 445-466 us with the ramp against 573-604 us without (three
 * runs each of `pinstage-bench --direction d2h --sizes 10M,12M,16M,18M`),
 * 12 MiB in 4 MiB chunks 318-366 against 368-439 us. */
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "copy.h"
#include "engine.h"
#include "status.h"
#include "trace.h"

/* Blocks of a host copy: below MIN_BLOCK one is not worth another thread;
 * above MAX_BLOCK a thread that loses its CPU holds too much of a chunk. */
#define MIN_BLOCK ((size_t)8 << 10)
#define MAX_BLOCK ((size_t)256 << 10)
/* At most this many chunks per transfer (a longer schedule's chunks grow). */
#define MAX_CHUNKS 4096u
/* Smallest first chunk of a ramp. */
#define MIN_RAMP ((size_t)256 << 10)
/* Chunks a ramped schedule may have; longer schedules are uniform. */
#define MAX_SCHEDULE 64
/* Copy counters of a flow: one per slot, or one per chunk of a transfer
 * that fits the stage (at most MAX_SCHEDULE chunks, ramped or not). */
#define COUNTERS MAX_SCHEDULE

static inline void cpu_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

_Static_assert(PS_ENGINE_SLOTS <= PS_ENGINE_MAX_SLOTS && PS_ENGINE_D2H_SLOTS <= PS_ENGINE_MAX_SLOTS,
               "a buffer makes PS_ENGINE_MAX_SLOTS events, one a slot");
_Static_assert(PS_ENGINE_MAX_SLOTS <= COUNTERS, "a ring's chunks each need a copy counter");
_Static_assert(PS_ENGINE_D2H_SLOTS * PS_ENGINE_D2H_MAX_CHUNK <= PS_ENGINE_MAX_FOOTPRINT,
               "PS_ENGINE_MAX_FOOTPRINT, the uploads' ring, holds the downloads' ring too");

static unsigned slots_for(ps_direction dir) { return dir == PS_D2H ? PS_ENGINE_D2H_SLOTS : PS_ENGINE_SLOTS; }

/* The plan's chunk, within the direction's largest (policy.h), and large
 * enough that the transfer needs at most MAX_CHUNKS. */
static size_t chunk_bytes(ps_direction dir, size_t bytes, const ps_plan *plan) {
    size_t most = ps_engine_max_chunk(dir);
    size_t chunk = plan->chunk ? plan->chunk : bytes;
    if (chunk > most) chunk = most;
    size_t fewest = (bytes + MAX_CHUNKS - 1) / MAX_CHUNKS;
    if (chunk < fewest) chunk = (fewest + 4095) / 4096 * 4096;
    return chunk < bytes ? chunk : bytes;
}

ps_plan ps_engine_plan_shared(ps_plan plan, ps_direction dir, size_t bytes, unsigned others) {
    if (!others || dir != PS_D2H || plan.route != PINSTAGE_ROUTE_ENGINE) return plan;
    if (chunk_bytes(dir, bytes, &plan) < PS_ENGINE_SHARED_D2H_CHUNK && bytes > PS_ENGINE_SHARED_D2H_CHUNK)
        plan.chunk = PS_ENGINE_SHARED_D2H_CHUNK;
    return plan;
}

size_t ps_engine_footprint(ps_direction dir, size_t bytes, const ps_plan *plan) {
    size_t chunk = chunk_bytes(dir, bytes, plan);
    size_t ring = chunk * slots_for(dir);
    return bytes < ring ? bytes : ring;
}

/* ---- The chunk schedule ------------------------------------------------------------ */

typedef struct {
    size_t bytes, chunk, n;
    unsigned slots; /* of the ring: slots_for(direction) */
    int ramped;
    int fits;                        /* chunk k at its own offset, no slot reused */
    size_t offset[MAX_SCHEDULE + 1]; /* when ramped */
} schedule;

static void make_schedule(schedule *s, ps_direction dir, size_t bytes, size_t chunk, int ramp_if_fits) {
    s->bytes = bytes;
    s->chunk = chunk;
    s->slots = slots_for(dir);
    s->ramped = 0;
    s->n = (bytes + chunk - 1) / chunk;
    /* The footprint is what ps_engine_footprint says either way: `bytes`
     * when they fit, the ring's chunks otherwise (a ramp's chunks are no
     * longer than `chunk`). */
    s->fits = bytes < s->slots * chunk;
    size_t first = chunk / 16 < MIN_RAMP ? MIN_RAMP : chunk / 16;
    if (s->n < 2 || first >= chunk || (s->fits && !ramp_if_fits)) return;
    size_t front[MAX_SCHEDULE], back[MAX_SCHEDULE], nf = 0, nb = 0, rest = bytes;
    /* A step of the ramp at each end while the rest still holds both. */
    for (size_t size = first; size < chunk && rest >= 2 * size && nf < 16; size *= 2) {
        front[nf++] = back[nb++] = size;
        rest -= 2 * size;
    }
    if (!nf) return;
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

/* Where chunk k lives in the stage. */
static size_t chunk_place(const schedule *s, size_t k) {
    return s->fits ? chunk_offset(s, k) : (k % s->slots) * s->chunk;
}

/* Which copy counter counts chunk k's blocks. */
static size_t chunk_counter(const schedule *s, size_t k) { return s->fits ? k : k % s->slots; }

/* ---- Host copies ------------------------------------------------------------------- */

/* Non-temporal stores for the large blocks of an upload: the pinned bytes
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
    /* Streaming stores are weakly ordered: fence before the block counts as done. */
    _mm_sfence();
#else
    memcpy(dst, src, len);
#endif
}

/* Blocks at or above this use streaming stores (uploads). */
#define STREAM_MIN_BLOCK ((size_t)64 << 10)

static void copy_into_pinned(unsigned char *dst, const unsigned char *src, size_t len) {
    if (len >= STREAM_MIN_BLOCK)
        copy_stream(dst, src, len);
    else
        memcpy(dst, src, len);
}

/* Where block i of nb starts in a run of len bytes: cache-line boundaries,
 * so no two threads write the same line. */
static size_t block_start(size_t len, size_t i, size_t nb) {
    if (i >= nb) return len;
    return (size_t)((unsigned long long)len * i / nb) & ~(size_t)63;
}

static size_t blocks_for(size_t len, size_t grain) { return len ? (len + grain - 1) / grain : 1; }

/* The block size of a transfer of `bytes` in `chunks` chunks of up to
 * `chunk` (ps_engine_copy_in: one piece, no chunk events): two blocks per
 * thread per chunk, within [MIN_BLOCK, MAX_BLOCK], and few enough blocks
 * for one job. `threads` are
 * those the job got, not those the plan asked for: each block costs a
 * claim and two counts on lines every thread writes (0.7 us a block
 * between a worker's blocks of 9.6 KiB in a trace with 3 workers), so
 * with fewer threads the blocks grow. */
static size_t grain_for(size_t chunk, size_t bytes, size_t chunks, unsigned threads) {
    size_t grain = chunk / (2 * (size_t)threads);
    if (grain < MIN_BLOCK) grain = MIN_BLOCK;
    if (grain > MAX_BLOCK) grain = MAX_BLOCK;
    while (bytes / grain + chunks + 1 > PS_JOB_MAX_BLOCKS - 16) grain *= 2;
    return grain;
}

/* One transfer's host copy as one job: chunk k's blocks, the chunks in
 * order; per counter (chunk_counter), how many blocks of its chunk are done. */
typedef struct {
    const schedule *sch;
    unsigned char *pinned;
    unsigned char *host;
    int h2d;
    uint32_t trace;
    int timed;                 /* blocks add their time to copy_ns */
    _Atomic uint64_t copy_ns;
    size_t grain;
    size_t full_blocks; /* blocks of a chunk of sch->chunk bytes (uniform schedules) */
    unsigned first[MAX_SCHEDULE + 2]; /* ramped schedules: chunk k's first block */
    size_t total;
    _Atomic unsigned copied[COUNTERS];
} flow;

static size_t chunk_blocks(const flow *f, size_t k) { return blocks_for(chunk_len(f->sch, k), f->grain); }

/* The first block of chunk k (k == n: the total). */
static size_t first_block(const flow *f, size_t k) {
    if (f->sch->ramped) return f->first[k];
    return k < f->sch->n ? k * f->full_blocks : f->total;
}

static size_t chunk_of_block(const flow *f, size_t b) {
    if (!f->sch->ramped) {
        size_t k = b / f->full_blocks;
        return k < f->sch->n ? k : f->sch->n - 1;
    }
    size_t lo = 0, hi = f->sch->n; /* first[lo] <= b < first[hi] */
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (f->first[mid] <= b)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

static void flow_init(flow *f, const schedule *sch, unsigned char *pinned, const void *host, int h2d,
                      unsigned threads) {
    f->sch = sch;
    f->pinned = pinned;
    f->host = (unsigned char *)host;
    f->h2d = h2d;
    f->trace = 0;
    f->timed = 0;
    atomic_init(&f->copy_ns, 0);
    f->grain = grain_for(sch->chunk, sch->bytes, sch->n, threads);
    f->full_blocks = blocks_for(sch->chunk, f->grain);
    if (sch->ramped) {
        f->first[0] = 0;
        for (size_t k = 0; k < sch->n; k++) f->first[k + 1] = f->first[k] + (unsigned)chunk_blocks(f, k);
        f->total = f->first[sch->n];
    } else {
        f->total = (sch->n - 1) * f->full_blocks + chunk_blocks(f, sch->n - 1);
    }
    for (size_t i = 0; i < COUNTERS; i++) atomic_init(&f->copied[i], 0);
}

static void flow_block(void *arg, size_t b) {
    flow *f = arg;
    size_t k = chunk_of_block(f, b), nb = chunk_blocks(f, k), i = b - first_block(f, k);
    size_t len = chunk_len(f->sch, k), from = block_start(len, i, nb), to = block_start(len, i + 1, nb);
    unsigned char *slot = f->pinned + chunk_place(f->sch, k);
    unsigned char *host = f->host + chunk_offset(f->sch, k);
    uint64_t start = f->trace || f->timed ? ps_trace_now() : 0;
    if (f->h2d)
        copy_into_pinned(slot + from, host + from, to - from);
    else
        memcpy(host + from, slot + from, to - from);
    if (start) {
        uint64_t end = ps_trace_now();
        if (f->trace) ps_trace_block(f->trace, (unsigned)k, start, end);
        /* Relaxed: the block's count below is released, and the owner
         * acquires every count before it reads the sum. */
        if (f->timed) atomic_fetch_add_explicit(&f->copy_ns, end - start, memory_order_relaxed);
    }
    atomic_fetch_add_explicit(&f->copied[chunk_counter(f->sch, k)], 1, memory_order_release);
}

/* Whether chunk k's blocks are all done. */
static int chunk_copied(flow *f, size_t k) {
    return atomic_load_explicit(&f->copied[chunk_counter(f->sch, k)], memory_order_acquire) == chunk_blocks(f, k);
}

/* A slot's counter starts counting the next chunk in the slot. No thread
 * touches it now: the chunk before is done and the next one not open. */
static void recount(flow *f, size_t k) {
    atomic_store_explicit(&f->copied[chunk_counter(f->sch, k)], 0, memory_order_relaxed);
}

/* Whether the caller's loop asks the driver about an event now. Alone it
 * asks every time round; beside other transfers once in 16 idle rounds
 * (about a microsecond of pauses): 8 threads polling cuEventQuery without
 * a pause held the lock their DMAs and queries take too. */
static int may_query(ps_pool *pool, unsigned *idle) {
    if (ps_pool_callers(pool) <= 1) return 1;
    return (*idle)++ % 16 == 0;
}

/* After ps_job_finish, which saw every block's count. */
static void fill_report(ps_engine_report *report, const ps_job *job, flow *f, uint64_t began) {
    report->threads = job->seats + 1;
    report->copy_ns = atomic_load_explicit(&f->copy_ns, memory_order_relaxed);
    report->wall_ns = ps_trace_now() - began;
}

unsigned ps_engine_threads(ps_pool *pool, const ps_plan *plan) {
    unsigned all = ps_pool_workers(pool) + 1;
    return plan->threads && plan->threads < all ? plan->threads : all;
}

typedef struct {
    unsigned char *dst;
    const unsigned char *src;
    size_t len, nb;
} plain_copy;

static void plain_block(void *arg, size_t i) {
    const plain_copy *c = arg;
    size_t from = block_start(c->len, i, c->nb), to = block_start(c->len, i + 1, c->nb);
    copy_into_pinned(c->dst + from, c->src + from, to - from);
}

void ps_engine_copy_in(ps_pool *pool, void *pinned, const void *src, size_t len) {
    ps_job job;
    /* Blocks for the threads the copy gets, as the transfers' (ps_engine_h2d):
     * cut for every worker while most CPUs are busy elsewhere, a seated
     * thread would go between many small blocks. */
    ps_job_enter(pool, &job, ps_pool_workers(pool));
    plain_copy c = {pinned, src, len, blocks_for(len, grain_for(len, len, 0, job.seats + 1))};
    ps_job_post(&job, c.nb, c.nb, plain_block, &c);
    ps_job_finish(&job);
}

/* ---- Uploads ------------------------------------------------------------------------- */

pinstage_status ps_engine_h2d(const ps_driver *d, ps_pool *pool, const ps_stage *stage, CUdeviceptr dst,
                              const void *src, size_t bytes, CUstream stream, const ps_plan *plan,
                              int *in_flight, ps_engine_report *report, const char *caller) {
    schedule sch;
    /* An upload that fits keeps its chunks: ramped (seven chunks instead
     * of two), a 4.7 MiB upload took 133-136 us against 128-129 us, 6 MiB
     * 167-173 against 160-163 us (H200 machine, three runs each of
     * `pinstage-bench --sizes 2M,4915200,6M,12M,64M`), though its first
     * DMA started sooner. */
    make_schedule(&sch, PS_H2D, bytes, chunk_bytes(PS_H2D, bytes, plan), 0);
    size_t n = sch.n;
    unsigned threads = ps_engine_threads(pool, plan);
    pinstage_status s = PINSTAGE_SUCCESS;
    flow f;
    ps_job job;
    int enqueued = 0;
    *in_flight = 0;
    uint64_t began = report ? ps_trace_now() : 0;

    ps_job_enter(pool, &job, threads - 1);
    flow_init(&f, &sch, stage->pinned, src, 1, job.seats + 1);
    f.timed = report != NULL;
    size_t opened = sch.fits || n < sch.slots ? n : sch.slots;
    unsigned idle = 0;
    f.trace = ps_trace_begin(0, bytes, (unsigned)n);
    for (size_t k = 0; k < opened; k++) ps_trace_chunk(f.trace, (unsigned)k, PS_TRACE_OPENED);
    ps_job_post(&job, f.total, first_block(&f, opened), flow_block, &f);
    ps_trace_seats(f.trace, job.seats);
    for (size_t k = 0; k < n;) {
        size_t slot = k % sch.slots;
        /* The slot still counts the chunk before until chunk k is opened. */
        if (k < opened && chunk_copied(&f, k)) {
            ps_trace_chunk(f.trace, (unsigned)k, PS_TRACE_COPIED);
            if ((s = ps_enqueue_h2d(d, dst + chunk_offset(&sch, k), stage->pinned + chunk_place(&sch, k),
                                    chunk_len(&sch, k), stream, caller)))
                break;
            enqueued = 1;
            /* An event only where a later chunk waits for this slot, and at the end. */
            if (((!sch.fits && k + sch.slots < n) || k + 1 == n) &&
                (s = ps_record(d, stage->events[slot], stream, caller)))
                break;
            ps_trace_chunk(f.trace, (unsigned)k, PS_TRACE_ENQUEUED);
            k++;
            idle = 0;
            continue;
        }
        /* The next chunk's slot is free once the DMA that read it has landed.
         * Beside other transfers, ask now and then only: every query takes
         * the driver's lock their DMAs need too. */
        if (opened < n && opened < k + sch.slots && may_query(pool, &idle)) {
            pinstage_status q = ps_query_event(d, stage->events[opened % sch.slots], caller);
            if (q == PINSTAGE_SUCCESS) {
                ps_trace_chunk(f.trace, (unsigned)(opened - sch.slots), PS_TRACE_LANDED);
                recount(&f, opened);
                ps_trace_chunk(f.trace, (unsigned)opened, PS_TRACE_OPENED);
                ps_job_open(&job, first_block(&f, ++opened));
                idle = 0;
                continue;
            }
            if (q != PINSTAGE_ERROR_NOT_READY) {
                s = q;
                break;
            }
        }
        if (ps_job_help(&job))
            idle = 0;
        else
            cpu_pause();
    }
    if (s) ps_job_cancel(&job);
    ps_job_finish(&job);
    /* Landed: the last DMA's event follows every earlier one on the stream. */
    if (!s) s = ps_wait_event(d, stage->events[(n - 1) % sch.slots], ps_engine_footprint(PS_H2D, bytes, plan), caller);
    if (!s) ps_trace_chunk(f.trace, (unsigned)(n - 1), PS_TRACE_LANDED);
    ps_trace_end(f.trace);
    if (!s && report) fill_report(report, &job, &f, began);
    if (s && enqueued) *in_flight = ps_drain(d, stage->events[0], stream);
    return s;
}

/* ---- Downloads ------------------------------------------------------------------------ */

/* Enqueues chunk k's DMA into its slot and records the slot's event. */
static pinstage_status d2h_chunk(const ps_driver *d, const ps_stage *stage, const schedule *sch, CUdeviceptr src,
                                 size_t k, CUstream stream, const char *caller) {
    size_t slot = k % sch->slots;
    pinstage_status s = ps_enqueue_d2h(d, stage->pinned + chunk_place(sch, k), src + chunk_offset(sch, k),
                                       chunk_len(sch, k), stream, caller);
    return s ? s : ps_record(d, stage->events[slot], stream, caller);
}

pinstage_status ps_engine_d2h(const ps_driver *d, ps_pool *pool, const ps_stage *stage, void *dst,
                              CUdeviceptr src, size_t bytes, CUstream stream, const ps_plan *plan,
                              int *in_flight, ps_engine_report *report, const char *caller) {
    schedule sch;
    make_schedule(&sch, PS_D2H, bytes, chunk_bytes(PS_D2H, bytes, plan), 1);
    size_t n = sch.n;
    unsigned threads = ps_engine_threads(pool, plan);
    pinstage_status s = PINSTAGE_SUCCESS;
    flow f;
    ps_job job;
    *in_flight = 0;

    uint64_t began = report ? ps_trace_now() : 0;
    size_t queued = 0, opened = 0; /* chunks whose DMA is enqueued / whose blocks are open */
    for (; queued < n && queued < sch.slots && !s; queued++) s = d2h_chunk(d, stage, &sch, src, queued, stream, caller);
    if (s) {
        *in_flight = ps_drain(d, stage->events[0], stream);
        return s;
    }
    ps_job_enter(pool, &job, threads - 1);
    flow_init(&f, &sch, stage->pinned, dst, 0, job.seats + 1);
    f.timed = report != NULL;
    f.trace = ps_trace_begin(1, bytes, (unsigned)n);
    for (size_t k = 0; k < queued; k++) ps_trace_chunk(f.trace, (unsigned)k, PS_TRACE_ENQUEUED);
    ps_job_post(&job, f.total, 0, flow_block, &f);
    ps_trace_seats(f.trace, job.seats);
    unsigned idle = 0;
    while (opened < n || ps_job_done(&job) < f.total) {
        /* A chunk's blocks open once its DMA has landed. */
        if (opened < queued && may_query(pool, &idle)) {
            pinstage_status q = ps_query_event(d, stage->events[opened % sch.slots], caller);
            if (q == PINSTAGE_SUCCESS) {
                ps_trace_chunk(f.trace, (unsigned)opened, PS_TRACE_LANDED);
                ps_job_open(&job, first_block(&f, ++opened));
                idle = 0;
                continue;
            }
            if (q != PINSTAGE_ERROR_NOT_READY) {
                s = q;
                break;
            }
        }
        /* A slot copied out takes the next chunk's DMA; where the transfer
         * fits the stage, the next chunk needs only the event of the chunk
         * a ring before, free once that chunk was seen landed. */
        if (queued < n && (sch.fits ? queued < opened + sch.slots : chunk_copied(&f, queued - sch.slots))) {
            if (!sch.fits) {
                ps_trace_chunk(f.trace, (unsigned)(queued - sch.slots), PS_TRACE_COPIED);
                recount(&f, queued);
            }
            if ((s = d2h_chunk(d, stage, &sch, src, queued, stream, caller))) break;
            ps_trace_chunk(f.trace, (unsigned)queued, PS_TRACE_ENQUEUED);
            queued++;
            idle = 0;
            continue;
        }
        if (ps_job_help(&job))
            idle = 0;
        else
            cpu_pause();
    }
    if (s) ps_job_cancel(&job);
    ps_job_finish(&job);
    ps_trace_end(f.trace);
    if (s) *in_flight = ps_drain(d, stage->events[0], stream);
    else if (report) fill_report(report, &job, &f, began);
    return s;
}
