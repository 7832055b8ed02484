/* SPDX-License-Identifier: MIT */
/* The asynchronous ring: K pinned slots, each guarded by an event recorded
 * behind its last copy, handed out so that no copy ever touches bytes
 * another copy may still use. Every call reads as
 *   argument checks -> pick a slot (free, LRU) -> make it safe to use
 *   (host wait for uploads, device-side wait for downloads) -> grow it ->
 *   enqueue the copy (copy.c) -> record the slot's event -> stats
 *
 * Slot fields are owned by the ring, which one thread uses at a time; the
 * worker pool only ever sees the bytes of an upload's host copy, joined
 * before the copy is enqueued. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "copy.h"
#include "devbuf.h"
#include "device.h"
#include "engine.h"
#include "numa.h"
#include "pinned.h"
#include "status.h"

typedef enum {
    SLOT_FREE,   /* any caller may have it (its copy may still be in flight: `busy`) */
    SLOT_TICKET, /* holds a download whose ticket is outstanding */
    SLOT_VIEWED  /* holds a collected download: its view lives until reuse */
} slot_state;

typedef struct ring_slot {
    ps_pinned pinned;
    CUevent event;           /* recorded behind the slot's last copy */
    int busy;                /* that copy has not been seen to land */
    size_t copy_bytes;       /* its size: how long a wait should expect */
    slot_state state;
    pinstage_ticket ticket;  /* SLOT_TICKET, SLOT_VIEWED */
    pinstage_status failure; /* SLOT_TICKET: its copy failed; reported at completion */
    uint64_t handed_out;     /* when (ring->handouts) it was last given to a copy */
} ring_slot;

struct pinstage_ring {
    unsigned count;
    unsigned flags;
    int have_events;
    int in_call; /* an upload's fill callback is running */
    uint64_t handouts; /* copies handed a slot so far; tickets are its values */
    ps_binding binding; /* its device, context and NUMA node (device.h) */
    pinstage_ring_stats stats;
    ring_slot slot[];
};

/* Uploads whose host copy is at least this large share it with the pool. */
#define POOL_COPY_MIN ((size_t)256 << 10)

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

pinstage_status pinstage_ring_create(pinstage_ring **out, unsigned slots, unsigned flags) {
    static const char caller[] = "pinstage_ring_create";
    if (!out) return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: out is NULL", caller);
    *out = NULL;
    if (slots == 0 || slots > PINSTAGE_RING_MAX_SLOTS)
        return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: slots=%u, expected 1 to %u", caller, slots,
                       PINSTAGE_RING_MAX_SLOTS);
    if (flags & ~PINSTAGE_RING_NONBLOCKING)
        return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: unknown flags 0x%x", caller, flags & ~PINSTAGE_RING_NONBLOCKING);
    pinstage_ring *ring = calloc(1, sizeof *ring + slots * sizeof ring->slot[0]);
    if (!ring) return ps_fail(PINSTAGE_ERROR_OUT_OF_MEMORY, "%s: out of host memory", caller);
    ring->count = slots;
    ring->flags = flags;
    *out = ring;
    return PINSTAGE_SUCCESS;
}

void pinstage_ring_get_stats(const pinstage_ring *ring, pinstage_ring_stats *stats) {
    if (!stats) return;
    if (ring)
        *stats = ring->stats;
    else
        memset(stats, 0, sizeof *stats);
}

/* ---- Slot bookkeeping ------------------------------------------------------------ */

static void count_pinned(pinstage_ring *ring) {
    size_t total = 0;
    for (unsigned i = 0; i < ring->count; i++) total += ring->slot[i].pinned.capacity;
    ring->stats.pinned_bytes = total;
    if (total > ring->stats.peak_pinned_bytes) ring->stats.peak_pinned_bytes = total;
}

/* A wait on the slot's copy failed: the DMA may still use the block, so it
 * is dropped (releasing it waits for the device) and never reused. */
