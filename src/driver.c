/* SPDX-License-Identifier: MIT */
/* Loading the driver library and filling the entry-point table.
 *
 * Entry points are resolved through the library's cuGetProcAddress at the
 * driver version that introduced the ABI the table declares (cuda_abi.h), so
 * cuMemAllocHost resolves to cuMemAllocHost_v2 with its 64-bit size, never to
 * the legacy symbol, and no version newer than needed is requested (a newer
 * request fails on older drivers). Legacy-default-stream variants are asked
 * for explicitly, so a NULL stream means the same thing in every program. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "driver.h"
#include "status.h"

#define DEFAULT_DRIVER "libcuda.so.1"

static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;
static ps_driver table;
static _Atomic(const ps_driver *) ready;
static void *library;
static char library_path[4096];
static int library_emulated;
static int library_version;
static ps_get_proc_address_v2_fn get_proc_v2;
static ps_get_proc_address_v1_fn get_proc_v1;

/* Asks cuGetProcAddress for `symbol`. Returns CUDA_SUCCESS, CUDA_ERROR_NOT_FOUND
 * when the driver does not have it (at that version), or the error the call
 * itself failed with (the driver could not answer). */
static CUresult resolve(const char *symbol, int cuda_version, void **fn) {
    CUresult r;
    *fn = NULL;
    if (get_proc_v2) {
        CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SUCCESS;
        r = get_proc_v2(symbol, fn, cuda_version, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &found);
        if (found != CU_GET_PROC_ADDRESS_SUCCESS && (r == CUDA_SUCCESS || r == CUDA_ERROR_NOT_FOUND))
            r = CUDA_ERROR_NOT_FOUND;
    } else {
        r = get_proc_v1(symbol, fn, cuda_version, CU_GET_PROC_ADDRESS_LEGACY_STREAM);
    }
    if (r == CUDA_SUCCESS && *fn == NULL) r = CUDA_ERROR_NOT_FOUND;
    return r;
}

static void unload(void) {
    if (library) dlclose(library);
    library = NULL;
    get_proc_v1 = NULL;
    get_proc_v2 = NULL;
    memset(&table, 0, sizeof table);
}

/* Called with load_lock held and nothing loaded. */
static pinstage_status load_locked(const char *path) {
    const char *source = "given to pinstage_driver_load";
    if (!path) {
        path = getenv("PINSTAGE_DRIVER");
        source = "from PINSTAGE_DRIVER";
        if (!path || !*path) {
            path = DEFAULT_DRIVER;
            source = "the default";
        }
    }
    if (strlen(path) >= sizeof library_path)
        return ps_fail(PINSTAGE_ERROR_DRIVER_NOT_LOADED, "driver path is longer than %zu bytes",
                       sizeof library_path - 1);

    library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!library) {
        const char *why = dlerror();
        return ps_fail(PINSTAGE_ERROR_DRIVER_NOT_LOADED,
                       "could not load the CUDA driver library '%s' (%s): %s. Install the NVIDIA "
                       "driver, or name another driver library with the environment variable "
                       "PINSTAGE_DRIVER or pinstage_driver_load(), e.g. the emulated driver "
                       "libpinstage_emu.so to run without a GPU",
                       path, source, why ? why : "unknown error");
    }
    /* The CUDA 12+ form reports why a symbol is missing; 11.3+ has only v1. */
    *(void **)&get_proc_v2 = dlsym(library, "cuGetProcAddress_v2");
    if (!get_proc_v2) *(void **)&get_proc_v1 = dlsym(library, "cuGetProcAddress");
    if (!get_proc_v2 && !get_proc_v1) {
        int is_cuda = dlsym(library, "cuInit") != NULL;
        unload();
        if (!is_cuda)
            return ps_fail(PINSTAGE_ERROR_DRIVER_SYMBOL_NOT_FOUND,
                           "'%s' (%s) is not a CUDA driver library: it has neither cuInit nor "
                           "cuGetProcAddress",
                           path, source);
        return ps_fail(PINSTAGE_ERROR_DRIVER_SYMBOL_NOT_FOUND,
                       "the driver library '%s' has no cuGetProcAddress: pinstage needs a CUDA "
                       "driver of version 11.3 or newer",
                       path);
    }

    /* A lookup the driver could not answer is its error, passed through;
     * only a symbol it does not have means an older driver. */
