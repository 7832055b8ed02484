/* SPDX-License-Identifier: MIT */
/* Streams, events and every queued operation.
 *
 * Each stream is a FIFO run in order by its own worker thread. An operation
 * waits for its dependencies, then for its cost (latency + bytes/bandwidth),
 * and only then takes effect: a copy that is read before it is synchronized
 * yields old bytes, not a lucky pass.
 *
 * Ordering follows the driver's rules: the legacy default stream waits for
 * all work queued before on blocking streams, and blocking streams wait for
 * work queued before on the legacy stream; CU_STREAM_NON_BLOCKING streams do
 * neither. Events and cuStreamWaitEvent order work across streams.
 * Host memory: an async copy from pageable memory is staged when the call is
 * made; from pinned memory the bytes are read when the copy executes. A copy
 * into pageable memory completes before the call returns. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "emu.h"

static void *worker_main(void *arg);

static emu_stream *new_stream(unsigned flags, int legacy) {
    /* Workers of destroyed streams have ended (or will, once their queue is
     * done): join those that have, so threads do not pile up. The structs
     * stay: ops of other streams may still name them in dependencies. */
    for (emu_stream *t = emu.streams; t; t = t->next_all)
        if (t->exited && !t->joined) {
            pthread_join(t->worker, NULL);
            t->joined = 1;
        }
    emu_stream *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->flags = flags;
    s->legacy = legacy;
    s->device = legacy ? -1 : emu_current_device();
    if (pthread_create(&s->worker, NULL, worker_main, s) != 0) {
        free(s);
        return NULL;
    }
    s->next_all = emu.streams;
    emu.streams = s;
    return s;
}

void emu_streams_init(void) { emu.legacy = new_stream(0, 1); }

__attribute__((destructor)) static void shutdown_workers(void) {
    pthread_mutex_lock(&emu.lock);
    emu.shutting_down = 1;
    pthread_cond_broadcast(&emu.changed);
    pthread_mutex_unlock(&emu.lock);
    for (emu_stream *s = emu.streams; s; s = s->next_all)
        if (!s->joined) pthread_join(s->worker, NULL);
    pthread_mutex_lock(&emu.lock);
    while (emu.streams) {
        emu_stream *s = emu.streams;
        emu.streams = s->next_all;
        free(s);
    }
    while (emu.events) {
        emu_event *e = emu.events;
        emu.events = e->next_all;
        free(e);
    }
    emu_regions_free(&emu.device);
    emu_regions_free(&emu.pinned);
    free(emu.primary_refs);
    free(emu.primary_flags);
    free(emu.contexts);
    pthread_mutex_unlock(&emu.lock);
}

emu_op *emu_new_op(emu_op_kind kind) {
    emu_op *op = calloc(1, sizeof *op);
    if (op) {
        op->kind = kind;
        op->device = emu_current_device();
    }
    return op;
}

static int add_dep(emu_op *op, emu_stream *stream, uint64_t seq) {
    if (stream->completed >= seq) return 0;
    if (op->ndeps < sizeof op->deps / sizeof op->deps[0]) {
        op->deps[op->ndeps++] = (emu_dep){stream, seq};
        return 0;
    }
    emu_dep *more = realloc(op->more_deps, (op->nmore_deps + 1) * sizeof *more);
    if (!more) return -1;
    more[op->nmore_deps++] = (emu_dep){stream, seq};
    op->more_deps = more;
    return 0;
}

static int deps_done(const emu_op *op);

static int is_blocking(const emu_stream *s) { return !s->legacy && !(s->flags & CU_STREAM_NON_BLOCKING); }

uint64_t emu_enqueue(emu_stream *stream, emu_op *op) {
    if (stream->legacy) {
        for (emu_stream *t = emu.streams; t; t = t->next_all)
            if (is_blocking(t)) add_dep(op, t, t->enqueued);
    } else if (is_blocking(stream)) {
        add_dep(op, emu.legacy, emu.legacy->enqueued);
    }
    op->seq = ++stream->enqueued;
    if (emu.inline_ops && !stream->head && op->kind != EMU_OP_HOST_FN && deps_done(op)) {
        /* Inline: done before the call returns, in order, at no cost (for
         * fuzzing and fault sweeps, where timing is not under test). */
        if (op->kind == EMU_OP_COPY) memmove(op->dst, op->src, op->bytes);
        if (op->kind == EMU_OP_MEMSET) memset(op->dst, op->value, op->bytes);
        stream->completed = op->seq;
        free(op->staging);
        free(op->more_deps);
        free(op);
        /* No broadcast: nobody can be waiting for an op that did not exist. */
        return stream->completed;
    }
    if (stream->tail)
        stream->tail->next = op;
    else
        stream->head = op;
    stream->tail = op;
    pthread_cond_broadcast(&emu.changed);
    return op->seq;
}

