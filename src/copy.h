/* The driver call sequences behind every transfer. Each returns once the
 * data has landed and is ordered after the work already queued on `stream`.
 * On failure the status is the driver's and this thread's message names the
 * call; no copy from or into the caller's memory is left in flight. */
#ifndef PINSTAGE_COPY_H
#define PINSTAGE_COPY_H

#include "driver.h"

/* Pinned host memory <-> device, on `stream`. */
pinstage_status ps_copy_h2d_staged(const ps_driver *d, CUdeviceptr dst, const void *pinned,
                                   size_t bytes, CUstream stream, const char *caller);
pinstage_status ps_copy_d2h_staged(const ps_driver *d, void *pinned, CUdeviceptr src, size_t bytes,
                                   CUstream stream, const char *caller);

/* Pageable host memory <-> device through the driver's own staging. */
pinstage_status ps_copy_h2d_pageable(const ps_driver *d, CUdeviceptr dst, const void *src,
                                     size_t bytes, CUstream stream, const char *caller);
pinstage_status ps_copy_d2h_pageable(const ps_driver *d, void *dst, CUdeviceptr src, size_t bytes,
                                     CUstream stream, const char *caller);

#endif
