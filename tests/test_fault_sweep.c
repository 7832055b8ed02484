/* SPDX-License-Identifier: MIT */
/* The fault sweep. Every public operation, in each state that changes which
 * driver calls it makes (first use and warm, both sides of the threshold,
 * each route, the ring's calls, the helpers), is run once while the
 * emulated driver records its calls; then each recorded call is failed in
 * turn with each error class, and one set of invariants is checked:
 *
 *  - the status is the driver's, passed through, and the message names the
 *    failing call; or the operation succeeded by a documented recovery
 *    (a pageable fallback when pinned memory cannot be had, staging when the
 *    driver refuses a host range, an unanswered pointer query read as
 *    pageable) with the right bytes;
 *  - the counters and capacity are what they were (a retired block, which
 *    counts the failure itself, excepted);
 *  - nothing leaked once the fixture is torn down (the emulator's
 *    accounting: pinned and device memory, streams, events);
 *  - the next call on the same object succeeds and moves exactly the right
 *    bytes, checked without synchronizing first, and no copy of the failed
 *    call lands on the next call's memory or the next call's bytes on the
 *    failed call's.
 *
 * The emulator runs its queues inline here, so every run of an operation
 * makes the same calls; the ordering of copies in flight after a failure is
 * tested with slow DMAs in test_engine and test_ring. */
#include <time.h>
#include <unistd.h>

#include "check.h"

#define K 1024u
#define SEED_DEV 11u  /* what the device buffer holds before an operation */
#define SEED_OP 22u   /* what an operation uploads */
#define SEED_NEXT 33u /* what the call after it moves */

typedef enum {
    BUF_UPLOAD_WITH,
    BUF_DOWNLOAD_INTO,
    BUF_UPLOAD,
    BUF_DOWNLOAD,
    BUF_UPLOAD_PINNED_HOST,
    BUF_DOWNLOAD_PINNED_HOST,
    BUF_RESERVE,
    BUF_SHRINK,
    BUF_BIND,
    BUF_FREE,
    BUF_CREATE_WITH_CAPACITY,
    DEV_ALLOC,
    DEV_FREE,
    DEV_COPY_FROM_HOST,
    DEV_COPY_TO_HOST,
    RING_UPLOAD_WITH,
    RING_UPLOAD,
    RING_DOWNLOAD,
    RING_WAIT,
    RING_POLL,
    RING_SYNCHRONIZE,
    RING_RESERVE,
    RING_FREE,
    CONTEXT_INIT,
    CONTEXT_RELEASE,
    STREAM_CREATE,
    STREAM_DESTROY,
    STREAM_SYNCHRONIZE,
    DEVICE_COUNT,
    DEVICE_INFO,
    DRIVER_GET_PROC,
    PROFILE_CALIBRATE,
    PROFILE_LOAD,
} op_kind;

typedef struct {
    const char *name;
    op_kind kind;
    size_t bytes;
    int warm;         /* the buffer / ring moved data once before */
    size_t threshold; /* the buffer's auto_stage_max_bytes */
    int bound;        /* buffer and ring bound to device 0 with memory placed on node 0, and
                         called with no context current: each call switches to its own */
} sweep_op;

#define PROFILE PINSTAGE_AUTO_STAGE_PROFILE
/* The copy engine at fixed settings: 64 KiB chunks, so a transfer of 10
 * chunks reuses each of the four slots. */