void emu_wait(emu_stream *stream, uint64_t seq) {
    while (stream->completed < seq) pthread_cond_wait(&emu.changed, &emu.lock);
}

static int deps_done(const emu_op *op) {
    for (size_t i = 0; i < op->ndeps; i++)
        if (op->deps[i].stream->completed < op->deps[i].seq) return 0;
    for (size_t i = 0; i < op->nmore_deps; i++)
        if (op->more_deps[i].stream->completed < op->more_deps[i].seq) return 0;
    return 1;
}

static void take_time(const emu_op *op, double latency_ns, double bytes_per_ns) {
    if (op->kind == EMU_OP_MARKER) return;
    double ns = latency_ns + (double)op->bytes / bytes_per_ns;
    struct timespec ts = {(time_t)(ns / 1e9), (long)((uint64_t)ns % 1000000000u)};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

static void *worker_main(void *arg) {
    emu_stream *s = arg;
    pthread_mutex_lock(&emu.lock);
    for (;;) {
        while (!s->head && !s->destroyed && !emu.shutting_down) pthread_cond_wait(&emu.changed, &emu.lock);
        if (!s->head) {
            s->exited = 1;
            break;
        }
        emu_op *op = s->head;
        while (!deps_done(op)) pthread_cond_wait(&emu.changed, &emu.lock);
        double latency = emu.latency_ns, rate = emu.bytes_per_ns;
        if (op->device >= 0 && op->device < EMU_MAX_DEVICES && emu.device_bytes_per_ns[op->device] > 0)
            rate = emu.device_bytes_per_ns[op->device];
        if (op->pinned_host && emu.pinned_bytes_per_ns > 0) rate = emu.pinned_bytes_per_ns;
        pthread_mutex_unlock(&emu.lock);
        take_time(op, latency, rate);
        if (op->kind == EMU_OP_HOST_FN) op->fn(op->user_data);
        pthread_mutex_lock(&emu.lock);
        if (op->kind == EMU_OP_COPY) memmove(op->dst, op->src, op->bytes);
        if (op->kind == EMU_OP_MEMSET) memset(op->dst, op->value, op->bytes);
        s->head = op->next;
        if (!s->head) s->tail = NULL;
        s->completed = op->seq;
        free(op->staging);
        free(op->more_deps);
        free(op);
        pthread_cond_broadcast(&emu.changed);
    }
    pthread_mutex_unlock(&emu.lock);
    return NULL;
}

CUresult emu_resolve_stream(CUstream handle, emu_stream **stream) {
    if (handle == NULL || handle == CU_STREAM_LEGACY || handle == CU_STREAM_PER_THREAD) {
        *stream = emu.legacy;
        return CUDA_SUCCESS;
    }
    for (emu_stream *s = emu.streams; s; s = s->next_all)
        if ((CUstream)s == handle) {
            if (s->destroyed) break;
            *stream = s;
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_INVALID_HANDLE;
}

/* ---- Copies and memsets ---------------------------------------------------- */

typedef enum { TO_DEVICE, TO_HOST, DEVICE_TO_DEVICE } direction;

/* Queues a copy on `handle` (the legacy stream for synchronous calls) and
 * returns once the call's documented host-side condition holds. */
static CUresult copy(direction dir, void *host_dst, const void *host_src, CUdeviceptr dev_dst,
                     CUdeviceptr dev_src, size_t bytes, CUstream handle, int synchronous) {
    emu_stream *s;
    void *dst = NULL;
    const void *src = NULL;
    pthread_mutex_lock(&emu.lock);
    CUresult r = emu_need_context();
    if (!r) r = emu_resolve_stream(handle, &s);
    if (!r) r = emu_check_stream_context(s);
    if (!r && dir == TO_DEVICE) {
        if (!host_src) r = CUDA_ERROR_INVALID_VALUE;
        if (!r) r = emu_device_range(dev_dst, bytes, &dst);
        src = host_src;
    } else if (!r && dir == TO_HOST) {
        if (!host_dst) r = CUDA_ERROR_INVALID_VALUE;
        if (!r) r = emu_device_range(dev_src, bytes, (void **)&src);
        dst = host_dst;
    } else if (!r) {
        r = emu_device_range(dev_dst, bytes, &dst);
        if (!r) r = emu_device_range(dev_src, bytes, (void **)&src);
    }
    /* The driver refuses a host range that is only partly page-locked (seen
     * on an H200 with a half-registered buffer). */
    if (!r && dir != DEVICE_TO_DEVICE && emu_is_partly_pinned(dir == TO_DEVICE ? host_src : host_dst, bytes))
        r = CUDA_ERROR_INVALID_VALUE;
    emu_op *op = NULL;
    if (!r && bytes > 0 && !(op = emu_new_op(EMU_OP_COPY))) r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r || bytes == 0) {
        pthread_mutex_unlock(&emu.lock);
        return r;
    }
    op->dst = dst;
    op->src = src;
    op->bytes = bytes;
    int host_pinned = dir == DEVICE_TO_DEVICE ||
                      emu_is_pinned(dir == TO_DEVICE ? host_src : host_dst, bytes);
    op->pinned_host = host_pinned && dir != DEVICE_TO_DEVICE;
    /* The driver's own staging of pageable memory costs the calling thread. */
    double staging_ns = host_pinned ? 0 : emu.pageable_ns_per_byte * (double)bytes;
    int wait = 0;
    if (dir == TO_DEVICE && !host_pinned) {
        /* The driver stages pageable sources before returning. */
        op->staging = malloc(bytes);
        if (!op->staging) {
            free(op);
            pthread_mutex_unlock(&emu.lock);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        memcpy(op->staging, host_src, bytes);
        op->src = op->staging;
        /* A synchronous pageable upload returns once staged: the DMA may
         * still be in flight, as the driver documents. */
    } else if (dir == TO_DEVICE) {
        wait = synchronous;
    } else if (dir == TO_HOST) {
        wait = synchronous || !host_pinned;
    }
    uint64_t seq = emu_enqueue(s, op);
    if (wait) emu_wait(s, seq);
    pthread_mutex_unlock(&emu.lock);
    if (staging_ns > 0) {
        struct timespec ts = {(time_t)(staging_ns / 1e9), (long)((uint64_t)staging_ns % 1000000000u)};
        while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
        }
    }
    return CUDA_SUCCESS;
}

CUresult emu_cuMemcpyHtoD(CUdeviceptr dst, const void *src, size_t bytes) {
    EMU_ENTER(cuMemcpyHtoD);
    return copy(TO_DEVICE, NULL, src, dst, 0, bytes, CU_STREAM_LEGACY, 1);
}

CUresult emu_cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t bytes) {
    EMU_ENTER(cuMemcpyDtoH);
    return copy(TO_HOST, dst, NULL, 0, src, bytes, CU_STREAM_LEGACY, 1);
}

