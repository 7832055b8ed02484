/* SPDX-License-Identifier: MIT */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "numa.h"
#include "pinned.h"
#include "status.h"

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

size_t ps_pinned_round(size_t bytes) {
    const size_t g = PINSTAGE_CAPACITY_GRANULARITY;
    if (bytes > SIZE_MAX - (g - 1)) return 0;
    return (bytes + g - 1) / g * g;
}

/* ---- The process's pinned accounting ------------------------------------------------ */

/* held and limit: relaxed atomics, since they order nothing but themselves;
 * a reservation is taken before an allocation and given back if it fails,
 * so `held` never undercounts what is pinned. The orphan list: one mutex;
 * orphan_count mirrors its length so the common case (none) takes no lock. */
static _Atomic size_t held;
static _Atomic size_t limit = SIZE_MAX;
static pthread_mutex_t orphan_lock = PTHREAD_MUTEX_INITIALIZER;
static struct orphan {
    void *ptr;
    size_t capacity;
    int placed;
} *orphans;
static size_t orphan_len, orphan_cap;
static _Atomic size_t orphan_count;

void pinstage_set_pinned_limit(size_t bytes) { atomic_store_explicit(&limit, bytes, memory_order_relaxed); }

void pinstage_get_pinned_usage(size_t *held_bytes, size_t *limit_bytes) {
    if (held_bytes) *held_bytes = atomic_load_explicit(&held, memory_order_relaxed);
    if (limit_bytes) *limit_bytes = atomic_load_explicit(&limit, memory_order_relaxed);
}

static pinstage_status refused(CUresult r, const char *caller, void *p, int placed) {
    return ps_fail((pinstage_status)r,
                   "%s: %s failed: %s (%s); the pinned block at %p is kept and released again by the "
                   "next pinned allocation or pinstage_pinned_retry_releases (e.g. from a thread where its "
                   "context is current)",
                   caller, placed ? "cuMemHostUnregister" : "cuMemFreeHost", pinstage_status_name((pinstage_status)r),
                   pinstage_status_string((pinstage_status)r), p);
}

static CUresult free_block(const ps_driver *driver, void *p, size_t capacity, int placed, uint64_t *elapsed_ns) {
    uint64_t start = now_ns();
    CUresult r = placed ? driver->cuMemHostUnregister(p) : driver->cuMemFreeHost(p);
    if (r == CUDA_SUCCESS && placed) ps_numa_unmap(p, capacity);
    *elapsed_ns += now_ns() - start;
    if (r == CUDA_SUCCESS) atomic_fetch_sub_explicit(&held, capacity, memory_order_relaxed);
    return r;
}

/* Frees a block, orphaning it when the driver refuses. */
static pinstage_status release_block(const ps_driver *driver, void *p, size_t capacity, int placed,
                                     uint64_t *elapsed_ns, const char *caller) {
    CUresult r = free_block(driver, p, capacity, placed, elapsed_ns);
    if (r == CUDA_SUCCESS) return PINSTAGE_SUCCESS;
    pthread_mutex_lock(&orphan_lock);
    if (orphan_len == orphan_cap) {
        size_t cap = orphan_cap ? 2 * orphan_cap : 8;
        struct orphan *more = realloc(orphans, cap * sizeof *more);
        if (more) orphans = more, orphan_cap = cap;
    }
    /* Out of host memory even for the list: the block is lost, and said so. */
    if (orphan_len < orphan_cap) {
        orphans[orphan_len++] = (struct orphan){p, capacity, placed};
        atomic_store_explicit(&orphan_count, orphan_len, memory_order_relaxed);
    }
    pthread_mutex_unlock(&orphan_lock);
    return refused(r, caller, p, placed);
}

/* Tries the orphans again; returns the first refusal. */
static pinstage_status retry_orphans(const ps_driver *driver, uint64_t *elapsed_ns, const char *caller) {
    if (!atomic_load_explicit(&orphan_count, memory_order_relaxed)) return PINSTAGE_SUCCESS;
    pinstage_status first = PINSTAGE_SUCCESS;
    pthread_mutex_lock(&orphan_lock);
    size_t kept = 0;
    for (size_t i = 0; i < orphan_len; i++) {
        CUresult r = free_block(driver, orphans[i].ptr, orphans[i].capacity, orphans[i].placed, elapsed_ns);
        if (r == CUDA_SUCCESS) continue;
        if (!first) first = refused(r, caller, orphans[i].ptr, orphans[i].placed);
        orphans[kept++] = orphans[i];
    }
    orphan_len = kept;
    atomic_store_explicit(&orphan_count, kept, memory_order_relaxed);
    pthread_mutex_unlock(&orphan_lock);
    return first;
}

pinstage_status pinstage_pinned_retry_releases(void) {
    const ps_driver *d;
    uint64_t ignored = 0;
    if (!atomic_load_explicit(&orphan_count, memory_order_relaxed)) return PINSTAGE_SUCCESS;
    pinstage_status s = ps_driver_get(&d);
    return s ? s : retry_orphans(d, &ignored, "pinstage_pinned_retry_releases");
}

/* ---- One allocation ------------------------------------------------------------------ */