static void retire(pinstage_ring *ring, const ps_driver *d, ring_slot *s) {
    ps_message why; /* the failure that caused it is what the caller reads */
    ps_message_save(&why);
    uint64_t ignored = 0;
    /* A refused release orphans the block: never handed out again. */
    if (ps_pinned_release(&s->pinned, d, &ignored, "pinstage_ring")) ring->stats.release_failures++;
    ps_message_restore(&why, PINSTAGE_SUCCESS);
    ring->stats.retired_blocks++;
    s->busy = 0;
    count_pinned(ring);
}

/* Ends whatever the slot held: it becomes free. */
static void clear_slot(ring_slot *s) {
    s->state = SLOT_FREE;
    s->ticket = 0;
    s->failure = PINSTAGE_SUCCESS;
}

/* CUDA_SUCCESS once the slot's last copy has landed, CUDA_ERROR_NOT_READY
 * while it runs, else the driver's error. */
static CUresult slot_query(const ps_driver *d, ring_slot *s) {
    if (!s->busy) return CUDA_SUCCESS;
    CUresult r = d->cuEventQuery(s->event);
    if (r == CUDA_SUCCESS) s->busy = 0;
    return r;
}

/* Waits for the slot's last copy; on failure the slot is retired. */
static pinstage_status slot_wait(pinstage_ring *ring, const ps_driver *d, ring_slot *s, const char *caller) {
    if (!s->busy) return PINSTAGE_SUCCESS;
    pinstage_status st = ps_wait_event(d, s->event, s->copy_bytes, caller);
    if (st) {
        retire(ring, d, s);
        return st;
    }
    s->busy = 0;
    return PINSTAGE_SUCCESS;
}

/* A query of the slot's event failed: named, and the slot retired. */
static pinstage_status query_failed(pinstage_ring *ring, const ps_driver *d, ring_slot *s, CUresult r,
                                    const char *caller) {
    pinstage_status st = ps_fail_driver((pinstage_status)r, caller, "cuEventQuery");
    retire(ring, d, s);
    return st;
}

/* After an enqueued copy's event could not be recorded: wait for the copy
 * through the stream, or retire the slot when even that fails. */
static void settle_unrecorded(pinstage_ring *ring, const ps_driver *d, ring_slot *s, CUstream stream) {
    if (ps_drain(d, s->event, stream)) retire(ring, d, s);
    else s->busy = 0;
}

static pinstage_status ensure_events(pinstage_ring *ring, const ps_driver *d, const char *caller) {
    if (ring->have_events) return PINSTAGE_SUCCESS;
    for (unsigned i = 0; i < ring->count; i++) {
        CUresult r = d->cuEventCreate(&ring->slot[i].event, CU_EVENT_DISABLE_TIMING);
        if (r) {
            while (i--) d->cuEventDestroy(ring->slot[i].event);
            return ps_fail_driver((pinstage_status)r, caller, "cuEventCreate");
        }
    }
    ring->have_events = 1;
    return PINSTAGE_SUCCESS;
}

/* The candidates for a new copy, best first: free slots least recently
 * handed out, then collected downloads oldest first. Returns how many;
 * *free says how many of them are free slots. */
static unsigned candidates(const pinstage_ring *ring, unsigned *order, unsigned *free_slots) {
    unsigned n = 0;
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) *free_slots = n;
        slot_state want = pass == 0 ? SLOT_FREE : SLOT_VIEWED;
        unsigned first = n;
        for (unsigned i = 0; i < ring->count; i++) {
            if (ring->slot[i].state != want) continue;
            /* Insertion by handed_out: K is small. */
            unsigned j = n++;
            while (j > first && ring->slot[order[j - 1]].handed_out > ring->slot[i].handed_out) {
                order[j] = order[j - 1];
                j--;
            }
            order[j] = i;
        }
    }
    return n;
}

/* Picks a slot for a copy of `bytes` and makes it safe to use:
 *  - host_writes (uploads): its last copy has landed (a host wait, or
 *    NOT_READY for a non-blocking ring);
 *  - otherwise (downloads): the new copy will be queued behind it on
 *    `stream` (cuStreamWaitEvent, called by the caller via *wait_first).
 * Grows the slot to `bytes` and checks alignment. Changes nothing but the
 * slot's block (grown, or retired after a failed wait) on failure. */
