/* The staging buffer: every public transfer reads as
 *   argument checks -> path choice -> pinned memory -> driver calls -> stats
 * with the driver sequences in copy.c and the allocation policy in pinned.c. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "copy.h"
#include "devbuf.h"
#include "path.h"
#include "pinned.h"
#include "status.h"

struct pinstage_buffer {
    ps_pinned pinned;
    size_t auto_stage_max_bytes;
    pinstage_stats stats;
};

pinstage_status pinstage_buffer_create(pinstage_buffer **out) {
    if (!out) return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "pinstage_buffer_create: out is NULL");
    *out = calloc(1, sizeof **out);
    if (!*out) return ps_fail(PINSTAGE_ERROR_OUT_OF_MEMORY, "pinstage_buffer_create: out of host memory");
    (*out)->auto_stage_max_bytes = PINSTAGE_DEFAULT_AUTO_STAGE_MAX_BYTES;
    return PINSTAGE_SUCCESS;
}

pinstage_status pinstage_buffer_create_with_capacity(pinstage_buffer **out, size_t bytes) {
    static const char caller[] = "pinstage_buffer_create_with_capacity";
    pinstage_buffer *buf;
    if (!out) return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: out is NULL", caller);
    *out = NULL;
    pinstage_status s = pinstage_buffer_create(&buf);
    if (s) return s;
    s = pinstage_buffer_reserve(buf, bytes);
    if (s) {
        /* pinstage_buffer_reserve named itself; the user called us. */
        char why[512];
        snprintf(why, sizeof why, "%s", pinstage_last_error_message());
        free(buf);
        return ps_fail(s, "%s: %s", caller, why);
    }
    *out = buf;
    return PINSTAGE_SUCCESS;
}

void pinstage_buffer_free(pinstage_buffer *buf) {
    if (!buf) return;
    pinstage_buffer_shrink_to_fit(buf);
    free(buf);
}

size_t pinstage_buffer_capacity(const pinstage_buffer *buf) { return buf ? buf->pinned.capacity : 0; }

void pinstage_buffer_stats(const pinstage_buffer *buf, pinstage_stats *stats) {
    if (!stats) return;
    if (buf)
        *stats = buf->stats;
    else
        memset(stats, 0, sizeof *stats);
}

size_t pinstage_buffer_auto_stage_max_bytes(const pinstage_buffer *buf) {
    return buf ? buf->auto_stage_max_bytes : 0;
}

void pinstage_buffer_set_auto_stage_max_bytes(pinstage_buffer *buf, size_t bytes) {
    if (buf) buf->auto_stage_max_bytes = bytes;
}

/* Grows the pinned memory to hold `bytes` (already checked non-zero). */
static pinstage_status ensure_capacity(pinstage_buffer *buf, const ps_driver *d, size_t bytes,
                                       const char *caller) {
    if (bytes <= buf->pinned.capacity) return PINSTAGE_SUCCESS;
    size_t capacity = ps_pinned_round(bytes);
    if (capacity == 0)
        return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: bytes=%zu overflows when rounded up to %zu",
                       caller, bytes, PINSTAGE_CAPACITY_GRANULARITY);
    pinstage_status s = ps_pinned_grow(&buf->pinned, d, capacity, &buf->stats.pin_time_ns, caller);
    if (s) return s;
    buf->stats.pinned_allocations++;
    if (capacity > buf->stats.peak_capacity) buf->stats.peak_capacity = capacity;
    return PINSTAGE_SUCCESS;
}

pinstage_status pinstage_buffer_reserve(pinstage_buffer *buf, size_t bytes) {
    static const char caller[] = "pinstage_buffer_reserve";
    const ps_driver *d;
    if (!buf) return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: buf is NULL", caller);
    if (bytes == 0) return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: bytes is 0", caller);
    if (ps_pinned_round(bytes) == 0)
        return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: bytes=%zu overflows when rounded up to %zu",
                       caller, bytes, PINSTAGE_CAPACITY_GRANULARITY);
    if (bytes <= buf->pinned.capacity) return PINSTAGE_SUCCESS;
    pinstage_status s = ps_driver_get(&d);
    return s ? s : ensure_capacity(buf, d, bytes, caller);
}

void pinstage_buffer_shrink_to_fit(pinstage_buffer *buf) {
    const ps_driver *d;
    /* A pinned pointer exists only if a driver was loaded to make it. */
    if (!buf || !buf->pinned.ptr || ps_driver_get(&d)) return;
    ps_pinned_release(&buf->pinned, d, &buf->stats.pin_time_ns);
}

/* The checks every transfer shares; on success *bytes is n * element size. */
static pinstage_status check_transfer(const char *caller, const pinstage_buffer *buf,
                                      const pinstage_devbuf *dev, const char *dev_name,
                                      int host_given, const char *host_name, size_t n,
                                      size_t *bytes) {
    if (!buf) return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: buf is NULL", caller);
    if (!dev) return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: %s is NULL", caller, dev_name);
    if (!host_given) return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: %s is NULL", caller, host_name);
    if (n == 0) return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: n is 0", caller);
    if (n != dev->len)
        return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: n=%zu but %s holds %zu elements", caller,
                       n, dev_name, dev->len);
    /* Cannot overflow: a device buffer's len * elem_size was checked when it was made. */
    *bytes = n * dev->elem_size;
    return PINSTAGE_SUCCESS;
}

