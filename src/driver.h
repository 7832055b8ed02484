/* SPDX-License-Identifier: MIT */
/* The one seam between pinstage and the CUDA driver: a table of entry points
 * filled at run time from whichever driver library is loaded (libcuda.so.1,
 * the emulated driver, or a user's shim). Nothing else in the library calls
 * the driver or dlopen. */
#ifndef PINSTAGE_DRIVER_H
#define PINSTAGE_DRIVER_H

#include "cuda_abi.h"
#include "pinstage.h"

typedef struct ps_driver {
#define PS_TABLE_MEMBER(name, version, params) CUresult (*name) params;
    PS_DRIVER_ENTRY_POINTS(PS_TABLE_MEMBER)
#undef PS_TABLE_MEMBER
} ps_driver;

/* The loaded driver's table, loading it on first use. On failure the status
 * and this thread's message say why. */
pinstage_status ps_driver_get(const ps_driver **driver);

/* True for the handles that mean the legacy default stream. */
static inline int ps_is_legacy_stream(CUstream stream) {
    return stream == NULL || stream == CU_STREAM_LEGACY;
}

#endif