static pinstage_status acquire(pinstage_ring *ring, const ps_driver *d, int host_writes, size_t bytes,
                               size_t align, ring_slot **out, const char *caller) {
    unsigned order[PINSTAGE_RING_MAX_SLOTS], free_slots = 0;
    unsigned n = candidates(ring, order, &free_slots);
    if (n == 0)
        return ps_fail(PINSTAGE_ERROR_NOT_PERMITTED,
                       "%s: all %u slots hold downloads whose tickets were neither completed nor released",
                       caller, ring->count);
    size_t capacity = ps_pinned_round(bytes);
    if (capacity == 0)
        return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: %zu bytes overflow when rounded up to %zu", caller, bytes,
                       PINSTAGE_CAPACITY_GRANULARITY);
    ring_slot *s = NULL;
    if (!host_writes) {
        /* Downloads never wait on the host, except to replace a block: a
         * free slot that is large enough first (never a view's slot). */
        for (unsigned k = 0; k < free_slots && !s; k++)
            if (bytes <= ring->slot[order[k]].pinned.capacity) s = &ring->slot[order[k]];
    } else {
        /* The first candidate whose copy has landed; asking costs a query each. */
        for (unsigned k = 0; k < n && !s; k++) {
            ring_slot *c = &ring->slot[order[k]];
            CUresult r = slot_query(d, c);
            if (r == CUDA_SUCCESS) s = c;
            else if (r != CUDA_ERROR_NOT_READY) return query_failed(ring, d, c, r, caller);
        }
    }
    /* Otherwise the best candidate; if it is busy, it was just asked. */
    int known_busy = !s && host_writes;
    if (!s) s = &ring->slot[order[0]];
    int must_land = host_writes || bytes > s->pinned.capacity;
    if (must_land && s->busy) {
        CUresult r = known_busy ? CUDA_ERROR_NOT_READY : slot_query(d, s);
        if (r == CUDA_ERROR_NOT_READY) {
            if (ring->flags & PINSTAGE_RING_NONBLOCKING) {
                ring->stats.would_block++;
                return ps_fail(PINSTAGE_ERROR_NOT_READY, "%s: every slot an upload may use is busy (non-blocking ring of %u)",
                               caller, ring->count);
            }
            uint64_t start = now_ns();
            pinstage_status st = slot_wait(ring, d, s, caller);
            ring->stats.slot_waits++;
            ring->stats.slot_wait_ns += now_ns() - start;
            if (st) return st;
        } else if (r != CUDA_SUCCESS)
            return query_failed(ring, d, s, r, caller);
    }
    if (bytes > s->pinned.capacity) {
        int grew = 0, refused = 0;
        pinstage_status st = ps_pinned_grow(&s->pinned, d, capacity, ps_binding_node(&ring->binding),
                                            &ring->stats.pin_time_ns, &grew, &refused, caller);
        count_pinned(ring);
        ring->stats.release_failures += refused; /* orphaned blocks */
        if (!grew) return st;
        ring->stats.pinned_allocations++;
    }
    if ((uintptr_t)s->pinned.ptr % align)
        return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: the slot's pinned memory at %p is not aligned to the element's %zu bytes",
                       caller, s->pinned.ptr, align);
    *out = s;
    return PINSTAGE_SUCCESS;
}

/* Records the slot's event behind the copy just enqueued and hands the
 * slot to it. On failure the copy is waited for (or the slot retired). */
static pinstage_status commit(pinstage_ring *ring, const ps_driver *d, ring_slot *s, size_t bytes, CUstream stream,
                              const char *caller) {
    pinstage_status st = ps_record(d, s->event, stream, caller);
    if (st) {
        settle_unrecorded(ring, d, s, stream);
        clear_slot(s);
        return st;
    }
    s->busy = 1;
    s->copy_bytes = bytes;
    s->handed_out = ++ring->handouts;
    clear_slot(s);
    return PINSTAGE_SUCCESS;
}