#define ENGINE ((size_t)-3)
#define ENGINE_BYTES (10 * 64 * K + 100)
static const sweep_op ops[] = {
    {"upload_with, first use", BUF_UPLOAD_WITH, 150528, 0, PROFILE, 0},
    {"upload_with, warm", BUF_UPLOAD_WITH, 150528, 1, PROFILE, 0},
    {"upload_with, growing", BUF_UPLOAD_WITH, 600 * K, 1, PROFILE, 0},
    {"download_into, first use", BUF_DOWNLOAD_INTO, 150528, 0, PROFILE, 0},
    {"download_into, warm", BUF_DOWNLOAD_INTO, 150528, 1, PROFILE, 0},
    {"upload, staged, first use", BUF_UPLOAD, 150528, 0, PROFILE, 0},
    {"upload, staged, warm", BUF_UPLOAD, 150528, 1, PROFILE, 0},
    {"upload, engine", BUF_UPLOAD, ENGINE_BYTES, 1, ENGINE, 0},
    {"upload, engine, first use", BUF_UPLOAD, ENGINE_BYTES, 0, ENGINE, 0},
    {"upload, over the threshold: pageable", BUF_UPLOAD, 150528, 1, 0, 0},
    {"upload, small: pageable by profile", BUF_UPLOAD, 4 * K, 1, PROFILE, 0},
    {"download, staged, first use", BUF_DOWNLOAD, 150528, 0, PROFILE, 0},
    {"download, staged, warm", BUF_DOWNLOAD, 150528, 1, PROFILE, 0},
    {"download, engine", BUF_DOWNLOAD, ENGINE_BYTES, 1, ENGINE, 0},
    {"download, engine, first use", BUF_DOWNLOAD, ENGINE_BYTES, 0, ENGINE, 0},
    {"download, over the threshold: pageable", BUF_DOWNLOAD, 150528, 1, 0, 0},
    {"upload, page-locked source", BUF_UPLOAD_PINNED_HOST, 150528, 1, PROFILE, 0},
    {"download, page-locked destination", BUF_DOWNLOAD_PINNED_HOST, 150528, 1, PROFILE, 0},
    {"reserve, first use", BUF_RESERVE, 150528, 0, PROFILE, 0},
    {"reserve, growing", BUF_RESERVE, 600 * K, 1, PROFILE, 0},
    {"shrink_to_fit", BUF_SHRINK, 150528, 1, PROFILE, 0},
    {"buffer_free", BUF_FREE, 150528, 1, PROFILE, 0},
    {"buffer_bind", BUF_BIND, 150528, 0, PROFILE, 0},
    {"bound: upload_with, first use", BUF_UPLOAD_WITH, 150528, 0, PROFILE, 1},
    {"bound: upload, engine, first use", BUF_UPLOAD, ENGINE_BYTES, 0, ENGINE, 1},
    {"bound: download, staged, warm", BUF_DOWNLOAD, 150528, 1, PROFILE, 1},
    {"bound: reserve, growing", BUF_RESERVE, 600 * K, 1, PROFILE, 1},
    {"bound: shrink_to_fit", BUF_SHRINK, 150528, 1, PROFILE, 1},
    {"bound: buffer_free", BUF_FREE, 150528, 1, PROFILE, 1},
    {"bound: ring upload_async, large, first use", RING_UPLOAD, 1u << 20, 0, PROFILE, 1},
    {"bound: ring download_async, warm", RING_DOWNLOAD, 150528, 1, PROFILE, 1},
    {"bound: ring wait", RING_WAIT, 150528, 1, PROFILE, 1},
    {"bound: ring free", RING_FREE, 150528, 1, PROFILE, 1},
    {"create_with_capacity", BUF_CREATE_WITH_CAPACITY, 150528, 0, PROFILE, 0},
    {"devbuf_alloc", DEV_ALLOC, 150528, 0, PROFILE, 0},
    {"devbuf_free", DEV_FREE, 150528, 0, PROFILE, 0},
    {"devbuf_copy_from_host", DEV_COPY_FROM_HOST, 150528, 0, PROFILE, 0},
    {"devbuf_copy_to_host", DEV_COPY_TO_HOST, 150528, 0, PROFILE, 0},
    {"ring upload_with_async, first use", RING_UPLOAD_WITH, 150528, 0, PROFILE, 0},
    {"ring upload_with_async, warm", RING_UPLOAD_WITH, 150528, 1, PROFILE, 0},
    {"ring upload_async, large", RING_UPLOAD, 1u << 20, 1, PROFILE, 0},
    {"ring download_async, first use", RING_DOWNLOAD, 150528, 0, PROFILE, 0},
    {"ring download_async, warm", RING_DOWNLOAD, 150528, 1, PROFILE, 0},
    {"ring wait", RING_WAIT, 150528, 1, PROFILE, 0},
    {"ring poll", RING_POLL, 150528, 1, PROFILE, 0},
    {"ring synchronize", RING_SYNCHRONIZE, 150528, 1, PROFILE, 0},
    {"ring reserve", RING_RESERVE, 600 * K, 1, PROFILE, 0},
    {"ring free", RING_FREE, 150528, 1, PROFILE, 0},
    {"context_init", CONTEXT_INIT, 0, 0, PROFILE, 0},
    {"context_release", CONTEXT_RELEASE, 0, 0, PROFILE, 0},
    {"stream_create", STREAM_CREATE, 0, 0, PROFILE, 0},
    {"stream_destroy", STREAM_DESTROY, 0, 0, PROFILE, 0},
    {"stream_synchronize", STREAM_SYNCHRONIZE, 0, 0, PROFILE, 0},
    {"device_count", DEVICE_COUNT, 0, 0, PROFILE, 0},
    {"device_get_info", DEVICE_INFO, 0, 0, PROFILE, 0},
    {"driver_get_proc", DRIVER_GET_PROC, 0, 0, PROFILE, 0},
    {"profile_calibrate", PROFILE_CALIBRATE, 0, 0, PROFILE, 0},
    {"profile_load (a measured profile: checked against this machine)", PROFILE_LOAD, 0, 0, PROFILE, 0},
};

/* A measured profile file, made once, for profile_load. */
static char measured_profile[64];