CUresult emu_cuMemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t bytes, CUstream stream) {
    EMU_ENTER(cuMemcpyHtoDAsync);
    return copy(TO_DEVICE, NULL, src, dst, 0, bytes, stream, 0);
}

CUresult emu_cuMemcpyDtoHAsync(void *dst, CUdeviceptr src, size_t bytes, CUstream stream) {
    EMU_ENTER(cuMemcpyDtoHAsync);
    return copy(TO_HOST, dst, NULL, 0, src, bytes, stream, 0);
}

CUresult emu_cuMemcpyDtoD(CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
    EMU_ENTER(cuMemcpyDtoD);
    return copy(DEVICE_TO_DEVICE, NULL, NULL, dst, src, bytes, CU_STREAM_LEGACY, 0);
}

CUresult emu_cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream) {
    EMU_ENTER(cuMemcpyDtoDAsync);
    return copy(DEVICE_TO_DEVICE, NULL, NULL, dst, src, bytes, stream, 0);
}

static CUresult memset_d8(CUdeviceptr dst, unsigned char value, size_t count, CUstream handle) {
    emu_stream *s;
    void *target = NULL;
    pthread_mutex_lock(&emu.lock);
    CUresult r = emu_need_context();
    if (!r) r = emu_resolve_stream(handle, &s);
    if (!r) r = emu_check_stream_context(s);
    if (!r) r = emu_device_range(dst, count, &target);
    emu_op *op = NULL;
    if (!r && count > 0 && !(op = emu_new_op(EMU_OP_MEMSET))) r = CUDA_ERROR_OUT_OF_MEMORY;
    if (op) {
        op->dst = target;
        op->bytes = count;
        op->value = value;
        emu_enqueue(s, op);
    }
    pthread_mutex_unlock(&emu.lock);
    return r;
}

