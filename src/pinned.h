/* SPDX-License-Identifier: MIT */
/* The page-locked allocation a staging buffer owns, and how it grows. */
#ifndef PINSTAGE_PINNED_H
#define PINSTAGE_PINNED_H

#include <stdint.h>

#include "driver.h"

typedef struct ps_pinned {
    void *ptr;       /* NULL while nothing is pinned */
    size_t capacity; /* bytes, a multiple of PINSTAGE_CAPACITY_GRANULARITY */
} ps_pinned;

/* Rounds `bytes` up to the capacity granularity; 0 when that overflows. */
size_t ps_pinned_round(size_t bytes);

/* Replaces the allocation with one of `capacity` bytes (already rounded,
 * larger than the current one). The new allocation is made before the old
 * one is released, so a failure keeps the old one; only when the driver is
 * out of memory is the old one released first and the allocation retried.
 * Adds the time spent in the driver to *elapsed_ns. */
pinstage_status ps_pinned_grow(ps_pinned *pinned, const ps_driver *driver, size_t capacity,
                               uint64_t *elapsed_ns, const char *caller);

/* Releases the allocation (capacity 0). */
void ps_pinned_release(ps_pinned *pinned, const ps_driver *driver, uint64_t *elapsed_ns);

#endif