/* The error classes each recorded call is failed with. */
typedef struct {
    const char *name;
    int code;
    int sticky; /* this call and every later one of its entry point fail (at a wait: a dead context) */
} error_class;

static const error_class classes[] = {
    {"out of memory", 2, 0},
    {"invalid value", 1, 0},
    {"an unknown code", 12345, 0},
    {"sticky", 719, 1},
};

typedef struct {
    const sweep_op *op;
    pinstage_buffer *buf, *made_buf;
    pinstage_ring *ring;
    pinstage_devbuf *dev, *other, *victim, *made_dev;
    CUstream stream, spare, made_stream;
    unsigned char *host, *back, *back2;
    void *pinned;
    size_t bytes;
    pinstage_ticket ticket;
    int contexts; /* extra retains of the primary context to release */
    CUcontext context; /* bound operations: the fixture's context, made current again after the call */
} fixture;

static unsigned long cases_run, faults_fired, recoveries, calibration_cases, calibration_fired;

static void fill_op(void *dst, size_t n, void *user) {
    (void)user;
    fill_pattern(dst, n, SEED_OP); /* u8 elements */
}

static void setup(fixture *f, const sweep_op *op) {
    memset(f, 0, sizeof *f);
    f->op = op;
    f->bytes = op->bytes ? op->bytes : 4 * K;
    REQUIRE_OK(pinstage_stream_create(&f->stream, PINSTAGE_STREAM_NON_BLOCKING));
    REQUIRE_OK(pinstage_devbuf_alloc_u8(&f->dev, f->bytes));
    REQUIRE_OK(pinstage_devbuf_alloc_u8(&f->other, f->bytes));
    f->host = malloc(f->bytes);
    f->back = malloc(f->bytes);
    f->back2 = malloc(f->bytes);
    fill_pattern(f->host, f->bytes, SEED_DEV);
    write_device(f->dev, f->host);
    fill_pattern(f->host, f->bytes, SEED_OP);
    memset(f->back, 0, f->bytes);
    REQUIRE_OK(pinstage_buffer_create(&f->buf));
    if (op->threshold == ENGINE) {
        pinstage_profile *p;
        REQUIRE_OK(pinstage_profile_fixed(&p, PINSTAGE_ROUTE_ENGINE, 64 * K, 0));
        REQUIRE_OK(pinstage_buffer_set_profile(f->buf, p));
        pinstage_profile_free(p);
    } else {
        pinstage_buffer_set_auto_stage_max_bytes(f->buf, op->threshold);
    }
    REQUIRE_OK(pinstage_ring_create(&f->ring, 2, 0));
    if (op->bound) {
        pinstage_binding b = {0, NULL, 0};
        REQUIRE_OK(pinstage_buffer_bind(f->buf, &b));
        REQUIRE_OK(pinstage_ring_bind(f->ring, &b));
    }
    if (op->warm) {
        /* Pinned memory and events exist; sizes that grow need more. */
        size_t warm = op->bytes == 600 * K ? op->bytes / 2 : op->bytes;
        pinstage_devbuf *w;
        REQUIRE_OK(pinstage_devbuf_alloc_u8(&w, warm));
        REQUIRE_OK(pinstage_buffer_upload_u8(f->buf, w, f->host, warm, f->stream));
        REQUIRE_OK(pinstage_buffer_download_u8(f->buf, f->back2, warm, w, f->stream));
        pinstage_ticket t;
        const void *v;
        REQUIRE_OK(pinstage_ring_upload_async(f->ring, w, f->host, warm, f->stream));
        REQUIRE_OK(pinstage_ring_download_async(f->ring, w, warm, f->stream, &t));
        REQUIRE_OK(pinstage_ring_wait(f->ring, t, &v));
        REQUIRE_OK(pinstage_ring_release(f->ring, t));
        REQUIRE_OK(pinstage_ring_synchronize(f->ring));
        REQUIRE_OK(pinstage_devbuf_free(w));
    }
    if (op->kind == BUF_UPLOAD_PINNED_HOST || op->kind == BUF_DOWNLOAD_PINNED_HOST) {
        REQUIRE_OK((pinstage_status)drv.alloc_host(&f->pinned, f->bytes));
        fill_pattern(f->pinned, f->bytes, SEED_OP);
    }
    if (op->kind == RING_WAIT || op->kind == RING_POLL || op->kind == RING_SYNCHRONIZE || op->kind == RING_FREE)
        REQUIRE_OK(pinstage_ring_download_async(f->ring, f->dev, f->bytes, f->stream, &f->ticket));
    if (op->kind == DEV_FREE) REQUIRE_OK(pinstage_devbuf_alloc_u8(&f->victim, 64));
    if (op->kind == CONTEXT_RELEASE) {
        REQUIRE_OK(pinstage_context_init(0));
        f->contexts = 1;
    }
    if (op->kind == STREAM_DESTROY || op->kind == STREAM_SYNCHRONIZE)
        REQUIRE_OK(pinstage_stream_create(&f->spare, 0));
    REQUIRE_OK((pinstage_status)drv.ctx_sync());
    if (op->bound) {
        REQUIRE_OK((pinstage_status)drv.ctx_get_current(&f->context));
        REQUIRE_OK((pinstage_status)drv.ctx_set_current(NULL));
    }
}