/* ---- Uploads and downloads --------------------------------------------------------- */

/* NULL, or called from inside the ring's own fill callback. */
static pinstage_status check_ring(const pinstage_ring *ring, const char *caller) {
    if (!ring) return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: ring is NULL", caller);
    if (ring->in_call)
        return ps_fail(PINSTAGE_ERROR_NOT_PERMITTED, "%s: called on a ring whose own call is still running (from its "
                       "fill callback?)", caller);
    return PINSTAGE_SUCCESS;
}

/* The driver, and the ring's context current if it is bound; every call
 * that starts with it ends with ps_bind_leave. */
static pinstage_status begin(pinstage_ring *ring, const ps_driver **d, const char *caller) {
    pinstage_status st = ps_driver_get(d);
    return st ? st : ps_bind_enter(&ring->binding, *d, caller);
}

static pinstage_status check_args(const char *caller, const pinstage_ring *ring, const pinstage_devbuf *dev,
                                  const char *dev_name, int other_given, const char *other_name, size_t n,
                                  size_t *bytes) {
    pinstage_status s = check_ring(ring, caller);
    if (s) return s;
    if (!dev) return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: %s is NULL", caller, dev_name);
    if (!other_given) return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: %s is NULL", caller, other_name);
    if (n == 0) return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: n is 0", caller);
    if (n != dev->len)
        return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: n=%zu but %s holds %zu elements", caller, n, dev_name,
                       dev->len);
    *bytes = n * dev->elem_size; /* checked when the device buffer was made */
    return PINSTAGE_SUCCESS;
}

/* An upload: a slot whose last copy has landed, written by `fill` or from
 * `src`, then the DMA and the event. */
static pinstage_status upload_in_context(pinstage_ring *ring, const ps_driver *d, pinstage_devbuf *dst, size_t bytes,
                                         CUstream stream, pinstage_fill_fn fill, void *user_data, const void *src,
                                         size_t n, const char *caller) {
    ring_slot *s;
    pinstage_status st;
    if ((st = ensure_events(ring, d, caller)) || (st = acquire(ring, d, 1, bytes, dst->elem_align, &s, caller)))
        return st;
    if (fill) {
        ring->in_call = 1;
        fill(s->pinned.ptr, n, user_data);
        ring->in_call = 0;
    } else if (bytes >= POOL_COPY_MIN)
        ps_engine_copy_in(ps_binding_pool(&ring->binding), s->pinned.ptr, src, bytes);
    else
        memcpy(s->pinned.ptr, src, bytes);
    clear_slot(s); /* a collected view it held is overwritten now */
    /* Nothing enqueued on failure: the slot is as it was, landed and free. */
    if ((st = ps_enqueue_h2d(d, dst->ptr, s->pinned.ptr, bytes, stream, caller))) return st;
    if ((st = commit(ring, d, s, bytes, stream, caller))) return st;
    ring->stats.uploads++;
    ring->stats.bytes_uploaded += bytes;
    return PINSTAGE_SUCCESS;
}

static pinstage_status upload(pinstage_ring *ring, pinstage_devbuf *dst, size_t bytes, CUstream stream,
                              pinstage_fill_fn fill, void *user_data, const void *src, size_t n, const char *caller) {
    const ps_driver *d;
    pinstage_status st = begin(ring, &d, caller);
    if (!st) st = upload_in_context(ring, d, dst, bytes, stream, fill, user_data, src, n, caller);
    return ps_bind_leave(&ring->binding, st);
}

pinstage_status pinstage_ring_upload_with_async(pinstage_ring *ring, pinstage_devbuf *dst, size_t n, CUstream stream,
                                                pinstage_fill_fn fill, void *user_data) {
    static const char caller[] = "pinstage_ring_upload_with_async";
    size_t bytes = 0;
    pinstage_status st = check_args(caller, ring, dst, "dst", fill != NULL, "fill", n, &bytes);
    return st ? st : upload(ring, dst, bytes, stream, fill, user_data, NULL, n, caller);
}

