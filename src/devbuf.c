/* SPDX-License-Identifier: MIT */
/* Device buffers: owned or wrapped device memory with an element type, and
 * the driver's plain pageable copies (the baseline the staging buffer
 * replaces). */
#include <stdlib.h>

#include "devbuf.h"
#include "driver.h"
#include "status.h"

static pinstage_status check_layout(const char *caller, size_t len, size_t elem_size,
                                    size_t elem_align) {
    if (len == 0) return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: len is 0", caller);
    if (elem_size == 0) return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: elem_size is 0", caller);
    if (elem_align == 0 || (elem_align & (elem_align - 1)) || elem_align > PS_MAX_ELEM_ALIGN)
        return ps_fail(PINSTAGE_ERROR_INVALID_VALUE,
                       "%s: elem_align=%zu is not a power of two between 1 and %d", caller,
                       elem_align, PS_MAX_ELEM_ALIGN);
    if (elem_size % elem_align)
        return ps_fail(PINSTAGE_ERROR_INVALID_VALUE,
                       "%s: elem_size=%zu is not a multiple of elem_align=%zu", caller, elem_size,
                       elem_align);
    if (len > SIZE_MAX / elem_size)
        return ps_fail(PINSTAGE_ERROR_INVALID_VALUE,
                       "%s: len=%zu elements of %zu bytes overflows size_t", caller, len, elem_size);
    return PINSTAGE_SUCCESS;
}

static pinstage_status new_handle(pinstage_devbuf **out, CUdeviceptr ptr, size_t len,
                                  size_t elem_size, size_t elem_align, int owned,
                                  const char *caller) {
    pinstage_devbuf *b = malloc(sizeof *b);
    if (!b) return ps_fail(PINSTAGE_ERROR_OUT_OF_MEMORY, "%s: out of host memory", caller);
    b->ptr = ptr;
    b->len = len;
    b->elem_size = elem_size;
    b->elem_align = elem_align;
    b->owned = owned;
    *out = b;
    return PINSTAGE_SUCCESS;
}

pinstage_status pinstage_devbuf_alloc(pinstage_devbuf **out, size_t len, size_t elem_size,
                                      size_t elem_align) {
    static const char caller[] = "pinstage_devbuf_alloc";
    const ps_driver *d;
    if (!out) return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: out is NULL", caller);
    *out = NULL;
    pinstage_status s = check_layout(caller, len, elem_size, elem_align);
    if (s || (s = ps_driver_get(&d))) return s;
    CUdeviceptr ptr = 0;
    CUresult r = d->cuMemAlloc(&ptr, len * elem_size);
    if (r) return ps_fail_driver((pinstage_status)r, caller, "cuMemAlloc_v2");
    s = new_handle(out, ptr, len, elem_size, elem_align, 1, caller);
    if (s) d->cuMemFree(ptr);
    return s;
}

pinstage_status pinstage_devbuf_wrap(pinstage_devbuf **out, CUdeviceptr ptr, size_t len,
                                     size_t elem_size, size_t elem_align) {
    static const char caller[] = "pinstage_devbuf_wrap";
    if (!out) return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: out is NULL", caller);
    *out = NULL;
    pinstage_status s = check_layout(caller, len, elem_size, elem_align);
    if (s) return s;
    if (ptr == 0) return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: ptr is 0", caller);
    if (ptr % elem_align)
        return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: ptr=0x%llx is not aligned to %zu bytes",
                       caller, ptr, elem_align);
    return new_handle(out, ptr, len, elem_size, elem_align, 0, caller);
}

pinstage_status pinstage_devbuf_free(pinstage_devbuf *buf) {
    pinstage_status s = PINSTAGE_SUCCESS;
    if (!buf) return s;
    if (buf->owned) {
        const ps_driver *d;
        s = ps_driver_get(&d);
        if (!s) {
            CUresult r = d->cuMemFree(buf->ptr);
            if (r) s = ps_fail_driver((pinstage_status)r, "pinstage_devbuf_free", "cuMemFree_v2");
        }
    }
    free(buf);
    return s;
}

CUdeviceptr pinstage_devbuf_ptr(const pinstage_devbuf *buf) { return buf ? buf->ptr : 0; }
size_t pinstage_devbuf_len(const pinstage_devbuf *buf) { return buf ? buf->len : 0; }
size_t pinstage_devbuf_elem_size(const pinstage_devbuf *buf) { return buf ? buf->elem_size : 0; }
size_t pinstage_devbuf_bytes(const pinstage_devbuf *buf) { return buf ? buf->len * buf->elem_size : 0; }

pinstage_status pinstage_devbuf_check_elem(const pinstage_devbuf *buf, size_t elem_size,
                                           size_t elem_align, const char *caller) {
    if (!caller) caller = "pinstage_devbuf_check_elem";
    if (!buf) return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: device buffer is NULL", caller);
    if (buf->elem_size != elem_size || buf->elem_align != elem_align)
        return ps_fail(PINSTAGE_ERROR_INVALID_VALUE,
                       "%s: the device buffer holds %zu-byte elements aligned to %zu, not %zu-byte "
                       "elements aligned to %zu",
                       caller, buf->elem_size, buf->elem_align, elem_size, elem_align);
    return PINSTAGE_SUCCESS;
}

static pinstage_status check_copy(const char *caller, const pinstage_devbuf *dev, const void *host,
                                  size_t n) {
    if (!dev) return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: device buffer is NULL", caller);
    if (!host) return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: host pointer is NULL", caller);
    if (n != dev->len)
        return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: n=%zu but the device buffer holds %zu elements",
                       caller, n, dev->len);
    return PINSTAGE_SUCCESS;
}

pinstage_status pinstage_devbuf_copy_from_host(pinstage_devbuf *dst, const void *src, size_t n) {
    static const char caller[] = "pinstage_devbuf_copy_from_host";
    const ps_driver *d;
    pinstage_status s = check_copy(caller, dst, src, n);
    if (s || (s = ps_driver_get(&d))) return s;
    CUresult r = d->cuMemcpyHtoD(dst->ptr, src, n * dst->elem_size);
    return r ? ps_fail_driver((pinstage_status)r, caller, "cuMemcpyHtoD_v2") : PINSTAGE_SUCCESS;
}

pinstage_status pinstage_devbuf_copy_to_host(const pinstage_devbuf *src, void *dst, size_t n) {
    static const char caller[] = "pinstage_devbuf_copy_to_host";
    const ps_driver *d;
    pinstage_status s = check_copy(caller, src, dst, n);
    if (s || (s = ps_driver_get(&d))) return s;
    CUresult r = d->cuMemcpyDtoH(dst, src->ptr, n * src->elem_size);
    return r ? ps_fail_driver((pinstage_status)r, caller, "cuMemcpyDtoH_v2") : PINSTAGE_SUCCESS;
}