/* A bound object's calls are made with no context current (setup leaves
 * none), so every one makes its own current; after_run checks that it gave
 * the caller's (none) back, and makes the fixture's current again. */
static int restore_failed(pinstage_status s) {
    return s && strstr(pinstage_last_error_message(), "could not be made current again") != NULL;
}

static void after_run(fixture *f, pinstage_status s) {
    if (!f->op->bound) return;
    CUcontext during = (CUcontext)1;
    CHECK_OK((pinstage_status)drv.ctx_get_current(&during));
    if (!restore_failed(s)) CHECK(during == NULL);
    REQUIRE_OK((pinstage_status)drv.ctx_set_current(f->context));
}

static pinstage_status run(fixture *f) {
    pinstage_binding binding = pinstage_binding_for_device(0);
    const void *view = NULL;
    pinstage_status s = PINSTAGE_SUCCESS;
    int count;
    pinstage_device_info info;
    void *fn;
    switch (f->op->kind) {
    case BUF_UPLOAD_WITH: return pinstage_buffer_upload_with(f->buf, f->dev, f->bytes, f->stream, fill_op, NULL);
    case BUF_DOWNLOAD_INTO:
        s = pinstage_buffer_download_into(f->buf, f->dev, f->bytes, f->stream, &view);
        if (!s) memcpy(f->back, view, f->bytes);
        return s;
    case BUF_UPLOAD: return pinstage_buffer_upload(f->buf, f->dev, f->host, f->bytes, f->stream);
    case BUF_DOWNLOAD: return pinstage_buffer_download(f->buf, f->back, f->bytes, f->dev, f->stream);
    case BUF_UPLOAD_PINNED_HOST: return pinstage_buffer_upload(f->buf, f->dev, f->pinned, f->bytes, f->stream);
    case BUF_DOWNLOAD_PINNED_HOST:
        s = pinstage_buffer_download(f->buf, f->pinned, f->bytes, f->dev, f->stream);
        if (!s) memcpy(f->back, f->pinned, f->bytes);
        return s;
    case BUF_RESERVE: return pinstage_buffer_reserve(f->buf, f->bytes);
    case BUF_SHRINK: return pinstage_buffer_shrink_to_fit(f->buf);
    case BUF_BIND: return pinstage_buffer_bind(f->buf, &binding);
    case BUF_FREE: /* the handle is gone whatever the status */
        s = pinstage_buffer_free(f->buf);
        f->buf = NULL;
        return s;
    case BUF_CREATE_WITH_CAPACITY: return pinstage_buffer_create_with_capacity(&f->made_buf, f->bytes);
    case DEV_ALLOC: return pinstage_devbuf_alloc_u8(&f->made_dev, f->bytes);
    case DEV_FREE:
        s = pinstage_devbuf_free(f->victim);
        f->victim = NULL;
        return s;
    case DEV_COPY_FROM_HOST: return pinstage_devbuf_copy_from_host(f->dev, f->host, f->bytes);
    case DEV_COPY_TO_HOST: return pinstage_devbuf_copy_to_host(f->dev, f->back, f->bytes);
    case RING_UPLOAD_WITH: return pinstage_ring_upload_with_async(f->ring, f->dev, f->bytes, f->stream, fill_op, NULL);
    case RING_UPLOAD: return pinstage_ring_upload_async(f->ring, f->dev, f->host, f->bytes, f->stream);
    case RING_DOWNLOAD: return pinstage_ring_download_async(f->ring, f->dev, f->bytes, f->stream, &f->ticket);
    case RING_WAIT:
    case RING_POLL:
        s = f->op->kind == RING_WAIT ? pinstage_ring_wait(f->ring, f->ticket, &view)
                                     : pinstage_ring_poll(f->ring, f->ticket, &view);
        if (!s) memcpy(f->back, view, f->bytes);
        return s;
    case RING_SYNCHRONIZE: return pinstage_ring_synchronize(f->ring);
    case RING_RESERVE: return pinstage_ring_reserve(f->ring, f->bytes);
    case RING_FREE:
        s = pinstage_ring_free(f->ring);
        f->ring = NULL;
        return s;
    case CONTEXT_INIT:
        if (!(s = pinstage_context_init(0))) f->contexts++;
        return s;
    case CONTEXT_RELEASE: return pinstage_context_release(0);
    case STREAM_CREATE: return pinstage_stream_create(&f->made_stream, 0);
    case STREAM_DESTROY:
        s = pinstage_stream_destroy(f->spare);
        if (!s || f->spare == NULL) f->spare = NULL;
        return s;
    case STREAM_SYNCHRONIZE: return pinstage_stream_synchronize(f->spare);
    case DEVICE_COUNT: return pinstage_device_count(&count);
    case DEVICE_INFO: return pinstage_device_get_info(0, &info);
    case DRIVER_GET_PROC: return pinstage_driver_get_proc("cuMemsetD8Async", 3020, &fn);
    case PROFILE_CALIBRATE: {
        pinstage_profile *p = NULL;
        if (!(s = pinstage_profile_calibrate(&p, 0))) pinstage_profile_free(p);
        return s;
    }
    case PROFILE_LOAD: {
        pinstage_profile *p = NULL;
        if (!(s = pinstage_profile_load(&p, measured_profile))) pinstage_profile_free(p);
        return s;
    }
    }
    return s;
}

