/* SPDX-License-Identifier: MIT */
/* The staging buffer: every public transfer reads as
 *   argument checks -> route (policy.c) -> pinned memory (pinned.c)
 *   -> driver calls (copy.c) or the copy engine (engine.c) -> stats
 * Upload / download of page-locked memory skip the route: one DMA. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "copy.h"
#include "devbuf.h"
#include "engine.h"
#include "pinned.h"
#include "policy.h"
#include "status.h"

struct pinstage_buffer {
    ps_pinned pinned;
    /* Created at the first transfer: events[0] ends every synchronous call,
     * all of them guard the engine's slots. */
    CUevent events[PS_ENGINE_SLOTS];
    int have_events;
    size_t auto_stage_max_bytes;
    pinstage_profile *profile; /* the buffer's own copy; NULL: the default */
    pinstage_stats stats;
};

pinstage_status pinstage_buffer_create(pinstage_buffer **out) {
    if (!out) return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "pinstage_buffer_create: out is NULL");
    *out = calloc(1, sizeof **out);
    if (!*out) return ps_fail(PINSTAGE_ERROR_OUT_OF_MEMORY, "pinstage_buffer_create: out of host memory");
    (*out)->auto_stage_max_bytes = PINSTAGE_AUTO_STAGE_PROFILE;
    return PINSTAGE_SUCCESS;
}

pinstage_status pinstage_buffer_create_with_capacity(pinstage_buffer **out, size_t bytes) {
    static const char caller[] = "pinstage_buffer_create_with_capacity";
    pinstage_buffer *buf;
    if (!out) return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: out is NULL", caller);
    *out = NULL;
    pinstage_status s = pinstage_buffer_create(&buf);
    if (s) return s;
    s = pinstage_buffer_reserve(buf, bytes);
    if (s) {
        /* pinstage_buffer_reserve named itself; the user called us. */
        char why[512];
        snprintf(why, sizeof why, "%s", pinstage_last_error_message());
        free(buf);
        return ps_fail(s, "%s: %s", caller, why);
    }
    *out = buf;
    return PINSTAGE_SUCCESS;
}

void pinstage_buffer_free(pinstage_buffer *buf) {
    const ps_driver *d;
    if (!buf) return;
    /* Events and pinned memory exist only if a driver was loaded to make them. */
    if ((buf->have_events || buf->pinned.ptr) && !ps_driver_get(&d)) {
        if (buf->have_events)
            for (int i = 0; i < PS_ENGINE_SLOTS; i++) d->cuEventDestroy(buf->events[i]);
        ps_pinned_release(&buf->pinned, d, &buf->stats.pin_time_ns);
    }
    free(buf->profile);
    free(buf);
}

size_t pinstage_buffer_capacity(const pinstage_buffer *buf) { return buf ? buf->pinned.capacity : 0; }

void pinstage_buffer_stats(const pinstage_buffer *buf, pinstage_stats *stats) {
    if (!stats) return;
    if (buf)
        *stats = buf->stats;
    else
        memset(stats, 0, sizeof *stats);
}

size_t pinstage_buffer_auto_stage_max_bytes(const pinstage_buffer *buf) {
    return buf ? buf->auto_stage_max_bytes : 0;
}

void pinstage_buffer_set_auto_stage_max_bytes(pinstage_buffer *buf, size_t bytes) {
    if (buf) buf->auto_stage_max_bytes = bytes;
}

pinstage_status pinstage_buffer_set_profile(pinstage_buffer *buf, const pinstage_profile *profile) {
    static const char caller[] = "pinstage_buffer_set_profile";
    if (!buf) return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: buf is NULL", caller);
    pinstage_profile *copy = NULL;
    if (profile) {
        if (!(copy = malloc(sizeof *copy))) return ps_fail(PINSTAGE_ERROR_OUT_OF_MEMORY, "%s: out of host memory", caller);
        *copy = *profile;
    }
    free(buf->profile);
    buf->profile = copy;
    return PINSTAGE_SUCCESS;
}

