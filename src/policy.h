/* SPDX-License-Identifier: MIT */
/* Which path an upload / download of ordinary memory takes, and with which
 * chunk size and thread count: a machine profile (measured by calibrate.c,
 * loaded from a file, or the built-in defaults) looked up by direction and
 * size class, overridden by a buffer's explicit threshold. */
#ifndef PINSTAGE_POLICY_H
#define PINSTAGE_POLICY_H

#include <stddef.h>

#include "pinstage.h"

/* Size classes: powers of two from 4 KiB to 256 MiB and the half-octaves
 * between them (4, 6, 8, 12, 16, 24 KiB...): the best plan for a 192 KiB
 * transfer differed from the best at 256 KiB on the H200 machine. A
 * transfer uses the class nearest its size on a log scale; sizes outside
 * use the end classes. */
#define PS_CLASS_MIN_LOG2 12
#define PS_CLASSES 33

/* The engine's pinned footprint: uploads go round at most 4 slots of at
 * most 8 MiB (32 MiB), downloads 8 slots of at most 2 MiB (16 MiB). Downloads
 * queue their DMAs deeper in smaller chunks: on H100 machines 64 MiB
 * downloads through auto took 0.816-0.822 of the floor through 4 slots of
 * 8 MiB, 0.841-0.849 through 8 of 4 MiB and 0.867-0.872 through 8 of 2 MiB
 * (16 of 2 MiB: no faster), fresh processes alternating (docs/findings.md,
 * "Eight download slots in 32 MiB"). Uploads gain nothing from depth: the
 * ring paces their copy with the DMA, and a copy that runs ahead slows it.
 * On H100 machines 8 slots were no faster, and holding a whole 64 MiB
 * upload in the stage took 0.765-0.791 of the floor against the ring's
 * 0.815-0.834, 0.581 from memory against 0.752 ("An upload that holds the
 * whole transfer is slower than the ring"). On another H100, 2 slots took
 * 0.718-0.750 of the floor against 4 slots' 0.736-0.768 in four rounds
 * ("Shallower rings lose too"). */
#define PS_ENGINE_SLOTS 4
#define PS_ENGINE_MAX_CHUNK ((size_t)8 << 20)
#define PS_ENGINE_D2H_SLOTS 8
#define PS_ENGINE_D2H_MAX_CHUNK ((size_t)2 << 20)
#define PS_ENGINE_MAX_SLOTS 8
/* The most pinned memory any engine transfer needs. */
#define PS_ENGINE_MAX_FOOTPRINT (PS_ENGINE_SLOTS * PS_ENGINE_MAX_CHUNK)

typedef enum ps_direction { PS_H2D = 0, PS_D2H = 1 } ps_direction;

/* A direction's largest chunk: a plan asking for more gets this. */
static inline size_t ps_engine_max_chunk(ps_direction dir) {
    return dir == PS_D2H ? PS_ENGINE_D2H_MAX_CHUNK : PS_ENGINE_MAX_CHUNK;
}

/* A route, and for the staging routes the chunk size (0: the whole
 * transfer, capped at ps_engine_max_chunk) and the threads sharing each
 * chunk's host copy, the caller included (0: all). */
typedef pinstage_plan ps_plan;

typedef struct ps_class_plan {
    ps_plan best;    /* fastest measured path */
    ps_plan staging; /* fastest path through pinned memory (what a threshold keeps) */
    double us_best, us_staging, us_pageable; /* medians measured; 0 where not measured */
} ps_class_plan;

struct pinstage_profile {
    char device_name[256];
    char pci_bus_id[32];
    int driver_version;
    unsigned host_threads; /* threads the measuring process had (pool workers + caller) */
    int origin;            /* PINSTAGE_PROFILE_BUILTIN / _MEASURED / _FIXED */
    ps_class_plan classes[2][PS_CLASSES];
};

/* The size class of `bytes`. */
unsigned ps_size_class(size_t bytes);

/* The size in bytes of class `cls`. */
size_t ps_class_bytes(unsigned cls);

/* The plan for one transfer. `threshold` is the buffer's explicit setting,
 * or PINSTAGE_AUTO_STAGE_PROFILE to follow the profile. */
ps_plan ps_choose_plan(const pinstage_profile *profile, ps_direction dir, size_t bytes, size_t threshold);

/* The profile buffers follow unless given their own: the one set with
 * pinstage_profile_set_default, else the file $PINSTAGE_PROFILE names (read
 * on first use; refused files leave a warning on stderr), else built-in. */
const pinstage_profile *ps_profile_default(void);

/* The built-in table, measured on an H200 machine. */
void ps_profile_builtin(pinstage_profile *p);

/* Fills in the machine a measured profile describes: the current context's
 * GPU, its PCI bus id and the driver version. */
struct ps_driver;
pinstage_status ps_profile_stamp(pinstage_profile *p, const struct ps_driver *d, const char *caller);

#endif