CUresult emu_cuMemsetD8(CUdeviceptr dst, unsigned char value, size_t count) {
    EMU_ENTER(cuMemsetD8);
    return memset_d8(dst, value, count, CU_STREAM_LEGACY);
}

CUresult emu_cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t count, CUstream stream) {
    EMU_ENTER(cuMemsetD8Async);
    return memset_d8(dst, value, count, stream);
}

/* ---- Streams ------------------------------------------------------------------ */

CUresult emu_cuStreamCreate(CUstream *stream, unsigned int flags) {
    EMU_ENTER(cuStreamCreate);
    pthread_mutex_lock(&emu.lock);
    CUresult r = emu_need_context();
    if (!r && (!stream || flags > CU_STREAM_NON_BLOCKING)) r = CUDA_ERROR_INVALID_VALUE;
    emu_stream *s = NULL;
    if (!r && !(s = new_stream(flags, 0))) r = CUDA_ERROR_OUT_OF_MEMORY;
    if (!r) *stream = (CUstream)s;
    pthread_mutex_unlock(&emu.lock);
    return r;
}

CUresult emu_cuStreamDestroy(CUstream stream) {
    EMU_ENTER(cuStreamDestroy);
    emu_stream *s;
    pthread_mutex_lock(&emu.lock);
    CUresult r = emu_need_context();
    if (!r) r = emu_resolve_stream(stream, &s);
    if (!r && s->legacy) r = CUDA_ERROR_INVALID_HANDLE;
    if (!r) {
        /* Like the driver: returns at once; queued work still runs. */
        s->destroyed = 1;
        pthread_cond_broadcast(&emu.changed);
    }
    pthread_mutex_unlock(&emu.lock);
    return r;
}

static CUresult marker(emu_stream *s, uint64_t *seq) {
    emu_op *op = emu_new_op(EMU_OP_MARKER);
    if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
    *seq = emu_enqueue(s, op);
    return CUDA_SUCCESS;
}

CUresult emu_cuStreamSynchronize(CUstream stream) {
    EMU_ENTER(cuStreamSynchronize);
    emu_stream *s;
    uint64_t seq = 0;
    pthread_mutex_lock(&emu.lock);
    CUresult r = emu_need_context();
    if (!r) r = emu_resolve_stream(stream, &s);
    if (!r) {
        seq = s->enqueued;
        /* Synchronizing the legacy stream also waits for blocking streams. */
        if (s->legacy) r = marker(s, &seq);
    }
    if (!r) emu_wait(s, seq);
    pthread_mutex_unlock(&emu.lock);
    return r;
}

CUresult emu_cuStreamQuery(CUstream stream) {
    EMU_ENTER(cuStreamQuery);
    emu_stream *s;
    pthread_mutex_lock(&emu.lock);
    CUresult r = emu_need_context();
    if (!r) r = emu_resolve_stream(stream, &s);
    if (!r && s->completed < s->enqueued) r = CUDA_ERROR_NOT_READY;
    pthread_mutex_unlock(&emu.lock);
    return r;
}

CUresult emu_cuCtxSynchronize(void) {
    EMU_ENTER(cuCtxSynchronize);
    pthread_mutex_lock(&emu.lock);
    CUresult r = emu_need_context();
    if (!r)
        for (emu_stream *s = emu.streams; s; s = s->next_all) emu_wait(s, s->enqueued);
    pthread_mutex_unlock(&emu.lock);
    return r;
}

CUresult emu_cuLaunchHostFunc(CUstream stream, CUhostFn fn, void *user_data) {
    EMU_ENTER(cuLaunchHostFunc);
    emu_stream *s;
    pthread_mutex_lock(&emu.lock);
    CUresult r = emu_need_context();
    if (!r && !fn) r = CUDA_ERROR_INVALID_VALUE;
    if (!r) r = emu_resolve_stream(stream, &s);
    emu_op *op = NULL;
    if (!r && !(op = emu_new_op(EMU_OP_HOST_FN))) r = CUDA_ERROR_OUT_OF_MEMORY;
    if (!r) {
        op->fn = fn;
        op->user_data = user_data;
        emu_enqueue(s, op);
    }
    pthread_mutex_unlock(&emu.lock);
    return r;
}

