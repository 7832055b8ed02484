/* SPDX-License-Identifier: MIT */
/* The paths pinstage-bench measures. The library's paths go through the
 * public API; "floor" and "fresh-pin" call the driver directly, so the
 * library's own overhead shows as the gap between "resident" and "floor". */
#include <stdlib.h>
#include <string.h>

#include "bench.h"

/* pageable: the driver's own staging (copy_from_host / copy_to_host). */
static pinstage_status pageable_run(bench_cell *c, void *state) {
    (void)state;
    return c->direction == BENCH_H2D ? pinstage_devbuf_copy_from_host(c->device, c->host, c->bytes)
                                     : pinstage_devbuf_copy_to_host(c->device, c->host, c->bytes);
}

bench_settings bench_config = {{PINSTAGE_ROUTE_ENGINE, 1u << 20, 0}, NULL};

/* upload / download with a chosen threshold or route. */
static pinstage_status buffer_setup(void **state, size_t threshold, const pinstage_profile *profile) {
    pinstage_buffer *buf;
    pinstage_status s = pinstage_buffer_create(&buf);
    if (s) return s;
    pinstage_buffer_set_auto_stage_max_bytes(buf, threshold);
    if (profile && (s = pinstage_buffer_set_profile(buf, profile))) {
        pinstage_buffer_free(buf);
        return s;
    }
    *state = buf;
    return PINSTAGE_SUCCESS;
}
static pinstage_status fixed_setup(void **state, int route, size_t chunk, unsigned threads) {
    pinstage_profile *fixed;
    pinstage_status s = pinstage_profile_fixed(&fixed, route, chunk, threads);
    if (s) return s;
    s = buffer_setup(state, PINSTAGE_AUTO_STAGE_PROFILE, fixed);
    pinstage_profile_free(fixed);
    return s;
}
static pinstage_status auto_setup(bench_cell *c, void **state) {
    (void)c;
    return buffer_setup(state, PINSTAGE_AUTO_STAGE_PROFILE, bench_config.profile);
}
static pinstage_status builtin_setup(bench_cell *c, void **state) {
    (void)c;
    pinstage_profile *builtin;
    pinstage_status s = pinstage_profile_builtin(&builtin);
    if (s) return s;
    s = buffer_setup(state, PINSTAGE_AUTO_STAGE_PROFILE, builtin);
    pinstage_profile_free(builtin);
    return s;
}
static pinstage_status staged_setup(bench_cell *c, void **state) {
    (void)c;
    return fixed_setup(state, PINSTAGE_ROUTE_STAGED, 0, 1);
}
static pinstage_status engine_setup(bench_cell *c, void **state) {
    (void)c;
    return fixed_setup(state, PINSTAGE_ROUTE_ENGINE, bench_config.engine.chunk, bench_config.engine.threads);
}
static pinstage_status pageable_route_setup(bench_cell *c, void **state) {
    (void)c;
    return buffer_setup(state, 0, NULL);
}
static pinstage_status buffer_run(bench_cell *c, void *state) {
    return c->direction == BENCH_H2D
               ? pinstage_buffer_upload(state, c->device, c->host, c->bytes, c->stream)
               : pinstage_buffer_download(state, c->host, c->bytes, c->device, c->stream);
}
static void buffer_teardown(bench_cell *c, void *state) {
    (void)c;
    pinstage_buffer_free(state);
}
static pinstage_buffer *buffer_of(void *state) { return state; }

/* pinned-host: upload / download of memory the caller page-locked itself
 * (a PyTorch pinned tensor, a decoder's frame pool). */
typedef struct {
    pinstage_buffer *buf;
    void *pinned;
    int first;
} pinned_host_state;

static pinstage_status pinned_host_setup(bench_cell *c, void **state) {
    pinned_host_state *p = calloc(1, sizeof *p);
    if (!p) return PINSTAGE_ERROR_OUT_OF_MEMORY;
    pinstage_status s = c->driver->alloc_host(&p->pinned, c->bytes);
    if (!s && (s = pinstage_buffer_create(&p->buf))) c->driver->free_host(p->pinned);
    if (s) {
        free(p);
        return s;
    }
    memcpy(p->pinned, c->host, c->bytes);
    p->first = 1;
    *state = p;
    return PINSTAGE_SUCCESS;
}
static pinstage_status pinned_host_run(bench_cell *c, void *state) {
    pinned_host_state *p = state;
    if (c->direction == BENCH_H2D) return pinstage_buffer_upload(p->buf, c->device, p->pinned, c->bytes, c->stream);
    pinstage_status s = pinstage_buffer_download(p->buf, p->pinned, c->bytes, c->device, c->stream);
    if (!s && p->first) memcpy(c->host, p->pinned, c->bytes); /* only for the correctness check */
    p->first = 0;
    return s;
}
static void pinned_host_teardown(bench_cell *c, void *state) {
    pinned_host_state *p = state;
    pinstage_buffer_free(p->buf);
    c->driver->free_host(p->pinned);
    free(p);
}

/* resident: upload_with / download_into. The producer's work is not transfer
 * cost, so the timed fill writes nothing: the data is already in pinned memory
 * (the correctness check runs with a real fill). */
typedef struct {
    pinstage_buffer *buf;
    const bench_cell *cell;
    int fill_for_check;
} resident_state;