pinstage_status pinstage_ring_upload_async(pinstage_ring *ring, pinstage_devbuf *dst, const void *src, size_t n,
                                           CUstream stream) {
    static const char caller[] = "pinstage_ring_upload_async";
    size_t bytes = 0;
    pinstage_status st = check_args(caller, ring, dst, "dst", src != NULL, "src", n, &bytes);
    return st ? st : upload(ring, dst, bytes, stream, NULL, NULL, src, n, caller);
}

static pinstage_status download_in_context(pinstage_ring *ring, const ps_driver *d, const pinstage_devbuf *src,
                                           size_t bytes, CUstream stream, pinstage_ticket *ticket,
                                           const char *caller) {
    ring_slot *s;
    pinstage_status st;
    if ((st = ensure_events(ring, d, caller)) || (st = acquire(ring, d, 0, bytes, src->elem_align, &s, caller)))
        return st;
    /* Behind the slot's last copy, on whatever stream that ran: the handle
     * is not compared, since a destroyed stream's handle can come back. */
    CUresult r = slot_query(d, s);
    if (r == CUDA_ERROR_NOT_READY) {
        if ((r = d->cuStreamWaitEvent(stream, s->event, 0)))
            return ps_fail_driver((pinstage_status)r, caller, "cuStreamWaitEvent");
    } else if (r)
        return query_failed(ring, d, s, r, caller);
    if ((st = ps_enqueue_d2h(d, s->pinned.ptr, src->ptr, bytes, stream, caller))) return st;
    if ((st = commit(ring, d, s, bytes, stream, caller))) return st;
    s->state = SLOT_TICKET;
    s->ticket = *ticket = ring->handouts;
    ring->stats.downloads++;
    ring->stats.bytes_downloaded += bytes;
    return PINSTAGE_SUCCESS;
}

pinstage_status pinstage_ring_download_async(pinstage_ring *ring, const pinstage_devbuf *src, size_t n,
                                             CUstream stream, pinstage_ticket *ticket) {
    static const char caller[] = "pinstage_ring_download_async";
    const ps_driver *d;
    size_t bytes = 0;
    if (ticket) *ticket = 0;
    pinstage_status st = check_args(caller, ring, src, "src", ticket != NULL, "ticket", n, &bytes);
    if (st || (st = begin(ring, &d, caller))) return st;
    st = download_in_context(ring, d, src, bytes, stream, ticket, caller);
    return ps_bind_leave(&ring->binding, st);
}

/* ---- Tickets ---------------------------------------------------------------------- */

/* The slot holding an outstanding ticket, or INVALID_VALUE. */
static pinstage_status find_ticket(pinstage_ring *ring, pinstage_ticket ticket, ring_slot **out, const char *caller) {
    for (unsigned i = 0; ticket && i < ring->count; i++)
        if (ring->slot[i].state != SLOT_FREE && ring->slot[i].ticket == ticket) {
            *out = &ring->slot[i];
            return PINSTAGE_SUCCESS;
        }
    return ps_fail(PINSTAGE_ERROR_INVALID_VALUE,
                   "%s: ticket %llu is not outstanding (released, its slot handed out again, or never issued)", caller,
                   (unsigned long long)ticket);
}

static pinstage_status complete(pinstage_ring *ring, pinstage_ticket ticket, const void **view, int wait,
                                const char *caller) {
    const ps_driver *d;
    if (view) *view = NULL;
    pinstage_status checked = check_ring(ring, caller);
    if (checked) return checked;
    if (!view) return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: view is NULL", caller);
    ring_slot *s = NULL;
    if ((checked = find_ticket(ring, ticket, &s, caller))) return checked;
    if (s->state == SLOT_TICKET && s->failure) {
        pinstage_status failure = s->failure;
        clear_slot(s);
        return ps_fail(failure, "%s: ticket %llu's copy failed: %s", caller, (unsigned long long)ticket,
                       pinstage_status_name(failure));
    }
    if (s->busy) {
        pinstage_status st = begin(ring, &d, caller);
        if (st) return st;
        if (wait) {
            st = slot_wait(ring, d, s, caller);
        } else {
            CUresult r = slot_query(d, s);
            if (r == CUDA_ERROR_NOT_READY)
                return ps_bind_leave(&ring->binding,
                                     ps_fail(PINSTAGE_ERROR_NOT_READY, "%s: ticket %llu's copy has not landed yet",
                                             caller, (unsigned long long)ticket));
            if (r) st = query_failed(ring, d, s, r, caller);
        }
        st = ps_bind_leave(&ring->binding, st);
        if (st) {
            clear_slot(s);
            return st;
        }
    }
    s->state = SLOT_VIEWED;
    *view = s->pinned.ptr;
    return PINSTAGE_SUCCESS;
}

