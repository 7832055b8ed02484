/* SPDX-License-Identifier: MIT */
/* The page-locked allocation a staging buffer (or a ring slot) owns, how it
 * grows, and the process's pinned accounting.
 *
 * A release the driver refuses (no current context on the calling thread, a
 * dead context) never loses the block silently: the refusal is returned and
 * the block is "orphaned", kept on a process-wide list that every later
 * pinned allocation (and pinstage_pinned_retry_releases) tries to release
 * again. Orphans count in the pinned bytes held, so the pinned limit bounds
 * them too. */
#ifndef PINSTAGE_PINNED_H
#define PINSTAGE_PINNED_H

#include <stdint.h>

#include "driver.h"

typedef struct ps_pinned {
    void *ptr;       /* NULL while nothing is pinned */
    size_t capacity; /* bytes, a multiple of PINSTAGE_CAPACITY_GRANULARITY */
    int placed;      /* 0: cuMemAllocHost's; 1: mapped here, placed on a NUMA node and
                        registered (cuMemHostRegister) */
} ps_pinned;

/* Rounds `bytes` up to the capacity granularity; 0 when that overflows. */
size_t ps_pinned_round(size_t bytes);

/* Allocates `capacity` bytes (already rounded) into the empty *fresh: with
 * cuMemAllocHost for node -1 (wherever the kernel puts it), else mapped,
 * placed on NUMA node `node` (numa.h) and registered with the driver. Adds
 * the time spent to *elapsed_ns. OUT_OF_MEMORY, with no driver call, when
 * the process's pinned limit would be exceeded. */
pinstage_status ps_pinned_alloc(ps_pinned *fresh, const ps_driver *driver, size_t capacity, int node,
                                uint64_t *elapsed_ns, const char *caller);

/* Makes *fresh the allocation (fresh is left empty) and releases the old
 * one; a refused release orphans it and is returned (with this thread's
 * message naming it). The replacement stands either way. */
pinstage_status ps_pinned_replace(ps_pinned *pinned, const ps_driver *driver, ps_pinned *fresh,
                                  uint64_t *elapsed_ns, const char *caller);

/* Releases the allocation (now empty either way); a refused release orphans
 * the block and is returned. */
pinstage_status ps_pinned_release(ps_pinned *pinned, const ps_driver *driver, uint64_t *elapsed_ns,
                                  const char *caller);

/* Allocates `capacity` bytes into the empty *fresh while *pinned is held;
 * only when the driver is out of memory is the held block released first
 * (holding both may be what exhausts it) and the allocation tried once
 * more. *release_refused says that release was refused (the block is
 * orphaned, and the out-of-memory error returned). */
pinstage_status ps_pinned_alloc_beside(ps_pinned *pinned, const ps_driver *driver, ps_pinned *fresh,
                                       size_t capacity, int node, uint64_t *elapsed_ns, int *release_refused,
                                       const char *caller);

/* alloc_beside + replace, for reserve and the ring's slots: a failure keeps
 * the old block (except as above). *grew says whether the new block is in
 * place: an error with *grew set is a refused release of the old block
 * (orphaned). *release_refused counts either refusal. */
pinstage_status ps_pinned_grow(ps_pinned *pinned, const ps_driver *driver, size_t capacity, int node,
                               uint64_t *elapsed_ns, int *grew, int *release_refused, const char *caller);

#endif