static int is_buffer_op(op_kind k) { return k <= BUF_FREE; }
static int is_ring_op(op_kind k) { return k >= RING_UPLOAD_WITH && k <= RING_FREE; }

/* The call after the failure, on the same objects: it must succeed and move
 * exactly the right bytes, with no synchronization in between. */
static void check_next_call(fixture *f, pinstage_status failed) {
    op_kind k = f->op->kind;
    unsigned char *next = malloc(f->bytes);
    fill_pattern(next, f->bytes, SEED_NEXT);
    if (is_buffer_op(k) && f->buf) {
        CHECK_OK(pinstage_buffer_upload_u8(f->buf, f->other, next, f->bytes, f->stream));
        memset(f->back2, 0, f->bytes);
        read_landed(f->other, f->back2);
        CHECK_EQ(pattern_mismatch(f->back2, f->bytes, SEED_NEXT), -1);
        memset(f->back2, 0, f->bytes);
        CHECK_OK(pinstage_buffer_download_u8(f->buf, f->back2, f->bytes, f->other, f->stream));
        CHECK_EQ(pattern_mismatch(f->back2, f->bytes, SEED_NEXT), -1);
    } else if (is_ring_op(k) && f->ring) {
        pinstage_ticket t;
        const void *view = NULL;
        if (k == RING_DOWNLOAD && !failed) CHECK_OK(pinstage_ring_release(f->ring, f->ticket));
        CHECK_OK(pinstage_ring_upload_async(f->ring, f->other, next, f->bytes, f->stream));
        CHECK_OK(pinstage_ring_download_async(f->ring, f->other, f->bytes, f->stream, &t));
        CHECK_OK(pinstage_ring_wait(f->ring, t, &view));
        CHECK(view && pattern_mismatch(view, f->bytes, SEED_NEXT) == -1);
        CHECK_OK(pinstage_ring_release(f->ring, t));
        read_landed(f->other, f->back2);
        CHECK_EQ(pattern_mismatch(f->back2, f->bytes, SEED_NEXT), -1);
    } else if (failed) {
        /* Objects a failed call did not make or free are retried. */
        switch (k) {
        case BUF_CREATE_WITH_CAPACITY:
        case DEV_ALLOC:
        case DEV_FREE:
        case DEV_COPY_FROM_HOST:
        case DEV_COPY_TO_HOST:
        case STREAM_CREATE:
        case STREAM_DESTROY:
        case STREAM_SYNCHRONIZE:
        case DEVICE_COUNT:
        case DEVICE_INFO:
        case DRIVER_GET_PROC:
        case PROFILE_LOAD:
        case CONTEXT_INIT:
            CHECK_OK(run(f));
            break;
        default:
            break;
        }
    }
    if (k == DEV_COPY_FROM_HOST || k == DEV_COPY_TO_HOST) {
        read_landed(f->dev, f->back2);
        CHECK_EQ(pattern_mismatch(f->back2, f->bytes, k == DEV_COPY_FROM_HOST ? SEED_OP : SEED_DEV), -1);
    }
    free(next);
}

static void teardown(fixture *f) {
    if (f->buf) CHECK_OK(pinstage_buffer_free(f->buf));
    if (f->made_buf) CHECK_OK(pinstage_buffer_free(f->made_buf));
    if (f->ring) CHECK_OK(pinstage_ring_free(f->ring));
    if (f->victim) CHECK_OK(pinstage_devbuf_free(f->victim));
    if (f->made_dev) CHECK_OK(pinstage_devbuf_free(f->made_dev));
    CHECK_OK(pinstage_devbuf_free(f->dev));
    CHECK_OK(pinstage_devbuf_free(f->other));
    if (f->pinned) drv.free_host(f->pinned);
    if (f->spare) CHECK_OK(pinstage_stream_destroy(f->spare));
    if (f->made_stream) CHECK_OK(pinstage_stream_destroy(f->made_stream));
    CHECK_OK(pinstage_stream_destroy(f->stream));
    for (; f->contexts > 0; f->contexts--) CHECK_OK(pinstage_context_release(0));
    free(f->host);
    free(f->back);
    free(f->back2);
}

