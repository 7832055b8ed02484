/* Why the pageable sequences look the way they do (measured on an H200 with
 * pinstage-bench's pageable-async and direct paths, side by side):
 *  - Uploads: the async copy from pageable memory on the caller's stream, then
 *    a sync of that stream. It is ordered after the stream's work by
 *    construction, and has landed when the sync returns. The synchronous
 *    cuMemcpyHtoD_v2 returns once the source is staged, before the last DMA
 *    lands, and runs on the legacy stream, so keeping the same postcondition
 *    with it takes a sync before and after: slower at every size measured.
 *  - Downloads: a sync of the caller's stream (the legacy stream is not
 *    ordered after CU_STREAM_NON_BLOCKING streams), then the synchronous
 *    cuMemcpyDtoH_v2, which beats the async pageable variant. */
#include "copy.h"
#include "status.h"

static pinstage_status sync_stream(const ps_driver *d, CUstream stream, const char *caller) {
    CUresult r = d->cuStreamSynchronize(stream);
    return r ? ps_fail_driver((pinstage_status)r, caller, "cuStreamSynchronize") : PINSTAGE_SUCCESS;
}

pinstage_status ps_copy_h2d_staged(const ps_driver *d, CUdeviceptr dst, const void *pinned,
                                   size_t bytes, CUstream stream, const char *caller) {
    CUresult r = d->cuMemcpyHtoDAsync(dst, pinned, bytes, stream);
    if (r) return ps_fail_driver((pinstage_status)r, caller, "cuMemcpyHtoDAsync_v2");
    return sync_stream(d, stream, caller);
}

pinstage_status ps_copy_d2h_staged(const ps_driver *d, void *pinned, CUdeviceptr src, size_t bytes,
                                   CUstream stream, const char *caller) {
    CUresult r = d->cuMemcpyDtoHAsync(pinned, src, bytes, stream);
    if (r) return ps_fail_driver((pinstage_status)r, caller, "cuMemcpyDtoHAsync_v2");
    return sync_stream(d, stream, caller);
}

pinstage_status ps_copy_h2d_pageable(const ps_driver *d, CUdeviceptr dst, const void *src,
                                     size_t bytes, CUstream stream, const char *caller) {
    CUresult r = d->cuMemcpyHtoDAsync(dst, src, bytes, stream);
    if (r) return ps_fail_driver((pinstage_status)r, caller, "cuMemcpyHtoDAsync_v2");
    return sync_stream(d, stream, caller);
}

pinstage_status ps_copy_d2h_pageable(const ps_driver *d, void *dst, CUdeviceptr src, size_t bytes,
                                     CUstream stream, const char *caller) {
    pinstage_status s;
    if (!ps_is_legacy_stream(stream) && (s = sync_stream(d, stream, caller))) return s;
    CUresult r = d->cuMemcpyDtoH(dst, src, bytes);
    return r ? ps_fail_driver((pinstage_status)r, caller, "cuMemcpyDtoH_v2") : PINSTAGE_SUCCESS;
}