static void resident_fill(void *dst, size_t n, void *user) {
    resident_state *r = user;
    if (r->fill_for_check) memcpy(dst, r->cell->host, n);
}
static pinstage_status resident_setup(bench_cell *c, void **state) {
    resident_state *r = calloc(1, sizeof *r);
    if (!r) return PINSTAGE_ERROR_OUT_OF_MEMORY;
    r->cell = c;
    r->fill_for_check = 1;
    pinstage_status s = pinstage_buffer_create(&r->buf);
    if (s) {
        free(r);
        return s;
    }
    *state = r;
    return PINSTAGE_SUCCESS;
}
static pinstage_status resident_run(bench_cell *c, void *state) {
    resident_state *r = state;
    if (c->direction == BENCH_H2D) {
        pinstage_status s = pinstage_buffer_upload_with(r->buf, c->device, c->bytes, c->stream, resident_fill, r);
        r->fill_for_check = 0;
        return s;
    }
    const void *view;
    pinstage_status s = pinstage_buffer_download_into(r->buf, c->device, c->bytes, c->stream, &view);
    if (!s && r->fill_for_check) memcpy(c->host, view, c->bytes); /* only to check it */
    r->fill_for_check = 0;
    return s;
}
static void resident_teardown(bench_cell *c, void *state) {
    (void)c;
    resident_state *r = state;
    pinstage_buffer_free(r->buf);
    free(r);
}

/* floor: async copy from or into a reused pinned buffer plus stream sync,
 * straight on the driver. */
typedef struct {
    void *pinned;
    int first;
} floor_state;

static pinstage_status floor_setup(bench_cell *c, void **state) {
    floor_state *f = calloc(1, sizeof *f);
    if (!f) return PINSTAGE_ERROR_OUT_OF_MEMORY;
    pinstage_status s = c->driver->alloc_host(&f->pinned, c->bytes);
    if (s) {
        free(f);
        return s;
    }
    memcpy(f->pinned, c->host, c->bytes);
    f->first = 1;
    *state = f;
    return PINSTAGE_SUCCESS;
}
static pinstage_status floor_run(bench_cell *c, void *state) {
    floor_state *f = state;
    pinstage_status s = c->direction == BENCH_H2D
                            ? c->driver->htod_async(pinstage_devbuf_ptr(c->device), f->pinned, c->bytes, c->stream)
                            : c->driver->dtoh_async(f->pinned, pinstage_devbuf_ptr(c->device), c->bytes, c->stream);
    if (!s) s = c->driver->stream_sync(c->stream);
    if (!s && f->first && c->direction == BENCH_D2H) memcpy(c->host, f->pinned, c->bytes); /* to check it */
    f->first = 0;
    return s;
}
static void floor_teardown(bench_cell *c, void *state) {
    floor_state *f = state;
    c->driver->free_host(f->pinned);
    free(f);
}

/* pageable-async: the driver's async copy from or into pageable memory plus
 * stream sync, the other way to order a pageable copy on a stream. */
static pinstage_status pageable_async_run(bench_cell *c, void *state) {
    (void)state;
    pinstage_status s = c->direction == BENCH_H2D
                            ? c->driver->htod_async(pinstage_devbuf_ptr(c->device), c->host, c->bytes, c->stream)
                            : c->driver->dtoh_async(c->host, pinstage_devbuf_ptr(c->device), c->bytes, c->stream);
    return s ? s : c->driver->stream_sync(c->stream);
}

/* fresh-pin: allocate pinned memory, copy through it, free it, every call. */
static pinstage_status fresh_run(bench_cell *c, void *state) {
    (void)state;
    void *pinned;
    pinstage_status s = c->driver->alloc_host(&pinned, c->bytes);
    if (s) return s;
    if (c->direction == BENCH_H2D) {
        memcpy(pinned, c->host, c->bytes);
        s = c->driver->htod_async(pinstage_devbuf_ptr(c->device), pinned, c->bytes, c->stream);
        if (!s) s = c->driver->stream_sync(c->stream);
    } else {
        s = c->driver->dtoh_async(pinned, pinstage_devbuf_ptr(c->device), c->bytes, c->stream);
        if (!s) s = c->driver->stream_sync(c->stream);
        if (!s) memcpy(c->host, pinned, c->bytes);
    }
    pinstage_status f = c->driver->free_host(pinned);
    return s ? s : f;
}

static pinstage_status no_setup(bench_cell *c, void **state) {
    (void)c;
    *state = NULL;
    return PINSTAGE_SUCCESS;
}
static void no_teardown(bench_cell *c, void *state) { (void)c, (void)state; }

const bench_path bench_paths[] = {
    {"pageable", "copy_from_host / copy_to_host: the driver's pageable path", no_setup, pageable_run, no_teardown, NULL},
    {"auto", "upload / download as the profile chooses (--profile, else built-in)", auto_setup, buffer_run, buffer_teardown, buffer_of},
    {"builtin", "upload / download with the built-in profile (no calibration)", builtin_setup, buffer_run, buffer_teardown, buffer_of},
    {"staged", "upload / download, route staged: one memcpy through pinned memory", staged_setup, buffer_run, buffer_teardown, buffer_of},
    {"engine", "upload / download, route engine at the --engine settings", engine_setup, buffer_run, buffer_teardown, buffer_of},
    {"pageable-route", "upload / download, threshold 0: the pageable route, landed on return", pageable_route_setup, buffer_run, buffer_teardown, buffer_of},
    {"pinned-host", "upload / download of page-locked host memory: straight DMA", pinned_host_setup, pinned_host_run, pinned_host_teardown, NULL},
    {"resident", "upload_with / download_into", resident_setup, resident_run, resident_teardown, NULL},
    {"pageable-async", "async copy from/into pageable memory + sync (raw driver)", no_setup, pageable_async_run, no_teardown, NULL},
    {"fresh-pin", "cuMemAllocHost + copy + cuMemFreeHost every call (raw driver)", no_setup, fresh_run, no_teardown, NULL},
    {"floor", "async copy from/into a reused pinned buffer + sync (raw driver)", floor_setup, floor_run, floor_teardown, NULL},
};
const size_t bench_path_count = sizeof bench_paths / sizeof bench_paths[0];
