/* SPDX-License-Identifier: MIT */
/* The driver call sequences behind every transfer: enqueue-only copies, the
 * wait that ends every synchronous call, and what kind of host memory a
 * caller passed. On failure the status is the driver's and this thread's
 * message names the call. */
#ifndef PINSTAGE_COPY_H
#define PINSTAGE_COPY_H

#include "driver.h"

/* Enqueue one async copy on `stream`, nothing more. */
pinstage_status ps_enqueue_h2d(const ps_driver *d, CUdeviceptr dst, const void *host, size_t bytes,
                               CUstream stream, const char *caller);
pinstage_status ps_enqueue_d2h(const ps_driver *d, void *host, CUdeviceptr src, size_t bytes,
                               CUstream stream, const char *caller);
pinstage_status ps_record(const ps_driver *d, CUevent event, CUstream stream, const char *caller);

/* Waits until `event` has completed. It polls cuEventQuery, which returns
 * the moment the copy lands in every context scheduling mode (a blocking-
 * sync cuStreamSynchronize doubles a 150 KiB copy's time), for about the
 * time `bytes` take on a fast link; then it polls every ~50 us from a sleep,
 * so a long transfer costs little CPU. */
pinstage_status ps_wait_event(const ps_driver *d, CUevent event, size_t bytes, const char *caller);

/* One cuEventQuery: PINSTAGE_SUCCESS once the event has completed,
 * PINSTAGE_ERROR_NOT_READY before; else the driver's error, named. */
pinstage_status ps_query_event(const ps_driver *d, CUevent event, const char *caller);

/* Records `event` on `stream` and waits for it: the end of a synchronous call. */
pinstage_status ps_record_and_wait(const ps_driver *d, CUevent event, CUstream stream, size_t bytes,
                                   const char *caller);

/* After a failure with copies possibly still queued: waits until nothing
 * enqueued on `stream` can touch host memory any more. Returns 0 when that
 * is certain, non-zero when the driver could not say (the memory those
 * copies use must then never be reused). Leaves this thread's message alone. */
int ps_drain(const ps_driver *d, CUevent spare, CUstream stream);

/* The driver's pageable path, ordered against `stream`, landed on return.
 * Uploads: async copy + record + wait. Downloads: wait for the stream's work
 * (none when cuStreamQuery finds it idle), then the synchronous
 * cuMemcpyDtoH_v2 (faster than its async form).
 * *refused says the copy call itself returned CUDA_ERROR_INVALID_VALUE: the
 * driver does not take this host range (partly page-locked), so the caller
 * may stage it instead; the same code from a wait means no such thing. */
pinstage_status ps_copy_h2d_pageable(const ps_driver *d, CUdeviceptr dst, const void *src, size_t bytes,
                                     CUstream stream, CUevent event, int *refused, const char *caller);
pinstage_status ps_copy_d2h_pageable(const ps_driver *d, void *dst, CUdeviceptr src, size_t bytes,
                                     CUstream stream, CUevent event, int *refused, const char *caller);

/* What the driver knows of a host range. */
typedef enum ps_host_kind {
    PS_HOST_PAGEABLE,     /* its first byte is unknown to the driver */
    PS_HOST_PINNED,       /* inside one page-locked allocation or registration */
    PS_HOST_PARTLY_PINNED /* touches page-locked memory but is not inside one range */
} ps_host_kind;

/* Asks cuPointerGetAttributes (one call, about 0.1 us) about the range's
 * first byte. Any failure reads as pageable. */
ps_host_kind ps_host_kind_of(const ps_driver *d, const void *host, size_t bytes);

#endif