pinstage_status pinstage_ring_wait(pinstage_ring *ring, pinstage_ticket ticket, const void **view) {
    return complete(ring, ticket, view, 1, "pinstage_ring_wait");
}

pinstage_status pinstage_ring_poll(pinstage_ring *ring, pinstage_ticket ticket, const void **view) {
    return complete(ring, ticket, view, 0, "pinstage_ring_poll");
}

pinstage_status pinstage_ring_release(pinstage_ring *ring, pinstage_ticket ticket) {
    static const char caller[] = "pinstage_ring_release";
    pinstage_status checked = check_ring(ring, caller);
    if (checked) return checked;
    ring_slot *s = NULL;
    if ((checked = find_ticket(ring, ticket, &s, caller))) return checked;
    /* A copy still in flight keeps the slot busy: reuse waits for it. */
    clear_slot(s);
    return PINSTAGE_SUCCESS;
}

/* ---- Whole-ring calls ------------------------------------------------------------- */

/* Waits for every slot's copy; a failed wait retires the slot and marks
 * its download failed. Returns the first error. */
static pinstage_status wait_all(pinstage_ring *ring, const ps_driver *d, const char *caller) {
    pinstage_status first = PINSTAGE_SUCCESS;
    ps_message message;
    for (unsigned i = 0; i < ring->count; i++) {
        ring_slot *s = &ring->slot[i];
        pinstage_status st = slot_wait(ring, d, s, caller);
        if (!st) continue;
        if (s->state == SLOT_TICKET) s->failure = st;
        if (!first) {
            first = st;
            ps_message_save(&message);
        }
    }
    return first ? ps_message_restore(&message, first) : PINSTAGE_SUCCESS;
}

pinstage_status pinstage_ring_synchronize(pinstage_ring *ring) {
    static const char caller[] = "pinstage_ring_synchronize";
    const ps_driver *d;
    pinstage_status checked = check_ring(ring, caller);
    if (checked) return checked;
    if (!ring->have_events) return PINSTAGE_SUCCESS; /* nothing was ever enqueued */
    pinstage_status st = begin(ring, &d, caller);
    return st ? st : ps_bind_leave(&ring->binding, wait_all(ring, d, caller));
}

pinstage_status pinstage_ring_reserve(pinstage_ring *ring, size_t bytes) {
    static const char caller[] = "pinstage_ring_reserve";
    const ps_driver *d;
    pinstage_status checked = check_ring(ring, caller);
    if (checked) return checked;
    if (bytes == 0) return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: bytes is 0", caller);
    size_t capacity = ps_pinned_round(bytes);
    if (capacity == 0)
        return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: bytes=%zu overflows when rounded up to %zu", caller, bytes,
                       PINSTAGE_CAPACITY_GRANULARITY);
    pinstage_status st = begin(ring, &d, caller);
    if (st) return st;
    for (unsigned i = 0; i < ring->count && !st; i++) {
        ring_slot *s = &ring->slot[i];
        if (s->pinned.capacity >= capacity) continue;
        /* A collected view is lost once its block is replaced. */
        if (s->state == SLOT_TICKET) continue;
        if ((st = slot_wait(ring, d, s, caller))) break;
        int grew = 0, refused = 0;
        st = ps_pinned_grow(&s->pinned, d, capacity, ps_binding_node(&ring->binding), &ring->stats.pin_time_ns,
                            &grew, &refused, caller);
        ring->stats.release_failures += refused;
        if (grew) {
            ring->stats.pinned_allocations++;
            st = PINSTAGE_SUCCESS;
            if (s->state == SLOT_VIEWED) clear_slot(s);
        }
        count_pinned(ring);
    }
    return ps_bind_leave(&ring->binding, st);
}