/* Mapped, placed on `node`, then registered: the driver pins what is there. */
static CUresult alloc_placed(const ps_driver *driver, size_t capacity, int node, void **p, int *placed) {
    *p = ps_numa_map(capacity, node);
    if (!*p) return CUDA_ERROR_OUT_OF_MEMORY;
    /* Portable: pinned for every context, as cuMemAllocHost's memory is
     * under unified addressing. */
    CUresult r = driver->cuMemHostRegister(*p, capacity, CU_MEMHOSTREGISTER_PORTABLE);
    if (r != CUDA_SUCCESS) {
        ps_numa_unmap(*p, capacity);
        *p = NULL;
    }
    *placed = 1; /* mapped: a failure now is the driver's */
    return r;
}

pinstage_status ps_pinned_alloc(ps_pinned *fresh, const ps_driver *driver, size_t capacity, int node,
                                uint64_t *elapsed_ns, const char *caller) {
    ps_message before_orphans;
    uint64_t ignored = 0;
    /* Orphans go first: they may be what stands between us and the limit.
     * Their refusal is not this call's failure. */
    ps_message_save(&before_orphans);
    if (retry_orphans(driver, &ignored, caller)) ps_message_restore(&before_orphans, PINSTAGE_SUCCESS);
    size_t cap = atomic_load_explicit(&limit, memory_order_relaxed);
    size_t before = atomic_fetch_add_explicit(&held, capacity, memory_order_relaxed);
    if (before > cap || capacity > cap - before) {
        atomic_fetch_sub_explicit(&held, capacity, memory_order_relaxed);
        return ps_fail(PINSTAGE_ERROR_OUT_OF_MEMORY,
                       "%s: pinning %zu more bytes would pass the process's pinned limit of %zu bytes (%zu held; "
                       "pinstage_set_pinned_limit)", caller, capacity, cap, before);
    }
    uint64_t start = now_ns();
    void *p = NULL;
    int placed = 0;
    CUresult r = node < 0 ? driver->cuMemAllocHost(&p, capacity) : alloc_placed(driver, capacity, node, &p, &placed);
    *elapsed_ns += now_ns() - start;
    if (r != CUDA_SUCCESS) {
        atomic_fetch_sub_explicit(&held, capacity, memory_order_relaxed);
        if (node >= 0 && !placed)
            return ps_fail(PINSTAGE_ERROR_OUT_OF_MEMORY, "%s: cannot map %zu bytes of host memory to pin on NUMA node %d",
                           caller, capacity, node);
        return ps_fail_driver((pinstage_status)r, caller, node < 0 ? "cuMemAllocHost_v2" : "cuMemHostRegister_v2");
    }
    fresh->ptr = p;
    fresh->capacity = capacity;
    fresh->placed = placed;
    return PINSTAGE_SUCCESS;
}

pinstage_status ps_pinned_replace(ps_pinned *pinned, const ps_driver *driver, ps_pinned *fresh,
                                  uint64_t *elapsed_ns, const char *caller) {
    ps_pinned old = *pinned;
    *pinned = *fresh;
    *fresh = (ps_pinned){NULL, 0, 0};
    return old.ptr ? release_block(driver, old.ptr, old.capacity, old.placed, elapsed_ns, caller) : PINSTAGE_SUCCESS;
}

pinstage_status ps_pinned_release(ps_pinned *pinned, const ps_driver *driver, uint64_t *elapsed_ns,
                                  const char *caller) {
    ps_pinned old = *pinned;
    *pinned = (ps_pinned){NULL, 0, 0};
    return old.ptr ? release_block(driver, old.ptr, old.capacity, old.placed, elapsed_ns, caller) : PINSTAGE_SUCCESS;
}

pinstage_status ps_pinned_alloc_beside(ps_pinned *pinned, const ps_driver *driver, ps_pinned *fresh,
                                       size_t capacity, int node, uint64_t *elapsed_ns, int *release_refused,
                                       const char *caller) {
    *release_refused = 0;
    pinstage_status s = ps_pinned_alloc(fresh, driver, capacity, node, elapsed_ns, caller);
    if (s != PINSTAGE_ERROR_OUT_OF_MEMORY || !pinned->ptr) return s;
    /* Holding both may be what exhausts the pinnable memory. */
    ps_message why;
    ps_message_save(&why);
    if (ps_pinned_release(pinned, driver, elapsed_ns, caller)) {
        *release_refused = 1;
        return ps_message_restore(&why, s);
    }
    return ps_pinned_alloc(fresh, driver, capacity, node, elapsed_ns, caller);
}

pinstage_status ps_pinned_grow(ps_pinned *pinned, const ps_driver *driver, size_t capacity, int node,
                               uint64_t *elapsed_ns, int *grew, int *release_refused, const char *caller) {
    ps_pinned fresh = {NULL, 0, 0};
    *grew = 0;
    pinstage_status s =
        ps_pinned_alloc_beside(pinned, driver, &fresh, capacity, node, elapsed_ns, release_refused, caller);
    if (s) return s;
    *grew = 1;
    s = ps_pinned_replace(pinned, driver, &fresh, elapsed_ns, caller);
    *release_refused |= s != PINSTAGE_SUCCESS;
    return s;
}
