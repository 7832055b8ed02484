/* SPDX-License-Identifier: MIT */
/* Path choice per (direction, size): the profile's table, the threshold's
 * override, and the process-wide default profile. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy.h"
#include "status.h"

unsigned ps_size_class(size_t bytes) {
    if (bytes <= ((size_t)1 << PS_CLASS_MIN_LOG2)) return 0;
    unsigned log2 = 63u - (unsigned)__builtin_clzll((unsigned long long)bytes);
    double r = (double)bytes / (double)((size_t)1 << log2); /* in [1, 2) */
    /* Geometric midpoints: sqrt(1.5) between 2^k and 1.5 * 2^k, sqrt(3) between 1.5 * 2^k and 2^(k+1). */
    unsigned cls = 2 * (log2 - PS_CLASS_MIN_LOG2) + (r >= 1.2247448713915890) + (r >= 1.7320508075688772);
    return cls < PS_CLASSES ? cls : PS_CLASSES - 1;
}

size_t ps_class_bytes(unsigned cls) {
    size_t power = (size_t)1 << (cls / 2 + PS_CLASS_MIN_LOG2);
    return cls % 2 ? power + power / 2 : power;
}

/* A chunk smaller than the class it was measured at splits the transfer
 * the same way: 128 KiB chunks measured at 256 KiB halve a 192 KiB transfer
 * too, instead of cutting it into 128 + 64 KiB. */
static ps_plan scaled(ps_plan plan, size_t bytes, unsigned cls) {
    size_t at = ps_class_bytes(cls);
    if (plan.chunk && plan.chunk < at && bytes != at) {
        size_t chunk = (size_t)((double)plan.chunk * (double)bytes / (double)at) / 4096 * 4096;
        plan.chunk = chunk ? chunk : 4096;
    }
    return plan;
}

ps_plan ps_choose_plan(const pinstage_profile *profile, ps_direction dir, size_t bytes, size_t threshold) {
    unsigned cls = ps_size_class(bytes);
    const ps_class_plan *c = &profile->classes[dir][cls];
    ps_plan plan = threshold == PINSTAGE_AUTO_STAGE_PROFILE ? c->best
                   : bytes > threshold                       ? (ps_plan){PINSTAGE_ROUTE_PAGEABLE, 0, 0}
                                                             : c->staging;
    /* A fixed profile means what it says at every size. */
    return profile->origin == PINSTAGE_PROFILE_FIXED ? plan : scaled(plan, bytes, cls);
}

/* ---- The built-in table --------------------------------------------------------- */

#define K ((size_t)1 << 10)
#define M ((size_t)1 << 20)

/* From `pinstage-bench --calibrate FILE --thorough` on an H200 machine
 * (PCIe Gen5 x16, 16 host threads), checked against default calibrations
 * and a grid of engine settings; see docs/benchmarks.md for how the table
 * measures against the driver's pageable path. Uploads from 8 MiB use every
 * thread: calibration copies the same source again and again, which stays
 * in the host's 300 MiB L3 cache, where 4 threads kept up with the link; a
 * program's source comes from memory, where one thread copied 2-7 GB/s in
 * the fresh processes of `pinstage-bench --conditions` (engine traces). Small uploads stay on the pageable path, which the
 * driver sends inline with its command; small downloads copy once. */
