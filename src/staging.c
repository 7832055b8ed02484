/* SPDX-License-Identifier: MIT */
/* The staging buffer: every public transfer reads as
 *   argument checks -> route (policy.c) -> pinned memory (pinned.c)
 *   -> driver calls (copy.c) or the copy engine (engine.c) -> stats
 * Upload / download of page-locked memory skip the route: one DMA. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "adapt.h"
#include "copy.h"
#include "devbuf.h"
#include "device.h"
#include "engine.h"
#include "governor.h"
#include "numa.h"
#include "pinned.h"
#include "policy.h"
#include "pool.h"
#include "status.h"

struct pinstage_buffer {
    ps_pinned pinned;
    /* Created at the first transfer: events[0] ends every synchronous call,
     * all of them guard the engine's slots. */
    CUevent events[PS_ENGINE_MAX_SLOTS];
    int have_events;
    int in_call;              /* a call on this buffer is running (re-entry from a fill) */
    int strict;               /* no pageable fallback when pinning fails */
    int adaptive;             /* follows what recent transfers achieved (adapt.c) */
    size_t pinned_limit;      /* this buffer's cap on its capacity; SIZE_MAX: none */
    size_t auto_stage_max_bytes;
    pinstage_profile *profile; /* the buffer's own copy; NULL: the default */
    ps_binding binding;       /* its device, context and NUMA node (device.h) */
    pinstage_stats stats;
};

/* Every call that uses a buffer's state goes through these: a fill callback
 * that calls back into its own buffer is refused, not let loose on memory
 * the outer call is using. */
static pinstage_status enter(pinstage_buffer *buf, const char *caller) {
    if (buf->in_call)
        return ps_fail(PINSTAGE_ERROR_NOT_PERMITTED,
                       "%s: called on a buffer whose own call is still running (from its fill callback?)", caller);
    buf->in_call = 1;
    return PINSTAGE_SUCCESS;
}

/* Ends a call: the caller's context back (if the call made the buffer's
 * current), the buffer free for the next call. */
static pinstage_status leave(pinstage_buffer *buf, pinstage_status s) {
    s = ps_bind_leave(&buf->binding, s);
    buf->in_call = 0;
    return s;
}

/* The driver, and the buffer's context current if it is bound. */
static pinstage_status begin(pinstage_buffer *buf, const ps_driver **d, const char *caller) {
    pinstage_status s = ps_driver_get(d);
    return s ? s : ps_bind_enter(&buf->binding, *d, caller);
}

pinstage_status pinstage_buffer_create(pinstage_buffer **out) {
    if (!out) return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "pinstage_buffer_create: out is NULL");
    *out = calloc(1, sizeof **out);
    if (!*out) return ps_fail(PINSTAGE_ERROR_OUT_OF_MEMORY, "pinstage_buffer_create: out of host memory");
    (*out)->auto_stage_max_bytes = PINSTAGE_AUTO_STAGE_PROFILE;
    (*out)->pinned_limit = SIZE_MAX;
    (*out)->adaptive = 1;
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
        ps_message why;
        ps_message_save(&why);
        free(buf);
        return ps_fail(s, "%s: %s", caller, why.text);
    }
    *out = buf;
    return PINSTAGE_SUCCESS;
}