/* Grows the pinned memory to hold `bytes` (already checked non-zero). */
static pinstage_status ensure_capacity(pinstage_buffer *buf, const ps_driver *d, size_t bytes,
                                       const char *caller) {
    if (bytes <= buf->pinned.capacity) return PINSTAGE_SUCCESS;
    size_t capacity = ps_pinned_round(bytes);
    if (capacity == 0)
        return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: bytes=%zu overflows when rounded up to %zu",
                       caller, bytes, PINSTAGE_CAPACITY_GRANULARITY);
    pinstage_status s = ps_pinned_grow(&buf->pinned, d, capacity, &buf->stats.pin_time_ns, caller);
    if (s) return s;
    buf->stats.pinned_allocations++;
    if (capacity > buf->stats.peak_capacity) buf->stats.peak_capacity = capacity;
    return PINSTAGE_SUCCESS;
}

pinstage_status pinstage_buffer_reserve(pinstage_buffer *buf, size_t bytes) {
    static const char caller[] = "pinstage_buffer_reserve";
    const ps_driver *d;
    if (!buf) return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: buf is NULL", caller);
    if (bytes == 0) return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: bytes is 0", caller);
    if (ps_pinned_round(bytes) == 0)
        return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: bytes=%zu overflows when rounded up to %zu",
                       caller, bytes, PINSTAGE_CAPACITY_GRANULARITY);
    if (bytes <= buf->pinned.capacity) return PINSTAGE_SUCCESS;
    pinstage_status s = ps_driver_get(&d);
    return s ? s : ensure_capacity(buf, d, bytes, caller);
}

void pinstage_buffer_shrink_to_fit(pinstage_buffer *buf) {
    const ps_driver *d;
    /* A pinned pointer exists only if a driver was loaded to make it. */
    if (!buf || !buf->pinned.ptr || ps_driver_get(&d)) return;
    ps_pinned_release(&buf->pinned, d, &buf->stats.pin_time_ns);
}

/* The checks every transfer shares; on success *bytes is n * element size. */
static pinstage_status check_transfer(const char *caller, const pinstage_buffer *buf,
                                      const pinstage_devbuf *dev, const char *dev_name,
                                      int host_given, const char *host_name, size_t n,
                                      size_t *bytes) {
    if (!buf) return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: buf is NULL", caller);
    if (!dev) return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: %s is NULL", caller, dev_name);
    if (!host_given) return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: %s is NULL", caller, host_name);
    if (n == 0) return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: n is 0", caller);
    if (n != dev->len)
        return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: n=%zu but %s holds %zu elements", caller,
                       n, dev_name, dev->len);
    /* Cannot overflow: a device buffer's len * elem_size was checked when it was made. */
    *bytes = n * dev->elem_size;
    return PINSTAGE_SUCCESS;
}

static pinstage_status ensure_events(pinstage_buffer *buf, const ps_driver *d, const char *caller) {
    if (buf->have_events) return PINSTAGE_SUCCESS;
    CUevent made[PS_ENGINE_SLOTS];
    for (int i = 0; i < PS_ENGINE_SLOTS; i++) {
        CUresult r = d->cuEventCreate(&made[i], CU_EVENT_DISABLE_TIMING);
        if (r) {
            while (i--) d->cuEventDestroy(made[i]);
            return ps_fail_driver((pinstage_status)r, caller, "cuEventCreate");
        }
    }
    memcpy(buf->events, made, sizeof made);
    buf->have_events = 1;
    return PINSTAGE_SUCCESS;
}

/* Makes `bytes` of pinned memory ready, aligned for the element. */
static pinstage_status prepare_pinned(pinstage_buffer *buf, const ps_driver *d, size_t bytes,
                                      size_t elem_align, const char *caller) {
    pinstage_status s = ensure_events(buf, d, caller);
    if (s || (s = ensure_capacity(buf, d, bytes, caller))) return s;
    if ((uintptr_t)buf->pinned.ptr % elem_align)
        return ps_fail(PINSTAGE_ERROR_INVALID_VALUE,
                       "%s: the pinned allocation at %p is not aligned to the element's %zu bytes",
                       caller, buf->pinned.ptr, elem_align);
    return PINSTAGE_SUCCESS;
}

/* A failed wait may leave a DMA on the pinned block. The block is never
 * reused: releasing it waits for the device, and the next call pins anew. */