#define PAGEABLE {PINSTAGE_ROUTE_PAGEABLE, 0, 0}
#define STAGED {PINSTAGE_ROUTE_STAGED, 0, 1}
#define ENGINE(chunk, threads) {PINSTAGE_ROUTE_ENGINE, chunk, threads}
static const struct {
    ps_plan best, staging;
} builtin[2][PS_CLASSES] = {
    /* host -> device */
    {
        {PAGEABLE, STAGED},                                      /* 4 KiB */
        {PAGEABLE, STAGED},                                      /* 6 KiB */
        {PAGEABLE, STAGED},                                      /* 8 KiB */
        {PAGEABLE, STAGED},                                      /* 12 KiB */
        {PAGEABLE, STAGED},                                      /* 16 KiB */
        {PAGEABLE, STAGED},                                      /* 24 KiB */
        {ENGINE(0, 4), ENGINE(0, 4)},                            /* 32 KiB */
        {ENGINE(0, 8), ENGINE(0, 8)},                            /* 48 KiB */
        {ENGINE(0, 0), ENGINE(0, 0)},                            /* 64 KiB */
        {ENGINE(0, 0), ENGINE(0, 0)},                            /* 96 KiB */
        {ENGINE(0, 0), ENGINE(0, 0)},                            /* 128 KiB */
        {ENGINE(0, 0), ENGINE(0, 0)},                            /* 192 KiB */
        {ENGINE(0, 4), ENGINE(0, 4)},                            /* 256 KiB */
        {ENGINE(0, 4), ENGINE(0, 4)},                            /* 384 KiB */
        {ENGINE(0, 8), ENGINE(0, 8)},                            /* 512 KiB */
        {ENGINE(0, 8), ENGINE(0, 8)},                            /* 768 KiB */
        {ENGINE(0, 0), ENGINE(0, 0)},                            /* 1 MiB */
        {ENGINE(0, 0), ENGINE(0, 0)},                            /* 1.5 MiB */
        {ENGINE(1 * M, 0), ENGINE(1 * M, 0)},                    /* 2 MiB */
        {ENGINE(1 * M, 0), ENGINE(1 * M, 0)},                    /* 3 MiB */
        {ENGINE(2 * M, 0), ENGINE(2 * M, 0)},                    /* 4 MiB */
        {ENGINE(2 * M, 0), ENGINE(2 * M, 0)},                    /* 6 MiB */
        {ENGINE(1 * M, 0), ENGINE(1 * M, 0)},                    /* 8 MiB */
        {ENGINE(1 * M, 0), ENGINE(1 * M, 0)},                    /* 12 MiB */
        {ENGINE(2 * M, 0), ENGINE(2 * M, 0)},                    /* 16 MiB */
        {ENGINE(2 * M, 0), ENGINE(2 * M, 0)},                    /* 24 MiB */
        {ENGINE(2 * M, 0), ENGINE(2 * M, 0)},                    /* 32 MiB */
        {ENGINE(4 * M, 0), ENGINE(4 * M, 0)},                    /* 48 MiB */
        {ENGINE(4 * M, 0), ENGINE(4 * M, 0)},                    /* 64 MiB */
        {ENGINE(8 * M, 0), ENGINE(8 * M, 0)},                    /* 96 MiB */
        {ENGINE(8 * M, 0), ENGINE(8 * M, 0)},                    /* 128 MiB */
        {ENGINE(8 * M, 0), ENGINE(8 * M, 0)},                    /* 192 MiB */
        {ENGINE(8 * M, 0), ENGINE(8 * M, 0)},                    /* 256 MiB */
    },
    /* device -> host */
    {
        {STAGED, STAGED},                                        /* 4 KiB */
        {STAGED, STAGED},                                        /* 6 KiB */
        {STAGED, STAGED},                                        /* 8 KiB */
        {STAGED, STAGED},                                        /* 12 KiB */
        {STAGED, STAGED},                                        /* 16 KiB */
        {STAGED, STAGED},                                        /* 24 KiB */
        {ENGINE(0, 4), ENGINE(0, 4)},                            /* 32 KiB */
        {ENGINE(0, 4), ENGINE(0, 4)},                            /* 48 KiB */
        {ENGINE(0, 8), ENGINE(0, 8)},                            /* 64 KiB */
        {ENGINE(0, 8), ENGINE(0, 8)},                            /* 96 KiB */
        {ENGINE(0, 0), ENGINE(0, 0)},                            /* 128 KiB */
        {ENGINE(0, 0), ENGINE(0, 0)},                            /* 192 KiB */
        {ENGINE(128 * K, 0), ENGINE(128 * K, 0)},                /* 256 KiB */
        {ENGINE(192 * K, 0), ENGINE(192 * K, 0)},                /* 384 KiB */
        {ENGINE(256 * K, 0), ENGINE(256 * K, 0)},                /* 512 KiB */
        {ENGINE(192 * K, 0), ENGINE(192 * K, 0)},                /* 768 KiB */
        {ENGINE(256 * K, 0), ENGINE(256 * K, 0)},                /* 1 MiB */
        {ENGINE(256 * K, 0), ENGINE(256 * K, 0)},                /* 1.5 MiB */
        {ENGINE(256 * K, 0), ENGINE(256 * K, 0)},                /* 2 MiB */
        {ENGINE(256 * K, 0), ENGINE(256 * K, 0)},                /* 3 MiB */
        {ENGINE(256 * K, 0), ENGINE(256 * K, 0)},                /* 4 MiB */
        {ENGINE(256 * K, 0), ENGINE(256 * K, 0)},                /* 6 MiB */
        {ENGINE(256 * K, 0), ENGINE(256 * K, 0)},                /* 8 MiB */
        {ENGINE(4 * M, 8), ENGINE(4 * M, 8)},                    /* 12 MiB */
        {ENGINE(8 * M, 8), ENGINE(8 * M, 8)},                    /* 16 MiB */
        {ENGINE(4 * M, 8), ENGINE(4 * M, 8)},                    /* 24 MiB */
        {ENGINE(4 * M, 8), ENGINE(4 * M, 8)},                    /* 32 MiB */
        {ENGINE(4 * M, 8), ENGINE(4 * M, 8)},                    /* 48 MiB */
        {ENGINE(8 * M, 8), ENGINE(8 * M, 8)},                    /* 64 MiB */
        {ENGINE(8 * M, 8), ENGINE(8 * M, 8)},                    /* 96 MiB */
        {ENGINE(8 * M, 8), ENGINE(8 * M, 8)},                    /* 128 MiB */
        {ENGINE(8 * M, 8), ENGINE(8 * M, 8)},                    /* 192 MiB */
        {ENGINE(8 * M, 8), ENGINE(8 * M, 8)},                    /* 256 MiB */
    },
};

