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
    /* Nearest power of two on a log scale: round up past 1.5x. */
    unsigned log2 = 0;
    size_t b = bytes + bytes / 2;
    while (b > 1 && log2 < 63) b >>= 1, log2++;
    if (log2 <= PS_CLASS_MIN_LOG2) return 0;
    if (log2 - PS_CLASS_MIN_LOG2 >= PS_CLASSES) return PS_CLASSES - 1;
    return log2 - PS_CLASS_MIN_LOG2;
}

size_t ps_class_bytes(unsigned cls) { return (size_t)1 << (cls + PS_CLASS_MIN_LOG2); }

ps_plan ps_choose_plan(const pinstage_profile *profile, ps_direction dir, size_t bytes, size_t threshold) {
    const ps_class_plan *c = &profile->classes[dir][ps_size_class(bytes)];
    if (threshold == PINSTAGE_AUTO_STAGE_PROFILE) return c->best;
    if (bytes > threshold) return (ps_plan){PINSTAGE_ROUTE_PAGEABLE, 0, 0};
    return c->staging;
}

/* ---- The built-in table --------------------------------------------------------- */

#define K ((size_t)1 << 10)
#define M ((size_t)1 << 20)

/* Measured with `pinstage-bench --calibrate` on an H200 machine (PCIe Gen5
 * x16, 16 host cores); see docs/benchmarks.md. */
static const struct {
    ps_plan best, staging;
} builtin[2][PS_CLASSES] = {
    /* host -> device */
    {
        {{PINSTAGE_ROUTE_PAGEABLE, 0, 0}, {PINSTAGE_ROUTE_STAGED, 0, 1}},       /* 4 KiB */
        {{PINSTAGE_ROUTE_PAGEABLE, 0, 0}, {PINSTAGE_ROUTE_STAGED, 0, 1}},       /* 8 KiB */
        {{PINSTAGE_ROUTE_PAGEABLE, 0, 0}, {PINSTAGE_ROUTE_STAGED, 0, 1}},       /* 16 KiB */
        {{PINSTAGE_ROUTE_ENGINE, 0, 2}, {PINSTAGE_ROUTE_ENGINE, 0, 2}},         /* 32 KiB */
        {{PINSTAGE_ROUTE_ENGINE, 0, 4}, {PINSTAGE_ROUTE_ENGINE, 0, 4}},         /* 64 KiB */
        {{PINSTAGE_ROUTE_ENGINE, 0, 8}, {PINSTAGE_ROUTE_ENGINE, 0, 8}},         /* 128 KiB */
        {{PINSTAGE_ROUTE_ENGINE, 0, 0}, {PINSTAGE_ROUTE_ENGINE, 0, 0}},         /* 256 KiB */
        {{PINSTAGE_ROUTE_ENGINE, 0, 0}, {PINSTAGE_ROUTE_ENGINE, 0, 0}},         /* 512 KiB */
        {{PINSTAGE_ROUTE_ENGINE, 256 * K, 0}, {PINSTAGE_ROUTE_ENGINE, 256 * K, 0}}, /* 1 MiB */
        {{PINSTAGE_ROUTE_ENGINE, 256 * K, 0}, {PINSTAGE_ROUTE_ENGINE, 256 * K, 0}}, /* 2 MiB */
        {{PINSTAGE_ROUTE_ENGINE, 256 * K, 0}, {PINSTAGE_ROUTE_ENGINE, 256 * K, 0}}, /* 4 MiB */
        {{PINSTAGE_ROUTE_ENGINE, 1 * M, 0}, {PINSTAGE_ROUTE_ENGINE, 1 * M, 0}}, /* 8 MiB */
        {{PINSTAGE_ROUTE_ENGINE, 4 * M, 8}, {PINSTAGE_ROUTE_ENGINE, 4 * M, 8}}, /* 16 MiB */
        {{PINSTAGE_ROUTE_ENGINE, 4 * M, 8}, {PINSTAGE_ROUTE_ENGINE, 4 * M, 8}}, /* 32 MiB */
        {{PINSTAGE_ROUTE_ENGINE, 4 * M, 8}, {PINSTAGE_ROUTE_ENGINE, 4 * M, 8}}, /* 64 MiB */
        {{PINSTAGE_ROUTE_ENGINE, 4 * M, 8}, {PINSTAGE_ROUTE_ENGINE, 4 * M, 8}}, /* 128 MiB */
        {{PINSTAGE_ROUTE_ENGINE, 4 * M, 8}, {PINSTAGE_ROUTE_ENGINE, 4 * M, 8}}, /* 256 MiB */
    },
    /* device -> host */
    {
        {{PINSTAGE_ROUTE_STAGED, 0, 1}, {PINSTAGE_ROUTE_STAGED, 0, 1}},         /* 4 KiB */
        {{PINSTAGE_ROUTE_STAGED, 0, 1}, {PINSTAGE_ROUTE_STAGED, 0, 1}},         /* 8 KiB */
        {{PINSTAGE_ROUTE_STAGED, 0, 1}, {PINSTAGE_ROUTE_STAGED, 0, 1}},         /* 16 KiB */
        {{PINSTAGE_ROUTE_ENGINE, 0, 2}, {PINSTAGE_ROUTE_ENGINE, 0, 2}},         /* 32 KiB */
        {{PINSTAGE_ROUTE_ENGINE, 0, 4}, {PINSTAGE_ROUTE_ENGINE, 0, 4}},         /* 64 KiB */
        {{PINSTAGE_ROUTE_ENGINE, 0, 8}, {PINSTAGE_ROUTE_ENGINE, 0, 8}},         /* 128 KiB */
        {{PINSTAGE_ROUTE_ENGINE, 0, 0}, {PINSTAGE_ROUTE_ENGINE, 0, 0}},         /* 256 KiB */
        {{PINSTAGE_ROUTE_ENGINE, 0, 0}, {PINSTAGE_ROUTE_ENGINE, 0, 0}},         /* 512 KiB */
        {{PINSTAGE_ROUTE_ENGINE, 256 * K, 0}, {PINSTAGE_ROUTE_ENGINE, 256 * K, 0}}, /* 1 MiB */
        {{PINSTAGE_ROUTE_ENGINE, 256 * K, 0}, {PINSTAGE_ROUTE_ENGINE, 256 * K, 0}}, /* 2 MiB */
        {{PINSTAGE_ROUTE_ENGINE, 256 * K, 0}, {PINSTAGE_ROUTE_ENGINE, 256 * K, 0}}, /* 4 MiB */
        {{PINSTAGE_ROUTE_ENGINE, 1 * M, 0}, {PINSTAGE_ROUTE_ENGINE, 1 * M, 0}}, /* 8 MiB */
        {{PINSTAGE_ROUTE_ENGINE, 4 * M, 8}, {PINSTAGE_ROUTE_ENGINE, 4 * M, 8}}, /* 16 MiB */
        {{PINSTAGE_ROUTE_ENGINE, 4 * M, 8}, {PINSTAGE_ROUTE_ENGINE, 4 * M, 8}}, /* 32 MiB */
        {{PINSTAGE_ROUTE_ENGINE, 4 * M, 8}, {PINSTAGE_ROUTE_ENGINE, 4 * M, 8}}, /* 64 MiB */
        {{PINSTAGE_ROUTE_ENGINE, 4 * M, 8}, {PINSTAGE_ROUTE_ENGINE, 4 * M, 8}}, /* 128 MiB */
        {{PINSTAGE_ROUTE_ENGINE, 4 * M, 8}, {PINSTAGE_ROUTE_ENGINE, 4 * M, 8}}, /* 256 MiB */
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