pinstage_status pinstage_buffer_free(pinstage_buffer *buf) {
    static const char caller[] = "pinstage_buffer_free";
    const ps_driver *d;
    pinstage_status s = PINSTAGE_SUCCESS;
    uint64_t ignored = 0;
    if (!buf) return PINSTAGE_SUCCESS;
    if (buf->in_call)
        return ps_fail(PINSTAGE_ERROR_NOT_PERMITTED, "%s: called from the buffer's own fill callback", caller);
    /* Events and pinned memory exist only if a driver was loaded to make them. */
    if ((buf->have_events || buf->pinned.ptr) && !ps_driver_get(&d)) {
        /* Without its context current the releases are still tried: a
         * refused one is orphaned (released later) and reported. */
        ps_message why;
        pinstage_status entered = ps_bind_enter(&buf->binding, d, caller);
        if (entered) ps_message_save(&why);
        s = ps_pinned_release(&buf->pinned, d, &ignored, caller);
        for (int i = 0; buf->have_events && i < PS_ENGINE_MAX_SLOTS; i++) {
            CUresult r = d->cuEventDestroy(buf->events[i]);
            if (r && !s) s = ps_fail_driver((pinstage_status)r, caller, "cuEventDestroy_v2");
        }
        s = ps_bind_leave(&buf->binding, s);
        if (entered) s = ps_message_restore(&why, entered); /* the first failure is the one to read */
    }
    /* The context goes last: what was made in it is gone by now. */
    if (buf->binding.retained && !ps_driver_get(&d)) {
        pinstage_status u = ps_unbind(&buf->binding, d, caller);
        if (!s) s = u;
    }
    free(buf->profile);
    free(buf);
    return s;
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

void pinstage_buffer_set_pinned_limit(pinstage_buffer *buf, size_t bytes) {
    if (buf) buf->pinned_limit = bytes;
}

void pinstage_buffer_set_strict(pinstage_buffer *buf, int strict) {
    if (buf) buf->strict = strict != 0;
}

void pinstage_buffer_set_adaptive(pinstage_buffer *buf, int on) {
    if (buf) buf->adaptive = on != 0;
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

/* The buffer's cap on its capacity, as an error for `capacity` bytes. */
static pinstage_status over_buffer_limit(const pinstage_buffer *buf, size_t capacity, const char *caller) {
    return ps_fail(PINSTAGE_ERROR_OUT_OF_MEMORY,
                   "%s: %zu pinned bytes would pass the buffer's pinned limit of %zu bytes "
                   "(pinstage_buffer_set_pinned_limit)", caller, capacity, buf->pinned_limit);
}

pinstage_status pinstage_buffer_reserve(pinstage_buffer *buf, size_t bytes) {
    static const char caller[] = "pinstage_buffer_reserve";
    const ps_driver *d;
    if (!buf) return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: buf is NULL", caller);
    if (bytes == 0) return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: bytes is 0", caller);
    size_t capacity = ps_pinned_round(bytes);
    if (capacity == 0)
        return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: bytes=%zu overflows when rounded up to %zu",
                       caller, bytes, PINSTAGE_CAPACITY_GRANULARITY);
    pinstage_status s = enter(buf, caller);
    if (s) return s;
    if (bytes <= buf->pinned.capacity) return leave(buf, PINSTAGE_SUCCESS);
    if (capacity > buf->pinned_limit) return leave(buf, over_buffer_limit(buf, capacity, caller));
    if ((s = begin(buf, &d, caller))) return leave(buf, s);
    int grew = 0, refused = 0;
    uint64_t ns = 0;
    s = ps_pinned_grow(&buf->pinned, d, capacity, ps_binding_node(&buf->binding), &ns, &grew, &refused, caller);
    buf->stats.release_failures += refused;
    if (grew) {
        buf->stats.pinned_allocations++;
        buf->stats.pin_time_ns += ns;
        if (capacity > buf->stats.peak_capacity) buf->stats.peak_capacity = capacity;
        s = PINSTAGE_SUCCESS; /* a refused release of the old block: orphaned, counted, named */
    }
    return leave(buf, s);
}

pinstage_status pinstage_buffer_shrink_to_fit(pinstage_buffer *buf) {
    static const char caller[] = "pinstage_buffer_shrink_to_fit";
    const ps_driver *d;
    /* A pinned pointer exists only if a driver was loaded to make it. */
    if (!buf) return PINSTAGE_SUCCESS;
    pinstage_status s = enter(buf, caller);
    if (s) return s;
    if (!buf->pinned.ptr || ps_driver_get(&d)) return leave(buf, PINSTAGE_SUCCESS);
    if ((s = ps_bind_enter(&buf->binding, d, caller))) return leave(buf, s);
    uint64_t ns = 0;
    s = ps_pinned_release(&buf->pinned, d, &ns, caller);
    if (s) buf->stats.release_failures++;
    else buf->stats.pin_time_ns += ns;
    return leave(buf, s);
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
    CUevent made[PS_ENGINE_MAX_SLOTS];
    for (int i = 0; i < PS_ENGINE_MAX_SLOTS; i++) {
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

/* The pinned block one transfer uses: the buffer's own when it is large
 * enough, else a fresh larger one that replaces it only if the transfer
 * succeeds. So a failed transfer leaves the buffer as it found it: same
 * block, capacity and counters (unless the driver ran out of pinned memory
 * while both were held: then the old block went first). */
typedef struct {
    ps_pinned fresh; /* empty when the buffer's own block is used */
    uint64_t ns;     /* time spent pinning it */
} pinning;

static unsigned char *pinned_ptr(const pinstage_buffer *buf, const pinning *p) {
    return p->fresh.ptr ? p->fresh.ptr : buf->pinned.ptr;
}

static pinstage_status pin(pinstage_buffer *buf, const ps_driver *d, size_t bytes, size_t elem_align,
                           pinning *p, const char *caller) {
    memset(p, 0, sizeof *p);
    pinstage_status s = ensure_events(buf, d, caller);
    if (s) return s;
    if (bytes <= buf->pinned.capacity) {
        if ((uintptr_t)buf->pinned.ptr % elem_align)
            return ps_fail(PINSTAGE_ERROR_INVALID_VALUE,
                           "%s: the pinned allocation at %p is not aligned to the element's %zu bytes", caller,
                           buf->pinned.ptr, elem_align);
        return PINSTAGE_SUCCESS;
    }
    size_t capacity = ps_pinned_round(bytes);
    if (capacity == 0)
        return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: bytes=%zu overflows when rounded up to %zu", caller, bytes,
                       PINSTAGE_CAPACITY_GRANULARITY);
    if (capacity > buf->pinned_limit) return over_buffer_limit(buf, capacity, caller);
    int refused = 0;
    s = ps_pinned_alloc_beside(&buf->pinned, d, &p->fresh, capacity, ps_binding_node(&buf->binding), &p->ns,
                               &refused, caller);
    buf->stats.release_failures += refused;
    if (s) return s;
    if ((uintptr_t)p->fresh.ptr % elem_align) {
        void *at = p->fresh.ptr;
        if (ps_pinned_release(&p->fresh, d, &p->ns, caller)) buf->stats.release_failures++;
        return ps_fail(PINSTAGE_ERROR_INVALID_VALUE,
                       "%s: the pinned allocation at %p is not aligned to the element's %zu bytes", caller, at,
                       elem_align);
    }
    return PINSTAGE_SUCCESS;
}

/* After the transfer: a fresh block replaces the buffer's if it succeeded
 * (then, and only then, it counts), else goes. */
static void unpin(pinstage_buffer *buf, const ps_driver *d, pinning *p, int succeeded, const char *caller) {
    if (!p->fresh.ptr) return;
    if (!succeeded) {
        uint64_t ignored = 0;
        ps_message why; /* the transfer's failure is what the caller reads */
        ps_message_save(&why);
        if (ps_pinned_release(&p->fresh, d, &ignored, caller)) buf->stats.release_failures++;
        ps_message_restore(&why, PINSTAGE_SUCCESS);
        return;
    }
    size_t capacity = p->fresh.capacity;
    if (ps_pinned_replace(&buf->pinned, d, &p->fresh, &p->ns, caller)) buf->stats.release_failures++;
    buf->stats.pinned_allocations++;
    buf->stats.pin_time_ns += p->ns;
    if (capacity > buf->stats.peak_capacity) buf->stats.peak_capacity = capacity;
}

/* A failed wait may leave a DMA on the block the transfer used. It is never
 * reused: releasing it waits for the device. */
static void retire_pinned(pinstage_buffer *buf, const ps_driver *d, pinning *p, const char *caller) {
    uint64_t ignored = 0;
    ps_message why;
    ps_message_save(&why);
    if (ps_pinned_release(p->fresh.ptr ? &p->fresh : &buf->pinned, d, &ignored, caller))
        buf->stats.release_failures++;
    buf->stats.retired_blocks++;
    ps_message_restore(&why, PINSTAGE_SUCCESS);
}

/* After a failure once a copy on the pinned block was enqueued. */
static void settle_pinned(pinstage_buffer *buf, const ps_driver *d, pinning *p, CUstream stream,
                          const char *caller) {
    if (ps_drain(d, buf->events[0], stream)) retire_pinned(buf, d, p, caller);
}

/* One DMA between the pinned block and the device, landed on return. */
static pinstage_status staged_copy(pinstage_buffer *buf, const ps_driver *d, pinning *p, ps_direction dir,
                                   CUdeviceptr dev, size_t bytes, CUstream stream, const char *caller) {
    unsigned char *pinned = pinned_ptr(buf, p);
    pinstage_status s = dir == PS_H2D ? ps_enqueue_h2d(d, dev, pinned, bytes, stream, caller)
                                      : ps_enqueue_d2h(d, pinned, dev, bytes, stream, caller);
    if (s) return s;
    if ((s = ps_record_and_wait(d, buf->events[0], stream, bytes, caller))) settle_pinned(buf, d, p, stream, caller);
    return s;
}

pinstage_status pinstage_buffer_upload_with(pinstage_buffer *buf, pinstage_devbuf *dst, size_t n,
                                            CUstream stream, pinstage_fill_fn fill,
                                            void *user_data) {
    static const char caller[] = "pinstage_buffer_upload_with";
    const ps_driver *d;
    size_t bytes = 0;
    pinning p;
    pinstage_status s = check_transfer(caller, buf, dst, "dst", fill != NULL, "fill", n, &bytes);
    if (s || (s = enter(buf, caller))) return s;
    if ((s = begin(buf, &d, caller)) || (s = pin(buf, d, bytes, dst->elem_align, &p, caller))) return leave(buf, s);
    fill(pinned_ptr(buf, &p), n, user_data);
    s = staged_copy(buf, d, &p, PS_H2D, dst->ptr, bytes, stream, caller);
    unpin(buf, d, &p, !s, caller);
    if (s) return leave(buf, s);
    buf->stats.staged_transfers++;
    buf->stats.bytes_uploaded += bytes;
    return leave(buf, PINSTAGE_SUCCESS);
}

pinstage_status pinstage_buffer_download_into(pinstage_buffer *buf, const pinstage_devbuf *src,
                                              size_t n, CUstream stream, const void **view) {
    static const char caller[] = "pinstage_buffer_download_into";
    const ps_driver *d;
    size_t bytes = 0;
    if (view) *view = NULL;
    pinning p;
    pinstage_status s = check_transfer(caller, buf, src, "src", view != NULL, "view", n, &bytes);
    if (s || (s = enter(buf, caller))) return s;
    if ((s = begin(buf, &d, caller)) || (s = pin(buf, d, bytes, src->elem_align, &p, caller))) return leave(buf, s);
    s = staged_copy(buf, d, &p, PS_D2H, src->ptr, bytes, stream, caller);
    unpin(buf, d, &p, !s, caller);
    if (s) return leave(buf, s);
    buf->stats.staged_transfers++;
    buf->stats.bytes_downloaded += bytes;
    *view = buf->pinned.ptr;
    return leave(buf, PINSTAGE_SUCCESS);
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

/* Already page-locked host memory: one DMA straight from / into it.
 * *refused: the driver refused the range at enqueue (INVALID_VALUE), so the
 * caller can stage it instead. */
static pinstage_status pinned_host_copy(const transfer *t, int *refused) {
    pinstage_status s = t->dir == PS_H2D ? ps_enqueue_h2d(t->d, t->dev, t->host, t->bytes, t->stream, t->caller)
                                         : ps_enqueue_d2h(t->d, t->host, t->dev, t->bytes, t->stream, t->caller);
    *refused = s == PINSTAGE_ERROR_INVALID_VALUE;
    if (s) return s;
    /* On failure the caller's memory may still be in a DMA: wait for it. */
    if ((s = ps_record_and_wait(t->d, t->buf->events[0], t->stream, t->bytes, t->caller)))
        ps_drain(t->d, t->buf->events[0], t->stream);
    return s;
}

/* The driver's pageable path; *refused as for pinned_host_copy (a range
 * partly page-locked inside). */
static pinstage_status pageable_copy(const transfer *t, int *refused) {
    return t->dir == PS_H2D
               ? ps_copy_h2d_pageable(t->d, t->dev, t->host, t->bytes, t->stream, t->buf->events[0], refused, t->caller)
               : ps_copy_d2h_pageable(t->d, t->host, t->dev, t->bytes, t->stream, t->buf->events[0], refused, t->caller);
}

/* Staged by one copy or the engine. Sets *unpinnable when the failure was
 * getting pinned memory at all (the caller may then fall back), *pinned
 * when the transfer had to pin a block first (its time is no measurement). */
static pinstage_status engine_copy(const transfer *t, const ps_plan *chosen, int governed, int *unpinnable,
                                   int *pinned) {
    pinstage_buffer *buf = t->buf;
    ps_pool *pool = ps_binding_pool(&buf->binding);
    ps_plan use = ps_engine_plan_shared(*chosen, t->dir, t->bytes, ps_pool_callers(pool));
    const ps_plan *plan = &use;
    /* As many threads as recent transfers of the size kept busy (governor.h). */
    ps_engine_report report, *asked_report = NULL;
    if (governed && use.route == PINSTAGE_ROUTE_ENGINE && t->bytes >= PS_GOVERNED_MIN) {
        use.threads = ps_governor_threads(t->dir, t->bytes, ps_engine_threads(pool, &use));
        asked_report = &report;
    }
    pinning p;
    pinstage_status s = pin(buf, t->d, ps_engine_footprint(t->dir, t->bytes, plan), 1, &p, t->caller);
    *unpinnable = s == PINSTAGE_ERROR_OUT_OF_MEMORY;
    *pinned = p.fresh.ptr != NULL;
    if (s) return s;
    ps_stage stage = {pinned_ptr(buf, &p), buf->events};
    int in_flight = 0;
    s = t->dir == PS_H2D ? ps_engine_h2d(t->d, pool, &stage, t->dev, t->host, t->bytes, t->stream, plan, &in_flight,
                                         asked_report, t->caller)
                         : ps_engine_d2h(t->d, pool, &stage, t->host, t->dev, t->bytes, t->stream, plan, &in_flight,
                                         asked_report, t->caller);
    /* A transfer that pinned first is no measure of its copy. */
    if (!s && asked_report && !*pinned)
        ps_governor_record(t->dir, t->bytes, use.threads, report.threads, report.copy_ns, report.wall_ns);
    if (s && in_flight) retire_pinned(buf, t->d, &p, t->caller);
    unpin(buf, t->d, &p, !s, t->caller);
    return s;
}

/* Whether the buffer's route follows recent transfers (adapt.c): a fixed
 * profile or an explicit threshold means what it says. */
static int adapts(const pinstage_buffer *buf, const pinstage_profile *profile) {
    return buf->adaptive && buf->auto_stage_max_bytes == PINSTAGE_AUTO_STAGE_PROFILE &&
           profile->origin != PINSTAGE_PROFILE_FIXED && ps_adapt_enabled();
}

/* A transfer that went as picked: the counters, and its time for adapt.c. */
static void picked(pinstage_buffer *buf, const transfer *t, const ps_adapt_pick *pick, int route, uint64_t start) {
    buf->stats.route_probes += pick->probe;
    buf->stats.route_overrides += pick->overridden;
    if (!start) return;
    if (pick->probe && route == PINSTAGE_ROUTE_ENGINE && ps_pool_last_woken() && ps_adapt_cold_probe(t->dir, t->bytes))
        return;
    ps_adapt_record(t->dir, t->bytes, route, ps_adapt_now_ns() - start);
}

/* Uploads this small to the pageable route are not asked whether their
 * memory is page-locked. */
#define UNASKED_MAX ((size_t)64 << 10)

static pinstage_status move_pageable(transfer *t, const pinstage_profile *profile, ps_plan plan, ps_host_kind kind);

static pinstage_status move(transfer *t) {
    pinstage_buffer *buf = t->buf;
    pinstage_status s = ensure_events(buf, t->d, t->caller);
    if (s) return s;
    const pinstage_profile *profile = buf->profile ? buf->profile : ps_binding_profile(&buf->binding);
    ps_plan plan = ps_choose_plan(profile, t->dir, t->bytes, buf->auto_stage_max_bytes);
    /* The driver's pageable copy moves page-locked memory by DMA as well, so
     * a small upload it takes (a few KiB, where a tenth of a microsecond
     * counts) skips the question. */
    ps_host_kind kind = t->dir == PS_H2D && plan.route == PINSTAGE_ROUTE_PAGEABLE && t->bytes <= UNASKED_MAX
                            ? PS_HOST_PAGEABLE
                            : ps_host_kind_of(t->d, t->host, t->bytes);
    int refused = 0;
    if (kind == PS_HOST_PINNED) {
        s = pinned_host_copy(t, &refused);
        if (!refused) {
            if (!s) buf->stats.pinned_host_transfers++;
            return s;
        }
        kind = PS_HOST_PARTLY_PINNED; /* e.g. two adjacent registrations */
    }
    ps_adapt_begin();
    s = move_pageable(t, profile, plan, kind);
    ps_adapt_end();
    return s;
}

/* move() for memory that is not (wholly) page-locked: the route, then the copy. */
static pinstage_status move_pageable(transfer *t, const pinstage_profile *profile, ps_plan plan, ps_host_kind kind) {
    pinstage_buffer *buf = t->buf;
    pinstage_status s;
    int refused = 0;
    ps_adapt_pick pick = {plan, 0, 0, 0};
    uint64_t start = 0;
    if (kind == PS_HOST_PAGEABLE && adapts(buf, profile)) {
        ps_plan other = plan.route == PINSTAGE_ROUTE_PAGEABLE ? ps_choose_plan(profile, t->dir, t->bytes, SIZE_MAX)
                                                              : (ps_plan){PINSTAGE_ROUTE_PAGEABLE, 0, 0};
        pick = ps_adapt_choose(t->dir, t->bytes, plan, other);
        plan = pick.plan;
        if (pick.timed) start = ps_adapt_now_ns();
    }
    if (plan.route == PINSTAGE_ROUTE_PAGEABLE && kind == PS_HOST_PAGEABLE) {
        s = pageable_copy(t, &refused);
        if (!refused) {
            if (!s) {
                buf->stats.pageable_transfers++;
                picked(buf, t, &pick, PINSTAGE_ROUTE_PAGEABLE, start);
            }
            return s;
        }
        start = 0; /* staged below for a reason of its own */
    }
    /* Staged: by choice, or because the driver does not take the range. */
    int tried_pageable = plan.route == PINSTAGE_ROUTE_PAGEABLE && kind == PS_HOST_PAGEABLE;
    if (plan.route == PINSTAGE_ROUTE_PAGEABLE) plan = ps_choose_plan(profile, t->dir, t->bytes, SIZE_MAX);
    int unpinnable = 0, pinned = 0;
    if ((s = engine_copy(t, &plan, adapts(buf, profile), &unpinnable, &pinned))) {
        /* No pinned memory to be had (a limit, a container's locked-memory
         * cap): the driver's pageable path still works, unless told not to. */
        if (!unpinnable || buf->strict || tried_pageable || kind != PS_HOST_PAGEABLE) return s;
        if ((s = pageable_copy(t, &refused))) return s;
        buf->stats.pageable_transfers++;
        buf->stats.pinned_fallbacks++;
        return PINSTAGE_SUCCESS;
    }
    buf->stats.staged_transfers++;
    buf->stats.engine_transfers += plan.route == PINSTAGE_ROUTE_ENGINE;
    picked(buf, t, &pick, plan.route, pinned || tried_pageable ? 0 : start);
    return PINSTAGE_SUCCESS;
}

pinstage_status pinstage_buffer_upload(pinstage_buffer *buf, pinstage_devbuf *dst, const void *src,
                                       size_t n, CUstream stream) {
    static const char caller[] = "pinstage_buffer_upload";
    size_t bytes = 0;
    pinstage_status s = check_transfer(caller, buf, dst, "dst", src != NULL, "src", n, &bytes);
    transfer t = {buf, NULL, PS_H2D, 0, (unsigned char *)src, bytes, stream, caller};
    if (s || (s = enter(buf, caller))) return s;
    if ((s = begin(buf, &t.d, caller))) return leave(buf, s);
    t.dev = dst->ptr;
    if ((s = move(&t))) return leave(buf, s);
    buf->stats.bytes_uploaded += bytes;
    return leave(buf, PINSTAGE_SUCCESS);
}

pinstage_status pinstage_buffer_download(pinstage_buffer *buf, void *dst, size_t n,
                                         const pinstage_devbuf *src, CUstream stream) {
    static const char caller[] = "pinstage_buffer_download";
    size_t bytes = 0;
    pinstage_status s = check_transfer(caller, buf, src, "src", dst != NULL, "dst", n, &bytes);
    transfer t = {buf, NULL, PS_D2H, 0, dst, bytes, stream, caller};
    if (s || (s = enter(buf, caller))) return s;
    if ((s = begin(buf, &t.d, caller))) return leave(buf, s);
    t.dev = src->ptr;
    if ((s = move(&t))) return leave(buf, s);
    buf->stats.bytes_downloaded += bytes;
    return leave(buf, PINSTAGE_SUCCESS);
}

/* ---- Devices and placement ---------------------------------------------------- */

pinstage_status pinstage_buffer_bind(pinstage_buffer *buf, const pinstage_binding *binding) {
    static const char caller[] = "pinstage_buffer_bind";
    if (!buf) return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: buf is NULL", caller);
    if (buf->in_call) return ps_fail(PINSTAGE_ERROR_NOT_PERMITTED, "%s: called from the buffer's own fill callback", caller);
    /* Its events and pinned memory belong to the context it has now. */
    if (buf->have_events || buf->pinned.ptr)
        return ps_fail(PINSTAGE_ERROR_INVALID_VALUE,
                       "%s: the buffer is in use (it holds pinned memory or has made a transfer); bind it right "
                       "after pinstage_buffer_create", caller);
    return ps_bind(&buf->binding, binding, caller);
}

pinstage_status pinstage_buffer_get_placement(const pinstage_buffer *buf, pinstage_placement *out) {
    static const char caller[] = "pinstage_buffer_get_placement";
    if (!buf || !out) return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: %s is NULL", caller, buf ? "out" : "buf");
    ps_binding_placement(&buf->binding, out);
    out->pinned_bytes = buf->pinned.capacity;
    out->memory_found = ps_numa_where(buf->pinned.ptr, buf->pinned.capacity);
    return PINSTAGE_SUCCESS;
}