/* A documented recovery: the call succeeded although a driver call failed. */
static int recovered(const fixture *f, const char *entry, unsigned long nth, const error_class *c,
                     const pinstage_stats *before, const pinstage_stats *after, const pinstage_ring_stats *rbefore,
                     const pinstage_ring_stats *rafter) {
    op_kind k = f->op->kind;
    /* A device's NUMA node is a hint: the driver's attribute (the fifth
     * attribute asked), else sysfs by PCI bus id (the second id asked);
     * either refused reads as "not known". */
    if (k == DEVICE_INFO)
        return (!strcmp(entry, "cuDeviceGetAttribute") && nth == 5) || (!strcmp(entry, "cuDeviceGetPCIBusId") && nth == 2);
    if (k == BUF_BIND) return !strcmp(entry, "cuDeviceGetAttribute") || !strcmp(entry, "cuDeviceGetPCIBusId");
    /* Placed memory is registered, not allocated: the same recoveries. */
    if (!strcmp(entry, "cuMemHostRegister")) entry = "cuMemAllocHost";
    if (!strcmp(entry, "cuMemHostUnregister")) entry = "cuMemFreeHost";
    /* Calibration moves data with upload / download: their recoveries are its. */
    int transfer = k == BUF_UPLOAD || k == BUF_DOWNLOAD || k == BUF_UPLOAD_PINNED_HOST || k == BUF_DOWNLOAD_PINNED_HOST ||
                   k == PROFILE_CALIBRATE;
    /* Out of pinned memory while a block is held: the old block goes first
     * and the allocation is tried again. */
    if (!strcmp(entry, "cuMemAllocHost") && c->code == 2 && !c->sticky && (f->op->warm || k == PROFILE_CALIBRATE))
        return 1;
    /* Not knowing whether memory is page-locked reads as pageable. */
    if (!strcmp(entry, "cuPointerGetAttributes")) return transfer;
    /* A refused release of a replaced block: orphaned, counted, the call done. */
    if (!strcmp(entry, "cuMemFreeHost"))
        return after->release_failures == before->release_failures + 1 ||
               (f->ring && rafter->release_failures > rbefore->release_failures);
    /* No pinned memory: the pageable path, counted. */
    if (!strcmp(entry, "cuMemAllocHost") && c->code == 2 && transfer)
        return after->pinned_fallbacks == before->pinned_fallbacks + 1;
    /* A host range the driver refuses is staged instead. */
    if (c->code == 1 && transfer &&
        (!strcmp(entry, "cuMemcpyHtoDAsync") || !strcmp(entry, "cuMemcpyDtoHAsync") || !strcmp(entry, "cuMemcpyDtoH")))
        return k == PROFILE_CALIBRATE || after->staged_transfers == before->staged_transfers + 1;
    return 0;
}