/* ---- Events ---------------------------------------------------------------------- */

static CUresult resolve_event(CUevent handle, emu_event **event) {
    for (emu_event *e = emu.events; e; e = e->next_all)
        if ((CUevent)e == handle) {
            *event = e;
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_INVALID_HANDLE;
}

CUresult emu_cuEventCreate(CUevent *event, unsigned int flags) {
    EMU_ENTER(cuEventCreate);
    pthread_mutex_lock(&emu.lock);
    CUresult r = emu_need_context();
    if (!r && (!event || flags > 7)) r = CUDA_ERROR_INVALID_VALUE;
    emu_event *e = NULL;
    if (!r && !(e = calloc(1, sizeof *e))) r = CUDA_ERROR_OUT_OF_MEMORY;
    if (!r) {
        e->flags = flags;
        e->device = emu_current_device();
        e->next_all = emu.events;
        emu.events = e;
        *event = (CUevent)e;
    }
    pthread_mutex_unlock(&emu.lock);
    return r;
}

CUresult emu_cuEventRecord(CUevent event, CUstream stream) {
    EMU_ENTER(cuEventRecord);
    emu_event *e;
    emu_stream *s;
    uint64_t seq;
    pthread_mutex_lock(&emu.lock);
    CUresult r = emu_need_context();
    if (!r) r = resolve_event(event, &e);
    if (!r) r = emu_resolve_stream(stream, &s);
    if (!r) r = emu_check_stream_context(s);
    /* An event is recorded on streams of its own context only. */
    if (!r && e->device != emu_current_device()) r = CUDA_ERROR_INVALID_HANDLE;
    if (!r) r = marker(s, &seq);
    if (!r) {
        e->stream = s;
        e->seq = seq;
    }
    pthread_mutex_unlock(&emu.lock);
    return r;
}

CUresult emu_cuEventQuery(CUevent event) {
    EMU_ENTER(cuEventQuery);
    emu_event *e;
    pthread_mutex_lock(&emu.lock);
    CUresult r = emu_need_context();
    if (!r) r = resolve_event(event, &e);
    if (!r && e->stream && e->stream->completed < e->seq) r = CUDA_ERROR_NOT_READY;
    pthread_mutex_unlock(&emu.lock);
    return r;
}

CUresult emu_cuEventSynchronize(CUevent event) {
    EMU_ENTER(cuEventSynchronize);
    emu_event *e;
    pthread_mutex_lock(&emu.lock);
    CUresult r = emu_need_context();
    if (!r) r = resolve_event(event, &e);
    if (!r && e->stream) emu_wait(e->stream, e->seq);
    pthread_mutex_unlock(&emu.lock);
    return r;
}

CUresult emu_cuEventDestroy(CUevent event) {
    EMU_ENTER(cuEventDestroy);
    emu_event *e;
    pthread_mutex_lock(&emu.lock);
    CUresult r = emu_need_context();
    if (!r) r = resolve_event(event, &e);
    if (!r) {
        /* Unlinked and freed: no queued op refers to an event (they wait on
         * streams), and a long run's lookups stay short. */
        for (emu_event **at = &emu.events; *at; at = &(*at)->next_all)
            if (*at == e) {
                *at = e->next_all;
                break;
            }
        free(e);
    }
    pthread_mutex_unlock(&emu.lock);
    return r;
}

CUresult emu_cuStreamWaitEvent(CUstream stream, CUevent event, unsigned int flags) {
    EMU_ENTER(cuStreamWaitEvent);
    emu_event *e;
    emu_stream *s;
    pthread_mutex_lock(&emu.lock);
    CUresult r = emu_need_context();
    if (!r && flags != 0) r = CUDA_ERROR_INVALID_VALUE;
    if (!r) r = resolve_event(event, &e);
    if (!r) r = emu_resolve_stream(stream, &s);
    if (!r) r = emu_check_stream_context(s);
    if (!r && e->stream) {
        emu_op *op = emu_new_op(EMU_OP_MARKER);
        if (!op) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            add_dep(op, e->stream, e->seq);
            emu_enqueue(s, op);
        }
    }
    pthread_mutex_unlock(&emu.lock);
    return r;
}