#define PS_RESOLVE(name, version, params)                                                      \
    {                                                                                          \
        CUresult r = resolve(#name, version, (void **)&table.name);                            \
        if (r != CUDA_SUCCESS) {                                                               \
            unload();                                                                          \
            if (r != CUDA_ERROR_NOT_FOUND)                                                     \
                return ps_fail((pinstage_status)r,                                             \
                               "the driver library '%s': cuGetProcAddress failed for %s: %s (%s)", \
                               path, #name, pinstage_status_name((pinstage_status)r),          \
                               pinstage_status_string((pinstage_status)r));                    \
            return ps_fail(PINSTAGE_ERROR_DRIVER_SYMBOL_NOT_FOUND,                             \
                           "the driver library '%s' does not provide %s at ABI version %d "    \
                           "(cuGetProcAddress: %s)",                                           \
                           path, #name, version, pinstage_status_name((pinstage_status)r));    \
        }                                                                                      \
    }
    PS_DRIVER_ENTRY_POINTS(PS_RESOLVE)
#undef PS_RESOLVE

    CUresult r = table.cuInit(0);
    if (r != CUDA_SUCCESS) {
        unload();
        return ps_fail((pinstage_status)r,
                       "the driver library '%s' loaded, but cuInit failed: %s (%s)", path,
                       pinstage_status_name((pinstage_status)r),
                       pinstage_status_string((pinstage_status)r));
    }
    library_version = 0;
    if ((r = table.cuDriverGetVersion(&library_version)) != CUDA_SUCCESS) {
        unload();
        return ps_fail((pinstage_status)r, "the driver library '%s' loaded, but cuDriverGetVersion failed: %s (%s)",
                       path, pinstage_status_name((pinstage_status)r), pinstage_status_string((pinstage_status)r));
    }
    library_emulated = dlsym(library, "pinstage_emu_version") != NULL;
    strcpy(library_path, path);
    atomic_store_explicit(&ready, &table, memory_order_release);
    return PINSTAGE_SUCCESS;
}

/* Whether `path` names the library already loaded, by another spelling (a
 * symlink, "dir/./lib.so"): the loader then hands back the same handle. */
static int same_library(const char *path) {
    void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (!h) return 0;
    dlclose(h);
    return h == library;
}

pinstage_status pinstage_driver_load(const char *path) {
    pinstage_status s = PINSTAGE_SUCCESS;
    pthread_mutex_lock(&load_lock);
    if (atomic_load_explicit(&ready, memory_order_acquire)) {
        if (path && strcmp(path, library_path) != 0 && !same_library(path))
            s = ps_fail(PINSTAGE_ERROR_NOT_PERMITTED,
                        "pinstage_driver_load: '%s' is already loaded; a process uses one driver "
                        "library, so '%s' cannot replace it",
                        library_path, path);
    } else {
        s = load_locked(path);
    }
    pthread_mutex_unlock(&load_lock);
    return s;
}

pinstage_status ps_driver_get(const ps_driver **driver) {
    const ps_driver *d = atomic_load_explicit(&ready, memory_order_acquire);
    if (!d) {
        pinstage_status s = pinstage_driver_load(NULL);
        if (s) return s;
        d = atomic_load_explicit(&ready, memory_order_acquire);
    }
    *driver = d;
    return PINSTAGE_SUCCESS;
}

pinstage_status pinstage_driver_get_info(pinstage_driver_info *info) {
    const ps_driver *d;
    if (!info) return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "pinstage_driver_get_info: info is NULL");
    pinstage_status s = ps_driver_get(&d);
    if (s) return s;
    info->path = library_path;
    info->driver_version = library_version;
    info->emulated = library_emulated;
    return PINSTAGE_SUCCESS;
}

pinstage_status pinstage_driver_get_proc(const char *symbol, int cuda_version, void **fn) {
    const ps_driver *d;
    if (!symbol || !fn)
        return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "pinstage_driver_get_proc: %s is NULL",
                       symbol ? "fn" : "symbol");
    *fn = NULL;
    pinstage_status s = ps_driver_get(&d);
    if (s) return s;
    CUresult r = resolve(symbol, cuda_version, fn);
    if (r == CUDA_ERROR_NOT_FOUND)
        return ps_fail((pinstage_status)r,
                       "pinstage_driver_get_proc: cuGetProcAddress found no %s at ABI version %d (%s)",
                       symbol, cuda_version, pinstage_status_name((pinstage_status)r));
    if (r != CUDA_SUCCESS) return ps_fail_driver((pinstage_status)r, "pinstage_driver_get_proc", "cuGetProcAddress");
    return PINSTAGE_SUCCESS;
}
