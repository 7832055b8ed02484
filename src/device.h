/* SPDX-License-Identifier: MIT */
/* Per-device state of a buffer or ring: which context its calls run in,
 * which NUMA node its pinned memory and copy threads are on, which pool
 * copies for it and which profile it follows (pinstage_buffer_bind).
 *
 * A binding is owned by its buffer or ring, which one thread uses at a
 * time; `saved` and `switched` live for one call. */
#ifndef PINSTAGE_DEVICE_H
#define PINSTAGE_DEVICE_H

#include "driver.h"
#include "pool.h"

typedef struct ps_binding {
    int bound;          /* 0: every call uses the calling thread's context */
    int device;         /* ordinal */
    CUdevice dev;
    CUcontext context;
    int retained;       /* holds a retain of the device's primary context */
    int device_node;    /* the node the GPU is attached to; -1: not known */
    int memory_node;    /* where its pinned memory goes; -1: not placed (cuMemAllocHost) */
    ps_pool *pool;      /* copies its host side; NULL while unbound: the process-wide pool */
    char model[256];    /* the GPU's name: which measured profiles fit it */
    /* The call in progress. */
    const ps_driver *driver;
    const char *caller; /* the public call, for the message of a failed restore */
    CUcontext saved;    /* the caller's context, given back by ps_bind_leave */
    int switched;
} ps_binding;

/* The device of ordinal `ordinal`, with the driver loaded. INVALID_VALUE
 * for a negative one (no driver call); the driver's INVALID_DEVICE, with
 * the count it sees, for one that does not exist. */
pinstage_status ps_device_get(const char *caller, int ordinal, const ps_driver **d, CUdevice *dev);

/* Makes *b the binding `want` asks for (checked: see pinstage_buffer_bind),
 * releasing what *b held before. On failure *b is unchanged. */
pinstage_status ps_bind(ps_binding *b, const pinstage_binding *want, const char *caller);

/* Gives up the primary-context retain a binding holds; *b becomes unbound. */
pinstage_status ps_unbind(ps_binding *b, const ps_driver *d, const char *caller);

/* Around one call's driver calls: makes the bound context current (nothing
 * for an unbound binding) and then restores the caller's. leave returns `s`,
 * or when the call succeeded but the restore failed, that failure, with a
 * message saying the call itself was done. */
pinstage_status ps_bind_enter(ps_binding *b, const ps_driver *d, const char *caller);
pinstage_status ps_bind_leave(ps_binding *b, pinstage_status s);

static inline ps_pool *ps_binding_pool(const ps_binding *b) { return b->pool ? b->pool : ps_pool_default(); }
static inline int ps_binding_node(const ps_binding *b) { return b->bound ? b->memory_node : -1; }

/* The profile an object without its own follows: the default one, unless
 * that was measured on another GPU model than the bound device's. */
const pinstage_profile *ps_binding_profile(const ps_binding *b);

/* Fills the binding's part of a placement (memory_found and pinned_bytes
 * are the caller's). */
void ps_binding_placement(const ps_binding *b, pinstage_placement *out);

#endif