void ps_profile_builtin(pinstage_profile *p) {
    memset(p, 0, sizeof *p);
    snprintf(p->device_name, sizeof p->device_name, "any");
    snprintf(p->pci_bus_id, sizeof p->pci_bus_id, "any");
    p->origin = PINSTAGE_PROFILE_BUILTIN;
    for (int d = 0; d < 2; d++)
        for (unsigned c = 0; c < PS_CLASSES; c++) {
            p->classes[d][c].best = builtin[d][c].best;
            p->classes[d][c].staging = builtin[d][c].staging;
        }
}

/* ---- The process-wide default -------------------------------------------------------- */

/* Profiles replaced as the default stay allocated until exit: a transfer on
 * another thread may still be reading one. */
typedef struct retired_profile {
    pinstage_profile *profile;
    struct retired_profile *next;
} retired_profile;

static pinstage_profile builtin_profile;
static _Atomic(const pinstage_profile *) current;
static pthread_once_t builtin_once = PTHREAD_ONCE_INIT;
static pthread_once_t env_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t retired_lock = PTHREAD_MUTEX_INITIALIZER;
static retired_profile *retired;

static void init_builtin(void) { ps_profile_builtin(&builtin_profile); }

/* Runs on the first transfer that needs a plan, which has a context to check
 * the file against. */
static void load_from_environment(void) {
    pthread_once(&builtin_once, init_builtin);
    const pinstage_profile *chosen = &builtin_profile;
    const char *path = getenv("PINSTAGE_PROFILE");
    if (path && *path) {
        pinstage_profile *loaded = NULL;
        if (pinstage_profile_load(&loaded, path) == PINSTAGE_SUCCESS)
            chosen = loaded;
        else
            fprintf(stderr, "pinstage: PINSTAGE_PROFILE not used, the built-in profile is: %s\n",
                    pinstage_last_error_message());
    }
    const pinstage_profile *expected = NULL;
    /* pinstage_profile_set_default may have run first: it wins. */
    if (!atomic_compare_exchange_strong(&current, &expected, chosen) && chosen != &builtin_profile)
        pinstage_profile_free((pinstage_profile *)chosen);
}

const pinstage_profile *ps_profile_default(void) {
    const pinstage_profile *p = atomic_load_explicit(&current, memory_order_acquire);
    if (p) return p;
    pthread_once(&env_once, load_from_environment);
    return atomic_load_explicit(&current, memory_order_acquire);
}

pinstage_status pinstage_profile_set_default(const pinstage_profile *profile) {
    pthread_once(&builtin_once, init_builtin);
    pinstage_profile *copy = NULL;
    if (profile) {
        if (!(copy = malloc(sizeof *copy)))
            return ps_fail(PINSTAGE_ERROR_OUT_OF_MEMORY, "pinstage_profile_set_default: out of host memory");
        *copy = *profile;
    }
    retired_profile *r = malloc(sizeof *r);
    if (!r) {
        free(copy);
        return ps_fail(PINSTAGE_ERROR_OUT_OF_MEMORY, "pinstage_profile_set_default: out of host memory");
    }
    const pinstage_profile *old =
        atomic_exchange_explicit(&current, copy ? copy : &builtin_profile, memory_order_acq_rel);
    if (!old || old == &builtin_profile) {
        free(r);
    } else {
        pthread_mutex_lock(&retired_lock);
        r->profile = (pinstage_profile *)old;
        r->next = retired;
        retired = r;
        pthread_mutex_unlock(&retired_lock);
    }
    return PINSTAGE_SUCCESS;
}

pinstage_status pinstage_profile_builtin(pinstage_profile **out) {
    if (!out) return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "pinstage_profile_builtin: out is NULL");
    *out = malloc(sizeof **out);
    if (!*out) return ps_fail(PINSTAGE_ERROR_OUT_OF_MEMORY, "pinstage_profile_builtin: out of host memory");
    ps_profile_builtin(*out);
    return PINSTAGE_SUCCESS;
}

pinstage_status pinstage_profile_get_default(pinstage_profile **out) {
    if (!out) return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "pinstage_profile_get_default: out is NULL");
    *out = malloc(sizeof **out);
    if (!*out) return ps_fail(PINSTAGE_ERROR_OUT_OF_MEMORY, "pinstage_profile_get_default: out of host memory");
    **out = *ps_profile_default();
    return PINSTAGE_SUCCESS;
}

__attribute__((destructor)) static void free_profiles(void) {
    const pinstage_profile *p = atomic_exchange(&current, NULL);
    if (p && p != &builtin_profile) free((void *)p);
    while (retired) {
        retired_profile *r = retired;
        retired = r->next;
        free(r->profile);
        free(r);
    }
}