/* Makes `bytes` of pinned memory, aligned for the element, ready to use. */
static pinstage_status prepare_pinned(pinstage_buffer *buf, const ps_driver *d, size_t bytes,
                                      size_t elem_align, const char *caller) {
    pinstage_status s = ensure_capacity(buf, d, bytes, caller);
    if (s) return s;
    if ((uintptr_t)buf->pinned.ptr % elem_align)
        return ps_fail(PINSTAGE_ERROR_INVALID_VALUE,
                       "%s: the pinned allocation at %p is not aligned to the element's %zu bytes",
                       caller, buf->pinned.ptr, elem_align);
    return PINSTAGE_SUCCESS;
}

pinstage_status pinstage_buffer_upload_with(pinstage_buffer *buf, pinstage_devbuf *dst, size_t n,
                                            CUstream stream, pinstage_fill_fn fill,
                                            void *user_data) {
    static const char caller[] = "pinstage_buffer_upload_with";
    const ps_driver *d;
    size_t bytes = 0;
    pinstage_status s = check_transfer(caller, buf, dst, "dst", fill != NULL, "fill", n, &bytes);
    if (s || (s = ps_driver_get(&d))) return s;
    if ((s = prepare_pinned(buf, d, bytes, dst->elem_align, caller))) return s;
    fill(buf->pinned.ptr, n, user_data);
    if ((s = ps_copy_h2d_staged(d, dst->ptr, buf->pinned.ptr, bytes, stream, caller))) return s;
    buf->stats.staged_transfers++;
    buf->stats.bytes_uploaded += bytes;
    return PINSTAGE_SUCCESS;
}

pinstage_status pinstage_buffer_download_into(pinstage_buffer *buf, const pinstage_devbuf *src,
                                              size_t n, CUstream stream, const void **view) {
    static const char caller[] = "pinstage_buffer_download_into";
    const ps_driver *d;
    size_t bytes = 0;
    if (view) *view = NULL;
    pinstage_status s = check_transfer(caller, buf, src, "src", view != NULL, "view", n, &bytes);
    if (s || (s = ps_driver_get(&d))) return s;
    if ((s = prepare_pinned(buf, d, bytes, src->elem_align, caller))) return s;
    if ((s = ps_copy_d2h_staged(d, buf->pinned.ptr, src->ptr, bytes, stream, caller))) return s;
    buf->stats.staged_transfers++;
    buf->stats.bytes_downloaded += bytes;
    *view = buf->pinned.ptr;
    return PINSTAGE_SUCCESS;
}

pinstage_status pinstage_buffer_upload(pinstage_buffer *buf, pinstage_devbuf *dst, const void *src,
                                       size_t n, CUstream stream) {
    static const char caller[] = "pinstage_buffer_upload";
    const ps_driver *d;
    size_t bytes = 0;
    pinstage_status s = check_transfer(caller, buf, dst, "dst", src != NULL, "src", n, &bytes);
    if (s || (s = ps_driver_get(&d))) return s;
    if (ps_choose_path(bytes, buf->auto_stage_max_bytes) == PS_PATH_PAGEABLE) {
        if ((s = ps_copy_h2d_pageable(d, dst->ptr, src, bytes, stream, caller))) return s;
        buf->stats.direct_transfers++;
    } else {
        if ((s = prepare_pinned(buf, d, bytes, dst->elem_align, caller))) return s;
        memcpy(buf->pinned.ptr, src, bytes);
        if ((s = ps_copy_h2d_staged(d, dst->ptr, buf->pinned.ptr, bytes, stream, caller))) return s;
        buf->stats.staged_transfers++;
    }
    buf->stats.bytes_uploaded += bytes;
    return PINSTAGE_SUCCESS;
}

pinstage_status pinstage_buffer_download(pinstage_buffer *buf, void *dst, size_t n,
                                         const pinstage_devbuf *src, CUstream stream) {
    static const char caller[] = "pinstage_buffer_download";
    const ps_driver *d;
    size_t bytes = 0;
    pinstage_status s = check_transfer(caller, buf, src, "src", dst != NULL, "dst", n, &bytes);
    if (s || (s = ps_driver_get(&d))) return s;
    if (ps_choose_path(bytes, buf->auto_stage_max_bytes) == PS_PATH_PAGEABLE) {
        if ((s = ps_copy_d2h_pageable(d, dst, src->ptr, bytes, stream, caller))) return s;
        buf->stats.direct_transfers++;
    } else {
        if ((s = prepare_pinned(buf, d, bytes, src->elem_align, caller))) return s;
        if ((s = ps_copy_d2h_staged(d, buf->pinned.ptr, src->ptr, bytes, stream, caller))) return s;
        memcpy(dst, buf->pinned.ptr, bytes);
        buf->stats.staged_transfers++;
    }
    buf->stats.bytes_downloaded += bytes;
    return PINSTAGE_SUCCESS;
}
