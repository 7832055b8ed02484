/* Why the pageable sequences look the way they do: the synchronous
 * cuMemcpyHtoD_v2 / cuMemcpyDtoH_v2 run on the legacy default stream, which
 * is not ordered against CU_STREAM_NON_BLOCKING streams, so the caller's
 * stream is synchronized first. They beat the async pageable variants on
 * current drivers (the driver pipelines its staging copy; see
 * ../shared/BASELINE.md). A pageable cuMemcpyHtoD_v2 may return once the
 * source is staged, before the last DMA lands, so the legacy stream is
 * synchronized after it to keep the "landed" postcondition. */
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
    pinstage_status s;
    if (!ps_is_legacy_stream(stream) && (s = sync_stream(d, stream, caller))) return s;
    CUresult r = d->cuMemcpyHtoD(dst, src, bytes);
    if (r) return ps_fail_driver((pinstage_status)r, caller, "cuMemcpyHtoD_v2");
    return sync_stream(d, CU_STREAM_LEGACY, caller);
}

pinstage_status ps_copy_d2h_pageable(const ps_driver *d, void *dst, CUdeviceptr src, size_t bytes,
                                     CUstream stream, const char *caller) {
    pinstage_status s;
    if (!ps_is_legacy_stream(stream) && (s = sync_stream(d, stream, caller))) return s;
    CUresult r = d->cuMemcpyDtoH(dst, src, bytes);
    return r ? ps_fail_driver((pinstage_status)r, caller, "cuMemcpyDtoH_v2") : PINSTAGE_SUCCESS;
}