pinstage_status pinstage_ring_free(pinstage_ring *ring) {
    static const char caller[] = "pinstage_ring_free";
    const ps_driver *d;
    pinstage_status st = PINSTAGE_SUCCESS;
    if (!ring) return PINSTAGE_SUCCESS;
    if (ring->in_call)
        return ps_fail(PINSTAGE_ERROR_NOT_PERMITTED, "%s: called on a ring whose own call is still running", caller);
    /* Events and pinned memory exist only if a driver was loaded to make them. */
    int made = ring->have_events;
    for (unsigned i = 0; i < ring->count; i++) made |= ring->slot[i].pinned.ptr != NULL;
    if (made && !ps_driver_get(&d)) {
        ps_message first;
        /* Without its context current the releases are still tried. */
        ps_message why;
        pinstage_status entered = ps_bind_enter(&ring->binding, d, caller);
        if (entered) ps_message_save(&why);
        st = wait_all(ring, d, caller);
        ps_message_save(&first);
        /* Refused releases are orphaned (released later) and reported. */
        for (unsigned i = 0; i < ring->count; i++) {
            uint64_t ignored = 0;
            pinstage_status r = ps_pinned_release(&ring->slot[i].pinned, d, &ignored, caller);
            if (r && !st) st = r, ps_message_save(&first);
            CUresult e = ring->have_events ? d->cuEventDestroy(ring->slot[i].event) : CUDA_SUCCESS;
            if (e && !st) st = ps_fail_driver((pinstage_status)e, caller, "cuEventDestroy_v2"), ps_message_save(&first);
        }
        if (st) ps_message_restore(&first, st);
        st = ps_bind_leave(&ring->binding, st);
        if (entered) st = ps_message_restore(&why, entered); /* the first failure is the one to read */
    }
    /* The context goes last: what was made in it is gone by now. */
    if (ring->binding.retained && !ps_driver_get(&d)) {
        pinstage_status u = ps_unbind(&ring->binding, d, caller);
        if (!st) st = u;
    }
    free(ring);
    return st;
}

/* ---- Devices and placement ---------------------------------------------------- */

pinstage_status pinstage_ring_bind(pinstage_ring *ring, const pinstage_binding *binding) {
    static const char caller[] = "pinstage_ring_bind";
    pinstage_status st = check_ring(ring, caller);
    if (st) return st;
    int used = ring->have_events;
    for (unsigned i = 0; i < ring->count; i++) used |= ring->slot[i].pinned.ptr != NULL;
    /* Its events and pinned memory belong to the context it has now. */
    if (used)
        return ps_fail(PINSTAGE_ERROR_INVALID_VALUE,
                       "%s: the ring is in use (it holds pinned memory or has made a copy); bind it right after "
                       "pinstage_ring_create", caller);
    return ps_bind(&ring->binding, binding, caller);
}

pinstage_status pinstage_ring_get_placement(const pinstage_ring *ring, pinstage_placement *out) {
    static const char caller[] = "pinstage_ring_get_placement";
    if (!ring || !out) return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: %s is NULL", caller, ring ? "out" : "ring");
    ps_binding_placement(&ring->binding, out);
    int found = -3; /* no block yet */
    for (unsigned i = 0; i < ring->count; i++) {
        const ps_pinned *p = &ring->slot[i].pinned;
        if (!p->ptr) continue;
        out->pinned_bytes += p->capacity;
        int where = ps_numa_where(p->ptr, p->capacity);
        /* Several nodes is known once any block says so; then "not known". */
        if (found == -3) found = where;
        else if (found == -2 || where == -2) found = -2;
        else if (found == -1 || where == -1) found = -1;
        else if (found != where) found = -2;
    }
    out->memory_found = found == -3 ? -1 : found;
    return PINSTAGE_SUCCESS;
}