static void sweep_one(const sweep_op *op, const char *entry, unsigned long nth, const error_class *c) {
    fixture f;
    pinstage_emu_live baseline = live_now();
    setup(&f, op);
    pinstage_stats before, after;
    pinstage_buffer_stats(f.buf, &before);
    pinstage_ring_stats rbefore, rafter;
    pinstage_ring_get_stats(f.ring, &rbefore);
    size_t capacity = pinstage_buffer_capacity(f.buf);
    unsigned long calls_before = emu->calls(entry);
    emu->fail(entry, nth, c->code, c->sticky);
    /* A sticky error found by a wait: every later wait, the drains that
     * follow a failure included, fails too. */
    if (c->sticky && !strcmp(entry, "cuEventQuery")) emu->fail("cuStreamSynchronize", 1, c->code, 1);
    pinstage_status s = run(&f);
    int fired = emu->calls(entry) >= calls_before + nth;
    emu->clear_faults();
    after_run(&f, s);
    /* Calibration decides by timing, so its calls vary from run to run: a
     * fault placed by one run may not be reached in the next. */
    if (op->kind == PROFILE_CALIBRATE) {
        calibration_cases++;
        calibration_fired += fired;
    } else {
        cases_run++;
        faults_fired += fired;
        if (!fired) fprintf(stderr, "  not reached: %s, %s call %lu (%s)\n", op->name, entry, nth, c->name);
    }
    if (f.buf) pinstage_buffer_stats(f.buf, &after);
    else after = before;
    if (f.ring) pinstage_ring_get_stats(f.ring, &rafter);
    else rafter = rbefore;
    int before_failures = check_failures;

    if (s == PINSTAGE_SUCCESS) {
        if (fired && !recovered(&f, entry, nth, c, &before, &after, &rbefore, &rafter)) {
            fprintf(stderr, "  succeeded although %s call %lu failed\n", entry, nth);
            CHECK(0);
        }
        recoveries += fired;
        if (op->kind == BUF_UPLOAD || op->kind == BUF_UPLOAD_PINNED_HOST) {
            read_landed(f.dev, f.back2);
            CHECK_EQ(pattern_mismatch(f.back2, f.bytes, SEED_OP), -1);
        }
        if (op->kind == BUF_DOWNLOAD || op->kind == BUF_DOWNLOAD_PINNED_HOST)
            CHECK_EQ(pattern_mismatch(f.back, f.bytes, SEED_DEV), -1);
    } else {
        CHECK_EQ(s, c->code);
        /* The failing call, or for a dead context the wait that found it. */
        const char *msg = pinstage_last_error_message();
        CHECK(strstr(msg, entry) != NULL);
        /* The caller's context not given back after a bound call that was
         * done: the call's effects stand, as the message says. */
        if (restore_failed(s)) CHECK(op->bound && !strcmp(entry, "cuCtxSetCurrent"));
        if (is_buffer_op(op->kind) && f.buf && !restore_failed(s)) {
            int retired = after.retired_blocks > before.retired_blocks;
            CHECK_EQ(after.staged_transfers, before.staged_transfers);
            CHECK_EQ(after.pageable_transfers, before.pageable_transfers);
            CHECK_EQ(after.pinned_host_transfers, before.pinned_host_transfers);
            CHECK_EQ(after.engine_transfers, before.engine_transfers);
            CHECK_EQ(after.bytes_uploaded, before.bytes_uploaded);
            CHECK_EQ(after.bytes_downloaded, before.bytes_downloaded);
            CHECK_EQ(after.pinned_allocations, before.pinned_allocations);
            CHECK_EQ(after.pin_time_ns, before.pin_time_ns);
            CHECK_EQ(after.peak_capacity, before.peak_capacity);
            /* shrink_to_fit's refused block is orphaned: capacity 0 all the
             * same; a bound buffer whose context could not be made current
             * released nothing. */
            int released = strcmp(entry, "cuCtxGetCurrent") && strcmp(entry, "cuCtxSetCurrent");
            if (op->kind == BUF_SHRINK) CHECK_EQ(pinstage_buffer_capacity(f.buf), released ? 0 : capacity);
            else if (!retired) CHECK_EQ(pinstage_buffer_capacity(f.buf), capacity);
        }
        if (is_ring_op(op->kind) && f.ring && !restore_failed(s)) {
            CHECK_EQ(rafter.uploads, rbefore.uploads);
            CHECK_EQ(rafter.downloads, rbefore.downloads);
            CHECK_EQ(rafter.bytes_uploaded, rbefore.bytes_uploaded);
            CHECK_EQ(rafter.bytes_downloaded, rbefore.bytes_downloaded);
        }
        /* A failed upload's destination holds its old bytes or the failed
         * call's own, never the next call's (checked after it below). */
        if (op->kind == CONTEXT_RELEASE) {
            /* A failure before the release leaves the retain to release. */
            if (strcmp(entry, "cuDevicePrimaryCtxGetState") && strcmp(entry, "cuCtxGetCurrent") &&
                strcmp(entry, "cuCtxSetCurrent"))
                CHECK_OK(pinstage_context_release(0));
            f.contexts = 0;
        }
    }
    unsigned char *snapshot = malloc(f.bytes);
    memcpy(snapshot, f.back, f.bytes);
    check_next_call(&f, s);
    if (op->kind == BUF_UPLOAD || op->kind == BUF_UPLOAD_WITH || op->kind == RING_UPLOAD || op->kind == RING_UPLOAD_WITH) {
        /* Each byte is the old one or the failed call's own (a chunked
         * upload may have landed in part), never another call's. */
        unsigned char *now = malloc(f.bytes), *old = malloc(f.bytes), *own = malloc(f.bytes);
        read_landed(f.dev, now);
        fill_pattern(old, f.bytes, SEED_DEV);
        fill_pattern(own, f.bytes, SEED_OP);
        size_t foreign = 0;
        for (size_t i = 0; i < f.bytes; i++) foreign += now[i] != old[i] && now[i] != own[i];
        CHECK_EQ(foreign, 0);
        free(now);
        free(old);
        free(own);
    }
    if (op->kind != DEV_COPY_TO_HOST) CHECK(memcmp(snapshot, f.back, f.bytes) == 0); /* nothing landed there late */
    free(snapshot);
    if (op->kind == CONTEXT_RELEASE && !s) f.contexts = 0;
    teardown(&f);
    CHECK_OK(pinstage_pinned_retry_releases()); /* orphans of refused releases */
    pinstage_emu_live now = live_now();
    /* A destroy the driver refused cannot be undone by anyone; it must have
     * been reported, and nothing else may leak. */
    int refused_destroy = s != PINSTAGE_SUCCESS || recovered(&f, entry, nth, c, &before, &after, &rbefore, &rafter);
    /* A bound object freed while its context cannot be made current cannot
     * destroy what was made in it either (its pinned memory is orphaned and
     * released by the retry above). */
    int no_context = op->bound && s && (!strcmp(entry, "cuCtxGetCurrent") || !strcmp(entry, "cuCtxSetCurrent"));
    if (!(refused_destroy && (!strcmp(entry, "cuEventDestroy") || no_context))) CHECK_EQ(now.events, baseline.events);
    if (!(refused_destroy && !strcmp(entry, "cuStreamDestroy"))) CHECK_EQ(now.streams, baseline.streams);
    if (!(refused_destroy && !strcmp(entry, "cuMemFree"))) {
        CHECK_EQ(now.device_allocations, baseline.device_allocations);
        CHECK_EQ(now.device_bytes, baseline.device_bytes);
    }
    CHECK_EQ(now.pinned_allocations, baseline.pinned_allocations);
    CHECK_EQ(now.pinned_bytes, baseline.pinned_bytes);
    if (check_failures != before_failures)
        fprintf(stderr, "  ^ %s: %s call %lu failing with %s (status %s, message: %s)\n", op->name, entry, nth,
                c->name, pinstage_status_name(s), pinstage_last_error_message());
}

