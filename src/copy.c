/* SPDX-License-Identifier: MIT */
/* Why the sequences look the way they do (measured on an H200 with
 * pinstage-bench, paths side by side):
 *  - Every synchronous call ends by recording an event after its copies and
 *    polling it. cuStreamSynchronize in a CU_CTX_SCHED_BLOCKING_SYNC context
 *    took 20.1 us after a 150 KiB copy against 9.0-11.0 us in the default and
 *    spin modes; polling cuEventQuery kept 8.9-11.1 us in all three.
 *  - Pageable uploads: the async copy on the caller's stream, then the wait.
 *    The synchronous cuMemcpyHtoD_v2 returns before its last DMA lands and
 *    runs on the legacy stream, so keeping the same postcondition with it
 *    takes a sync before and after: slower at every size measured.
 *  - Pageable downloads: wait for the stream's queued work (the legacy stream
 *    is not ordered after CU_STREAM_NON_BLOCKING streams), then the
 *    synchronous cuMemcpyDtoH_v2, which beats its async pageable variant
 *    (28.6 vs 53.6 us at 150 KiB). The wait asks cuStreamQuery first: an
 *    idle stream answers at once, where an event recorded on it completes
 *    only after the GPU has seen it; at 147 KiB the route took 28.4-29.4 us
 *    that way against 22.7-24.1 us for cuMemcpyDtoH_v2 alone. Queued work
 *    is still waited for by an event, so work other threads queue later is
 *    not waited for. */
#include <stdint.h>
#include <time.h>

#include "copy.h"
#include "status.h"

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void sleep_ns(uint64_t ns) {
    struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
    nanosleep(&ts, NULL);
}

pinstage_status ps_enqueue_h2d(const ps_driver *d, CUdeviceptr dst, const void *host, size_t bytes,
                               CUstream stream, const char *caller) {
    CUresult r = d->cuMemcpyHtoDAsync(dst, host, bytes, stream);
    return r ? ps_fail_driver((pinstage_status)r, caller, "cuMemcpyHtoDAsync_v2") : PINSTAGE_SUCCESS;
}

pinstage_status ps_enqueue_d2h(const ps_driver *d, void *host, CUdeviceptr src, size_t bytes,
                               CUstream stream, const char *caller) {
    CUresult r = d->cuMemcpyDtoHAsync(host, src, bytes, stream);
    return r ? ps_fail_driver((pinstage_status)r, caller, "cuMemcpyDtoHAsync_v2") : PINSTAGE_SUCCESS;
}

pinstage_status ps_record(const ps_driver *d, CUevent event, CUstream stream, const char *caller) {
    CUresult r = d->cuEventRecord(event, stream);
    return r ? ps_fail_driver((pinstage_status)r, caller, "cuEventRecord") : PINSTAGE_SUCCESS;
}

/* Polls until the event completes; returns the first result that is not
 * CUDA_ERROR_NOT_READY. */
static CUresult poll_event(const ps_driver *d, CUevent event, size_t bytes) {
    CUresult r = d->cuEventQuery(event);
    if (r != CUDA_ERROR_NOT_READY) return r;
    uint64_t start = now_ns();
    /* The copy's time at 64 GB/s, faster than any PCIe link, so sleeping for
     * part of it never oversleeps the copy. */
    uint64_t expected = (uint64_t)(bytes / 64) + 5000;
    if (expected > 1000000) sleep_ns(expected - 300000);
    uint64_t tight_until = start + 2 * expected + 50000;
    while ((r = d->cuEventQuery(event)) == CUDA_ERROR_NOT_READY) {
        if (now_ns() > tight_until) sleep_ns(50000);
    }
    return r;
}

pinstage_status ps_wait_event(const ps_driver *d, CUevent event, size_t bytes, const char *caller) {
    CUresult r = poll_event(d, event, bytes);
    return r ? ps_fail_driver((pinstage_status)r, caller, "cuEventQuery") : PINSTAGE_SUCCESS;
}

pinstage_status ps_query_event(const ps_driver *d, CUevent event, const char *caller) {
    CUresult r = d->cuEventQuery(event);
    if (r == CUDA_SUCCESS || r == CUDA_ERROR_NOT_READY) return (pinstage_status)r;
    return ps_fail_driver((pinstage_status)r, caller, "cuEventQuery");
}

pinstage_status ps_record_and_wait(const ps_driver *d, CUevent event, CUstream stream, size_t bytes,
                                   const char *caller) {
    pinstage_status s = ps_record(d, event, stream, caller);
    return s ? s : ps_wait_event(d, event, bytes, caller);
}

int ps_drain(const ps_driver *d, CUevent spare, CUstream stream) {
    if (spare && d->cuEventRecord(spare, stream) == CUDA_SUCCESS && poll_event(d, spare, 0) == CUDA_SUCCESS)
        return 0;
    return d->cuStreamSynchronize(stream) != CUDA_SUCCESS;
}

pinstage_status ps_copy_h2d_pageable(const ps_driver *d, CUdeviceptr dst, const void *src, size_t bytes,
                                     CUstream stream, CUevent event, int *refused, const char *caller) {
    pinstage_status s = ps_enqueue_h2d(d, dst, src, bytes, stream, caller);
    *refused = s == PINSTAGE_ERROR_INVALID_VALUE;
    if (s) return s;
    /* The driver staged the source before returning: whatever happens to the
     * wait, the caller's memory is no longer read. */
    return ps_record_and_wait(d, event, stream, bytes, caller);
}

pinstage_status ps_copy_d2h_pageable(const ps_driver *d, void *dst, CUdeviceptr src, size_t bytes,
                                     CUstream stream, CUevent event, int *refused, const char *caller) {
    *refused = 0;
    if (!ps_is_legacy_stream(stream)) {
        CUresult q = d->cuStreamQuery(stream);
        if (q != CUDA_SUCCESS && q != CUDA_ERROR_NOT_READY)
            return ps_fail_driver((pinstage_status)q, caller, "cuStreamQuery");
        pinstage_status s;
        if (q == CUDA_ERROR_NOT_READY && (s = ps_record_and_wait(d, event, stream, 0, caller))) return s;
    }
    CUresult r = d->cuMemcpyDtoH(dst, src, bytes);
    *refused = r == CUDA_ERROR_INVALID_VALUE;
    return r ? ps_fail_driver((pinstage_status)r, caller, "cuMemcpyDtoH_v2") : PINSTAGE_SUCCESS;
}

ps_host_kind ps_host_kind_of(const ps_driver *d, const void *host, size_t bytes) {
    CUpointer_attribute attributes[3] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                         CU_POINTER_ATTRIBUTE_RANGE_SIZE};
    unsigned type = 0;
    CUdeviceptr start = 0;
    size_t size = 0;
    void *data[3] = {&type, &start, &size};
    uintptr_t p = (uintptr_t)host;
    /* Only the first byte is asked about: a range that starts pageable and
     * is page-locked further on is refused by the driver's pageable path,
     * which then gives way to staging, and staging copies any memory. */
    if (d->cuPointerGetAttributes(3, attributes, data, (CUdeviceptr)p) != CUDA_SUCCESS || type != CU_MEMORYTYPE_HOST)
        return PS_HOST_PAGEABLE;
    return start <= p && p - start <= size && bytes <= size - (p - start) ? PS_HOST_PINNED : PS_HOST_PARTLY_PINNED;
}