static void retire_pinned(pinstage_buffer *buf, const ps_driver *d) {
    ps_pinned_release(&buf->pinned, d, &buf->stats.pin_time_ns);
    buf->stats.retired_blocks++;
}

/* After a failure once a copy on the pinned block was enqueued. */
static void settle_pinned(pinstage_buffer *buf, const ps_driver *d, CUstream stream) {
    if (ps_drain(d, buf->events[0], stream)) retire_pinned(buf, d);
}

/* One DMA between the pinned block and the device, landed on return. */
static pinstage_status staged_copy(pinstage_buffer *buf, const ps_driver *d, ps_direction dir, CUdeviceptr dev,
                                   size_t bytes, CUstream stream, const char *caller) {
    pinstage_status s = dir == PS_H2D ? ps_enqueue_h2d(d, dev, buf->pinned.ptr, bytes, stream, caller)
                                      : ps_enqueue_d2h(d, buf->pinned.ptr, dev, bytes, stream, caller);
    if (s) return s;
    if ((s = ps_record_and_wait(d, buf->events[0], stream, bytes, caller))) settle_pinned(buf, d, stream);
    return s;
}

pinstage_status pinstage_buffer_upload_with(pinstage_buffer *buf, pinstage_devbuf *dst, size_t n,
                                            CUstream stream, pinstage_fill_fn fill,
                                            void *user_data) {
    static const char caller[] = "pinstage_buffer_upload_with";
    const ps_driver *d;
    size_t bytes = 0;
    pinstage_status s = check_transfer(caller, buf, dst, "dst", fill != NULL, "fill", n, &bytes);
    if (s || (s = ps_driver_get(&d))) return s;
    if ((s = prepare_pinned(buf, d, bytes, dst->elem_align, caller))) return s;
    fill(buf->pinned.ptr, n, user_data);
    if ((s = staged_copy(buf, d, PS_H2D, dst->ptr, bytes, stream, caller))) return s;
    buf->stats.staged_transfers++;
    buf->stats.bytes_uploaded += bytes;
    return PINSTAGE_SUCCESS;
}

pinstage_status pinstage_buffer_download_into(pinstage_buffer *buf, const pinstage_devbuf *src,
                                              size_t n, CUstream stream, const void **view) {
    static const char caller[] = "pinstage_buffer_download_into";
    const ps_driver *d;
    size_t bytes = 0;
    if (view) *view = NULL;
    pinstage_status s = check_transfer(caller, buf, src, "src", view != NULL, "view", n, &bytes);
    if (s || (s = ps_driver_get(&d))) return s;
    if ((s = prepare_pinned(buf, d, bytes, src->elem_align, caller))) return s;
    if ((s = staged_copy(buf, d, PS_D2H, src->ptr, bytes, stream, caller))) return s;
    buf->stats.staged_transfers++;
    buf->stats.bytes_downloaded += bytes;
    *view = buf->pinned.ptr;
    return PINSTAGE_SUCCESS;
}

/* ---- upload / download of any host memory ------------------------------------------ */

typedef struct {
    pinstage_buffer *buf;
    const ps_driver *d;
    ps_direction dir;
    CUdeviceptr dev;
    unsigned char *host;
    size_t bytes;
    CUstream stream;
    const char *caller;
} transfer;

/* Already page-locked host memory: one DMA straight from / into it. Returns
 * CUDA_ERROR_INVALID_VALUE untouched when the driver refuses the range at
 * enqueue, so the caller can stage it instead. */
static pinstage_status pinned_host_copy(const transfer *t) {
    pinstage_status s = t->dir == PS_H2D ? ps_enqueue_h2d(t->d, t->dev, t->host, t->bytes, t->stream, t->caller)
                                         : ps_enqueue_d2h(t->d, t->host, t->dev, t->bytes, t->stream, t->caller);
    if (s) return s;
    /* On failure the caller's memory may still be in a DMA: wait for it. */
    if ((s = ps_record_and_wait(t->d, t->buf->events[0], t->stream, t->bytes, t->caller)))
        ps_drain(t->d, t->buf->events[0], t->stream);
    return s;
}

/* The driver's pageable path. Returns CUDA_ERROR_INVALID_VALUE untouched
 * when the driver refuses the host range (partly page-locked inside). */