/* Records the operation's calls on a fresh fixture. */
static size_t trace_of(const sweep_op *op, const char **calls, size_t max) {
    fixture f;
    setup(&f, op);
    emu->reset_calls();
    pinstage_status s = run(&f);
    size_t n = emu->trace(calls, max);
    after_run(&f, s);
    if (s) {
        fprintf(stderr, "  %s fails with no fault: %s\n", op->name, pinstage_last_error_message());
        CHECK_OK(s);
    }
    if (op->kind == CONTEXT_RELEASE) f.contexts = 0;
    check_next_call(&f, 0);
    teardown(&f);
    return n < max ? n : max;
}

/* Calibration is swept in a run of its own (argv "calibrate"), in parallel:
 * each of its cases calibrates, which takes most of a second. */
static int sweep_calibration;

static void every_driver_call_of_every_operation_fails_cleanly(void) {
    enum { MAX_TRACE = 1 << 16 };
    static const char *calls[MAX_TRACE];
    emu->set_inline(1);
    for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
        if ((ops[o].kind == PROFILE_CALIBRATE) != sweep_calibration) continue;
        size_t n = trace_of(&ops[o], calls, MAX_TRACE);
        unsigned long before = cases_run + calibration_cases;
        clock_t started = clock();
        /* The k-th call of each entry point, every k; calibration makes
         * thousands of calls, and repeats the same few: the first of each. */
        for (size_t i = 0; i < n; i++) {
            unsigned long nth = 0, total = 0;
            int first = 1;
            for (size_t j = 0; j < n; j++) {
                if (strcmp(calls[j], calls[i])) continue;
                total++;
                if (j < i) first = 0, nth++;
            }
            if (ops[o].kind == PROFILE_CALIBRATE && !first) continue;
            for (size_t c = 0; c < sizeof classes / sizeof classes[0]; c++)
                sweep_one(&ops[o], calls[i], nth + 1, &classes[c]);
            (void)total;
        }
        printf("# %-40s %5zu driver calls, %5lu faults injected, %.1f s\n", ops[o].name, n,
               cases_run + calibration_cases - before, (double)(clock() - started) / CLOCKS_PER_SEC);
    }
    emu->set_inline(0);
    printf("# %lu faults injected, %lu reached their call, %lu recovered by design; calibration: %lu more, "
           "%lu reached\n", cases_run, faults_fired, recoveries, calibration_cases, calibration_fired);
    CHECK_EQ(faults_fired, cases_run);
}

int main(int argc, char **argv) {
    sweep_calibration = argc > 1 && !strcmp(argv[1], "calibrate");
    test_setup();
    if (!emu) {
        printf("skipped: fault injection needs the emulated driver\n");
        return TEST_SKIPPED;
    }
    if (!sweep_calibration) {
        pinstage_profile *p;
        snprintf(measured_profile, sizeof measured_profile, "/tmp/pinstage-sweep-%d.profile", (int)getpid());
        REQUIRE_OK(pinstage_profile_calibrate(&p, 0));
        REQUIRE_OK(pinstage_profile_save(p, measured_profile));
        pinstage_profile_free(p);
    }
    RUN(every_driver_call_of_every_operation_fails_cleanly);
    if (*measured_profile) remove(measured_profile);
    return test_finish();
}