static pinstage_status pageable_copy(const transfer *t) {
    return t->dir == PS_H2D
               ? ps_copy_h2d_pageable(t->d, t->dev, t->host, t->bytes, t->stream, t->buf->events[0], t->caller)
               : ps_copy_d2h_pageable(t->d, t->host, t->dev, t->bytes, t->stream, t->buf->events[0], t->caller);
}

static pinstage_status engine_copy(const transfer *t, const ps_plan *plan) {
    pinstage_buffer *buf = t->buf;
    pinstage_status s = prepare_pinned(buf, t->d, ps_engine_footprint(t->bytes, plan), 1, t->caller);
    if (s) return s;
    ps_stage stage = {buf->pinned.ptr, buf->events};
    int in_flight = 0;
    s = t->dir == PS_H2D ? ps_engine_h2d(t->d, ps_pool_default(), &stage, t->dev, t->host, t->bytes, t->stream, plan,
                                         &in_flight, t->caller)
                         : ps_engine_d2h(t->d, ps_pool_default(), &stage, t->host, t->dev, t->bytes, t->stream, plan,
                                         &in_flight, t->caller);
    if (s && in_flight) retire_pinned(buf, t->d);
    return s;
}

static pinstage_status move(transfer *t) {
    pinstage_buffer *buf = t->buf;
    pinstage_status s = ensure_events(buf, t->d, t->caller);
    if (s) return s;
    const pinstage_profile *profile = buf->profile ? buf->profile : ps_profile_default();
    ps_host_kind kind = ps_host_kind_of(t->d, t->host, t->bytes);
    if (kind == PS_HOST_PINNED) {
        s = pinned_host_copy(t);
        if (s != PINSTAGE_ERROR_INVALID_VALUE) {
            if (!s) buf->stats.pinned_host_transfers++;
            return s;
        }
        kind = PS_HOST_PARTLY_PINNED; /* e.g. two adjacent registrations */
    }
    ps_plan plan = ps_choose_plan(profile, t->dir, t->bytes, buf->auto_stage_max_bytes);
    if (plan.route == PINSTAGE_ROUTE_PAGEABLE && kind == PS_HOST_PAGEABLE) {
        s = pageable_copy(t);
        if (s != PINSTAGE_ERROR_INVALID_VALUE) {
            if (!s) buf->stats.pageable_transfers++;
            return s;
        }
    }
    /* Staged: by choice, or because the driver does not take the range. */
    if (plan.route == PINSTAGE_ROUTE_PAGEABLE) plan = ps_choose_plan(profile, t->dir, t->bytes, SIZE_MAX);
    if ((s = engine_copy(t, &plan))) return s;
    buf->stats.staged_transfers++;
    buf->stats.engine_transfers += plan.route == PINSTAGE_ROUTE_ENGINE;
    return PINSTAGE_SUCCESS;
}

pinstage_status pinstage_buffer_upload(pinstage_buffer *buf, pinstage_devbuf *dst, const void *src,
                                       size_t n, CUstream stream) {
    static const char caller[] = "pinstage_buffer_upload";
    size_t bytes = 0;
    pinstage_status s = check_transfer(caller, buf, dst, "dst", src != NULL, "src", n, &bytes);
    transfer t = {buf, NULL, PS_H2D, 0, (unsigned char *)src, bytes, stream, caller};
    if (s || (s = ps_driver_get(&t.d))) return s;
    t.dev = dst->ptr;
    if ((s = move(&t))) return s;
    buf->stats.bytes_uploaded += bytes;
    return PINSTAGE_SUCCESS;
}

pinstage_status pinstage_buffer_download(pinstage_buffer *buf, void *dst, size_t n,
                                         const pinstage_devbuf *src, CUstream stream) {
    static const char caller[] = "pinstage_buffer_download";
    size_t bytes = 0;
    pinstage_status s = check_transfer(caller, buf, src, "src", dst != NULL, "dst", n, &bytes);
    transfer t = {buf, NULL, PS_D2H, 0, dst, bytes, stream, caller};
    if (s || (s = ps_driver_get(&t.d))) return s;
    t.dev = src->ptr;
    if ((s = move(&t))) return s;
    buf->stats.bytes_downloaded += bytes;
    return PINSTAGE_SUCCESS;
}
