/* SPDX-License-Identifier: MIT */
/* pinstage: fast CUDA host<->device transfers through one reused,
 * grow-on-demand page-locked host buffer.
 *
 * This header is the reference documentation.
 *
 * Words, used in one sense each here, in the README, the stats and the bench
 * -----
 *  - pinned (page-locked) memory: host memory the driver can DMA from and
 *    into directly (cuMemAllocHost, cuMemHostRegister).
 *  - pageable memory: any other host memory (malloc, the stack, a vector).
 *  - the pageable path: the driver copying pageable memory itself, through
 *    its own pinned staging memory (cuMemcpyHtoD and friends).
 *  - staged: moved through the buffer's pinned memory by pinstage, with one
 *    host copy (route "staged") or by the copy engine (route "engine").
 *  - resident: data produced or consumed in the buffer's pinned memory
 *    itself (upload_with / download_into): no host copy at all.
 *  - route: how upload / download move pageable memory; a profile names the
 *    fastest route per direction and size.
 *  - landed: the DMA has finished; what every call waits for.
 *
 * The model
 * ---------
 * A pinstage_buffer owns one page-locked ("pinned") host allocation. It is
 * allocated on first use, grown only when a larger transfer arrives (rounded
 * up to PINSTAGE_CAPACITY_GRANULARITY), and reused for every later transfer,
 * so a pipeline moving the same few tensor shapes every frame pays the
 * millisecond-scale pinned allocation once, not per call.
 *
 * Which call to use
 * -----------------
 *  - pinstage_buffer_upload_with / pinstage_buffer_download_into: the caller
 *    writes its data straight into pinned memory (a fill callback) or reads
 *    the results straight out of it (a returned view). No extra host copy
 *    exists, so these win at every size. Use them when you control where
 *    the data is produced or consumed.
 *  - pinstage_buffer_upload / pinstage_buffer_download: take any host memory.
 *    Memory that is already page-locked (cuMemAllocHost, cuMemHostAlloc,
 *    cuMemHostRegister: a PyTorch pinned tensor, a decoder's frame pool) is
 *    copied straight from / into, with no staging. Ordinary (pageable)
 *    memory takes, per direction and size, the fastest of three routes the
 *    machine's profile names (see "Routes, the copy engine and machine
 *    profiles" below): the driver's
 *    pageable path, staging through pinned memory with one host copy, or the
 *    copy engine, which pipelines a multi-threaded host copy against the DMA
 *    in chunks.
 *  - pinstage_ring_*: the same two kinds of call, asynchronous: they return
 *    before the copy lands, so the CPU prepares the next frame while this
 *    one crosses the bus, with K pinned slots reused only once their copies
 *    have finished (see "The asynchronous ring").
 *  - pinstage_devbuf_copy_from_host / pinstage_devbuf_copy_to_host: the
 *    driver's plain pageable path, the baseline the calls above replace.
 *
 * Stream semantics
 * ----------------
 * Every transfer call of a pinstage_buffer is synchronous for the calling
 * thread: it returns only once the data has landed (on the device for
 * uploads, in host memory for downloads). The next call reuses the same
 * pinned bytes, so the DMA reading them must have finished. The ring's
 * calls (see "The asynchronous ring") return before their copies land, and
 * keep each slot out of use until its copy has.
 * Every transfer of a pinstage_buffer is ordered against the given stream,
 * whatever route it takes: an upload lands after the work already queued on
 * the stream, a download sees the results of that work. This holds for
 * CU_STREAM_NON_BLOCKING streams too. A NULL stream is the legacy default
 * stream, as in the driver. A download by the driver's pageable path, which
 * runs on the legacy stream, first waits for the given stream's queued work:
 * by an event recorded there when cuStreamQuery says there is some, not at
 * all when the stream is idle.
 *
 * Waiting, and what it costs in CPU
 * ---------------------------------
 * A transfer ends by recording a CUDA event behind its last copy and
 * polling it (cuEventQuery), not with cuStreamSynchronize: a context made
 * with CU_CTX_SCHED_BLOCKING_SYNC (common in TensorRT deployments) makes
 * cuStreamSynchronize wake late, about doubling a 150 KiB transfer, while a
 * poll returns the moment the copy lands in every scheduling mode. What the
 * wait costs in CPU: the calling thread sleeps first through most of a copy
 * expected to take over 1 ms at 64 GB/s, polls without pause until twice
 * that expected time (a 150 KiB copy: about 10 us of one core), then polls
 * once per 50-100 us from a sleep. The pool's workers spin 200 us after
 * their last piece, then park (see "The worker pool").
 *
 * Context
 * -------
 * Calls that touch the driver use the calling thread's current CUDA context,
 * as driver calls do. Programs without one can call pinstage_context_init().
 * A buffer or ring bound to a device (pinstage_buffer_bind) uses its own
 * context instead, whatever is current, so one thread can drive several
 * GPUs; see "Devices and NUMA placement".
 *
 * Thread safety
 * -------------
 * One pinstage_buffer (and the view download_into returns) is used by one
 * thread at a time; distinct buffers are independent and may be used from
 * different threads concurrently. Rings and device buffers follow the same rule.
 * Loading the driver, status names, version queries, profiles, route
 * adaptation and the worker pool's functions are thread-safe; the
 * last-error message is per thread.
 *
 * The driver
 * ----------
 * pinstage does not link libcuda. The first call that needs the driver loads
 * it: the library named by pinstage_driver_load(), else by the environment
 * variable PINSTAGE_DRIVER, else "libcuda.so.1". Pointing it at
 * libpinstage_emu.so (the emulated driver) runs everything without a GPU.
 *
 * Status codes
 * ------------
 * Every fallible call returns a pinstage_status whose values are the CUDA
 * driver's CUresult values (0 success, 1 invalid value, 2 out of memory,
 * ...), so they plug into existing CUDA error handling. Driver failures are
 * passed through unchanged. pinstage_status_name(), pinstage_status_string()
 * and pinstage_last_error_message() describe them without asking the driver.
 * A call that fails on bad input changes nothing and makes no driver call.
 *
 * Failures
 * --------
 * A failed driver call leaves the buffer usable, and a failed transfer
 * never lets a later call touch pinned bytes a DMA may still use: when a
 * transfer fails after enqueuing copies, it waits for them before it
 * returns; if even that wait fails (the driver cannot say whether they are
 * done), the buffer drops its pinned block (stats.retired_blocks; releasing
 * it waits for the device) and the next transfer pins a fresh one.
 * What a failed call leaves behind, per call:
 *  - bad input (INVALID_VALUE): nothing changed, no driver call made;
 *  - a transfer that needed a larger block: the larger one replaces the
 *    buffer's only when the transfer succeeds, so a failed transfer leaves
 *    the same block, capacity and counters (except when the driver ran out
 *    of pinned memory while both were held: the old block is released
 *    first, and then is gone);
 *  - a failed wait: the block is retired as above (capacity 0);
 *  - a release the driver refuses (cuMemFreeHost) is never silent: free and
 *    shrink_to_fit return it; a release inside a call that otherwise
 *    succeeded counts in stats.release_failures and sets the message; the
 *    block is orphaned, released by the next pinned allocation or
 *    pinstage_pinned_retry_releases;
 *  - pinned memory that cannot be had: upload / download take the driver's
 *    pageable path (stats.pinned_fallbacks) unless the buffer is strict.
 *
 * Undefined, as for any C object: using a buffer, ring or device buffer
 * after freeing it, freeing it twice, reading a view after the call that
 * ends it (the next call on the buffer; for a ring, see "Tickets"), and
 * using one buffer or ring from two threads at once. Calling a buffer's
 * own functions from inside its fill callback is detected and refused
 * (NOT_PERMITTED); so is it for a ring.
 */
#ifndef PINSTAGE_H
#define PINSTAGE_H

/* C11 or later (the typed calls use _Alignof, pinstage_upload/_download use
 * _Generic), or C++. */
#if !defined(__cplusplus) && (!defined(__STDC_VERSION__) || __STDC_VERSION__ < 201112L)
#error "pinstage.h needs C11 or later (e.g. -std=c11), or C++"
#endif

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Version ------------------------------------------------------------ */

#define PINSTAGE_VERSION_MAJOR 0
#define PINSTAGE_VERSION_MINOR 4
#define PINSTAGE_VERSION_PATCH 6
#define PINSTAGE_VERSION_NUMBER \
    (PINSTAGE_VERSION_MAJOR * 10000 + PINSTAGE_VERSION_MINOR * 100 + PINSTAGE_VERSION_PATCH)
/* "MAJOR.MINOR.PATCH", made from the numbers above. */
#define PINSTAGE_QUOTE_(x) #x
#define PINSTAGE_QUOTE(x) PINSTAGE_QUOTE_(x)
#define PINSTAGE_VERSION_STRING                                                     \
    PINSTAGE_QUOTE(PINSTAGE_VERSION_MAJOR) "." PINSTAGE_QUOTE(PINSTAGE_VERSION_MINOR) "." \
        PINSTAGE_QUOTE(PINSTAGE_VERSION_PATCH)

#if defined(PINSTAGE_STATIC_DEFINE)
#define PINSTAGE_API
#elif defined(PINSTAGE_BUILDING)
#define PINSTAGE_API __attribute__((visibility("default")))
#else
#define PINSTAGE_API
#endif

/* The version of the library actually loaded (PINSTAGE_VERSION_NUMBER form
 * and "MAJOR.MINOR.PATCH"), which may differ from the header's. */
PINSTAGE_API unsigned pinstage_version_number(void);
PINSTAGE_API const char *pinstage_version_string(void);

/* ---- Driver types, ABI-compatible with cuda.h --------------------------- */

/* Identical to cuda.h's definitions, so a stream or device pointer from
 * TensorRT, ONNX Runtime, PyTorch or your own driver code passes straight in;
 * including cuda.h before or after this header is fine. */
typedef struct CUstream_st *CUstream;
typedef struct CUctx_st *CUcontext;
typedef unsigned long long CUdeviceptr;

/* ---- Status ------------------------------------------------------------- */

/* A CUresult value. The library returns these itself: */
typedef int pinstage_status;
#define PINSTAGE_SUCCESS 0              /* CUDA_SUCCESS */
#define PINSTAGE_ERROR_INVALID_VALUE 1  /* CUDA_ERROR_INVALID_VALUE: bad argument */
#define PINSTAGE_ERROR_OUT_OF_MEMORY 2  /* CUDA_ERROR_OUT_OF_MEMORY: host (malloc) or driver */
#define PINSTAGE_ERROR_INVALID_CONTEXT 201 /* CUDA_ERROR_INVALID_CONTEXT: no current context */
/* CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND: the driver library lacks an
 * entry point pinstage needs (a driver older than CUDA 11.3). */
#define PINSTAGE_ERROR_DRIVER_SYMBOL_NOT_FOUND 302
/* CUDA_ERROR_SHARED_OBJECT_INIT_FAILED: no driver library could be loaded. */
#define PINSTAGE_ERROR_DRIVER_NOT_LOADED 303
/* CUDA_ERROR_NOT_PERMITTED: pinstage_driver_load() after another driver was
 * loaded; a call on a buffer or ring from inside its own fill callback; a
 * ring whose every slot holds an uncollected download. */
#define PINSTAGE_ERROR_NOT_PERMITTED 800
/* ...and any CUresult a driver call returned, passed through unchanged. */

/* "CUDA_ERROR_INVALID_VALUE" for 1, and so on for every CUresult of CUDA 13.0;
 * "CUDA_ERROR_<code>" for a code it does not know (e.g. "CUDA_ERROR_12345",
 * valid until the calling thread's next such call). Never NULL. */
PINSTAGE_API const char *pinstage_status_name(pinstage_status status);
/* A one-line description of the code. Never NULL. */
PINSTAGE_API const char *pinstage_status_string(pinstage_status status);
/* What exactly went wrong in the calling thread's last failed pinstage call,
 * e.g. "pinstage_buffer_upload: n=10 but dst holds 12 elements". Like errno,
 * it is set by failures only: read it right after a call returned an error.
 * "" if no call has failed on this thread. Never NULL. */
PINSTAGE_API const char *pinstage_last_error_message(void);

/* ---- Driver loading ----------------------------------------------------- */

/* Loads the driver library at `path` (NULL: $PINSTAGE_DRIVER, else
 * "libcuda.so.1"), resolves its entry points through cuGetProcAddress and
 * calls cuInit(0). Calling it is optional: the first call that needs the
 * driver does the same with path NULL.
 * Returns PINSTAGE_SUCCESS (also when that same library is already loaded,
 * under any spelling of its path), PINSTAGE_ERROR_DRIVER_NOT_LOADED (the
 * message says what was tried and how to fix it),
 * PINSTAGE_ERROR_DRIVER_SYMBOL_NOT_FOUND (not a CUDA driver library, or one
 * older than CUDA 11.3 that lacks an entry point), PINSTAGE_ERROR_NOT_PERMITTED
 * (a different library is already loaded), or the error of a driver call
 * that failed while loading (cuGetProcAddress, cuInit, cuDriverGetVersion),
 * named in the message. A failed load leaves nothing loaded and may be
 * retried, with the same path or another. */
PINSTAGE_API pinstage_status pinstage_driver_load(const char *path);

typedef struct pinstage_driver_info {
    const char *path;   /* the library loaded, as given to dlopen */
    int driver_version; /* cuDriverGetVersion, e.g. 13000 */
    int emulated;       /* 1 when the library is pinstage's emulated driver */
} pinstage_driver_info;

/* Loads the driver if needed and describes it. */
PINSTAGE_API pinstage_status pinstage_driver_get_info(pinstage_driver_info *info);

/* Resolves any driver entry point through the loaded driver's
 * cuGetProcAddress, e.g. ("cuMemsetD8Async", 3020, &fn), so programs can make
 * their own driver calls without linking libcuda. `cuda_version` selects the
 * ABI as cuGetProcAddress does; legacy-default-stream variants are returned.
 * Returns PINSTAGE_ERROR_INVALID_VALUE for NULL arguments,
 * CUDA_ERROR_NOT_FOUND (500) when the driver has no such symbol at that
 * version, the error cuGetProcAddress failed with, or a loading failure;
 * the message names cuGetProcAddress. */
PINSTAGE_API pinstage_status pinstage_driver_get_proc(const char *symbol, int cuda_version,
                                                      void **fn);

/* ---- Contexts, devices, streams ----------------------------------------- */

/* Retains the primary context of `device` and makes it current on the
 * calling thread. Pair with pinstage_context_release(device).
 * Returns INVALID_VALUE for a negative device, the driver's
 * CUDA_ERROR_INVALID_DEVICE (101) for one that does not exist, or a loading
 * failure. */
PINSTAGE_API pinstage_status pinstage_context_init(int device);
/* Releases one retain of the primary context taken by pinstage_context_init.
 * The last release destroys the context (and everything allocated in it);
 * if it was current on this thread, no context is current afterwards.
 * Returns the failing driver call's error (cuDevicePrimaryCtxRetain /
 * _Release_v2 / _GetState, cuCtxGetCurrent, cuCtxSetCurrent), named in the
 * message; a failure before the release leaves the retain count as it was. */
PINSTAGE_API pinstage_status pinstage_context_release(int device);

/* Number of CUDA devices the driver sees. */
PINSTAGE_API pinstage_status pinstage_device_count(int *count);

typedef struct pinstage_device_info {
    char name[256];
    char pci_bus_id[32];   /* "0000:1b:00.0" */
    int compute_major, compute_minor;
    int multiprocessors;
    int copy_engines;      /* CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT */
    int numa_node;         /* the host NUMA node the GPU is attached to; -1: not known
                              (see pinstage_device_numa_node) */
} pinstage_device_info;

PINSTAGE_API pinstage_status pinstage_device_get_info(int device, pinstage_device_info *info);

/* Flag for pinstage_stream_create; same value as the driver's. */
#define PINSTAGE_STREAM_NON_BLOCKING 0x1

/* Creates a stream in the current context (cuStreamCreate). */
PINSTAGE_API pinstage_status pinstage_stream_create(CUstream *stream, unsigned flags);
/* Destroys a stream; NULL is accepted and does nothing. */
PINSTAGE_API pinstage_status pinstage_stream_destroy(CUstream stream);
/* Waits for all work queued on the stream. */
PINSTAGE_API pinstage_status pinstage_stream_synchronize(CUstream stream);

/* ---- Device buffers ----------------------------------------------------- */

/* A typed run of device memory: a device pointer, an element count, and the
 * element size and alignment (the role the seed's StagingPod plays: elements
 * are plain bytes, every bit pattern valid). Either owned (allocated here,
 * freed by pinstage_devbuf_free) or wrapped (memory the caller owns, e.g.
 * from TensorRT, ONNX Runtime or PyTorch; never freed here). */
typedef struct pinstage_devbuf pinstage_devbuf;

/* Allocates `len` elements of `elem_size` bytes aligned to `elem_align`
 * (cuMemAlloc). INVALID_VALUE when len or elem_size is 0, elem_align is not
 * a power of two no larger than 256 or does not divide elem_size, or the
 * byte size overflows; else the driver's error. On failure *out is NULL. */
PINSTAGE_API pinstage_status pinstage_devbuf_alloc(pinstage_devbuf **out, size_t len,
                                                   size_t elem_size, size_t elem_align);
/* Wraps `ptr` (len elements) without taking ownership. Same argument rules,
 * plus INVALID_VALUE for a zero ptr or one misaligned for the element. Makes
 * no driver call. */
PINSTAGE_API pinstage_status pinstage_devbuf_wrap(pinstage_devbuf **out, CUdeviceptr ptr,
                                                  size_t len, size_t elem_size, size_t elem_align);
/* Frees the handle, and the device memory if owned (cuMemFree). NULL is
 * accepted. The handle is gone even when cuMemFree fails; the failure is
 * returned (the memory then goes with its context). */
PINSTAGE_API pinstage_status pinstage_devbuf_free(pinstage_devbuf *buf);

PINSTAGE_API CUdeviceptr pinstage_devbuf_ptr(const pinstage_devbuf *buf);
PINSTAGE_API size_t pinstage_devbuf_len(const pinstage_devbuf *buf);       /* elements */
PINSTAGE_API size_t pinstage_devbuf_elem_size(const pinstage_devbuf *buf); /* bytes */
PINSTAGE_API size_t pinstage_devbuf_bytes(const pinstage_devbuf *buf);     /* len * elem_size */

/* The driver's pageable path (cuMemcpyHtoD_v2 / cuMemcpyDtoH_v2), the
 * baseline pinstage_buffer_upload / download replace. `n` must equal the
 * buffer's length. Both run on the legacy default stream: they are ordered
 * after work on blocking streams but not after work on CU_STREAM_NON_BLOCKING
 * streams. copy_to_host returns once the data is in `dst`. copy_from_host
 * returns once `src` may be reused; as the driver documents, the last DMA may
 * still be in flight, but the legacy stream and every blocking stream see the
 * data. INVALID_VALUE for NULL arguments or a length mismatch; else the
 * driver's error. */
PINSTAGE_API pinstage_status pinstage_devbuf_copy_from_host(pinstage_devbuf *dst, const void *src,
                                                            size_t n);
PINSTAGE_API pinstage_status pinstage_devbuf_copy_to_host(const pinstage_devbuf *src, void *dst,
                                                          size_t n);

/* ---- The staging buffer ------------------------------------------------- */

/* The seed's threshold (512 KiB, calibrated on an RTX A4000): above it the
 * seed's upload / download take the driver's pageable path. pinstage's
 * buffers start at PINSTAGE_AUTO_STAGE_PROFILE instead, which lets the
 * machine's profile choose per direction and size; set this value with
 * pinstage_buffer_set_auto_stage_max_bytes for the seed's behaviour. */
#define PINSTAGE_DEFAULT_AUTO_STAGE_MAX_BYTES ((size_t)512 * 1024)
/* The threshold that means "no threshold: the profile decides". */
#define PINSTAGE_AUTO_STAGE_PROFILE ((size_t)-2)
/* Pinned capacity grows in multiples of this (64 KiB). */
#define PINSTAGE_CAPACITY_GRANULARITY ((size_t)64 * 1024)

typedef struct pinstage_buffer pinstage_buffer;

/* Counters describing how a buffer has been used. Only successful calls
 * count; a failed call leaves them (and the capacity) unchanged, with two
 * exceptions that count failures themselves: retired_blocks and
 * release_failures. Each transfer counts in exactly one of
 * staged_transfers, pageable_transfers and pinned_host_transfers;
 * engine_transfers is the part of staged_transfers the copy engine moved,
 * pinned_fallbacks the part of pageable_transfers that took the pageable
 * path because no pinned memory could be had. */
typedef struct pinstage_stats {
    uint64_t pinned_allocations; /* pinned allocations made (cuMemAllocHost_v2 calls that succeeded) */
    uint64_t staged_transfers;   /* transfers that went through the buffer's pinned memory */
    uint64_t pageable_transfers;   /* upload/download handed to the driver's pageable path */
    uint64_t bytes_uploaded;     /* host->device bytes, all routes */
    uint64_t bytes_downloaded;   /* device->host bytes, all routes */
    uint64_t pin_time_ns;        /* wall time spent in pinned allocation and release */
    size_t peak_capacity;        /* largest capacity the buffer has had */
    uint64_t engine_transfers;   /* staged by the copy engine (chunked, multi-threaded) */
    uint64_t pinned_host_transfers; /* upload/download whose host memory was already page-locked:
                                       one DMA straight from / into it, no staging (uploads of
                                       up to 64 KiB the pageable route takes are not asked: the
                                       driver's copy moves page-locked memory by DMA too, and
                                       they count in pageable_transfers) */
    uint64_t retired_blocks;     /* pinned blocks dropped because a failed wait left a DMA
                                    possibly still using them (see "Failures") */
    uint64_t pinned_fallbacks;   /* upload/download that could not pin (the driver, or a pinned
                                    limit, refused) and took the driver's pageable path */
    uint64_t release_failures;   /* cuMemFreeHost calls the driver refused; the block is
                                    orphaned and released later (see pinstage_buffer_free) */
    uint64_t route_probes;       /* upload/download that took the other route to measure it
                                    (see "Adapting the route to load") */
    uint64_t route_overrides;    /* upload/download that left the profile's route because the
                                    other measured faster in recent transfers */
} pinstage_stats;

/* Creates an empty buffer: nothing is pinned until the first transfer or
 * pinstage_buffer_reserve. Makes no driver call. Returns INVALID_VALUE for a
 * NULL out, OUT_OF_MEMORY if the handle cannot be allocated. */
PINSTAGE_API pinstage_status pinstage_buffer_create(pinstage_buffer **out);
/* Creates a buffer with `bytes` (rounded up to the granularity) already
 * pinned. Pre-sizing to the largest tensor a pipeline moves keeps the pinned
 * allocation out of the steady-state loop. INVALID_VALUE if bytes is 0 or
 * rounding overflows; else the driver's error. On failure *out is NULL and
 * nothing is leaked. */
PINSTAGE_API pinstage_status pinstage_buffer_create_with_capacity(pinstage_buffer **out,
                                                                  size_t bytes);
/* Releases the pinned memory, the events and the handle. NULL is accepted.
 * The handle is always gone. If the driver refuses to release the pinned
 * memory (no context current on this thread, or a failed one), the error
 * comes back with the message naming cuMemFreeHost, and the block is
 * orphaned: kept, counted in pinstage_get_pinned_usage, and released by the
 * next pinned allocation or pinstage_pinned_retry_releases. A refused
 * cuEventDestroy is returned likewise. A bound buffer makes its own context
 * current for these releases (placed memory is released with
 * cuMemHostUnregister), and gives up its retain of the primary context
 * last. NOT_PERMITTED (nothing freed) from the buffer's own fill callback. */
PINSTAGE_API pinstage_status pinstage_buffer_free(pinstage_buffer *buf);

/* Pinned capacity in bytes (0 before first use and after shrink_to_fit). */
PINSTAGE_API size_t pinstage_buffer_capacity(const pinstage_buffer *buf);
/* Copies the counters into *stats. */
PINSTAGE_API void pinstage_buffer_stats(const pinstage_buffer *buf, pinstage_stats *stats);

/* The buffer's threshold: PINSTAGE_AUTO_STAGE_PROFILE (the default: the
 * profile chooses every route), or the value set below. */
PINSTAGE_API size_t pinstage_buffer_auto_stage_max_bytes(const pinstage_buffer *buf);
/* Sets the threshold, with the seed's meaning: upload / download of
 * pageable memory larger than `bytes` take the driver's pageable path, the
 * others are staged by the fastest staging route the profile knows for
 * their size (one host copy or the engine). 0 sends every upload/download
 * to the pageable path, SIZE_MAX stages them all.
 * PINSTAGE_AUTO_STAGE_PROFILE hands the choice back to the profile.
 * upload_with / download_into always stage: for them the pinned buffer is
 * the caller's working memory and there is no extra copy to regret. Memory
 * that is already page-locked is never staged. */
PINSTAGE_API void pinstage_buffer_set_auto_stage_max_bytes(pinstage_buffer *buf, size_t bytes);

/* Ensures at least `bytes` of pinned memory. Grow-only: a request at or below
 * the capacity does nothing, so a pipeline cycling through shapes settles at
 * its high-water mark. Growth rounds up to the granularity and discards the
 * staged contents. INVALID_VALUE if bytes is 0 or rounding overflows (nothing
 * changes); else the driver's error. If the driver cannot provide the larger
 * allocation while the old one is held, the old one is released and the
 * allocation tried once more; if that fails too the capacity is 0 and the
 * buffer stays usable. */
PINSTAGE_API pinstage_status pinstage_buffer_reserve(pinstage_buffer *buf, size_t bytes);
/* Releases the pinned allocation; capacity becomes 0, the counters stay, the
 * next transfer pins again. A refused release is returned, counted in
 * release_failures, and the block orphaned (see pinstage_buffer_free).
 * NULL is accepted. */
PINSTAGE_API pinstage_status pinstage_buffer_shrink_to_fit(pinstage_buffer *buf);

/* Caps this buffer's pinned capacity (SIZE_MAX, the default: no cap). A
 * transfer that would need more fails with OUT_OF_MEMORY before any driver
 * call, or, for upload / download, takes the pageable path (see
 * pinstage_buffer_set_strict). A capacity already above the cap stays. */
PINSTAGE_API void pinstage_buffer_set_pinned_limit(pinstage_buffer *buf, size_t bytes);
/* strict 1: when upload / download cannot get pinned memory (the driver is
 * out of it, or a pinned limit is reached), return that error. strict 0, the
 * default: take the driver's pageable path instead, counted in
 * pinned_fallbacks. upload_with / download_into have no fallback: their
 * data lives in pinned memory, so they always return the error. */
PINSTAGE_API void pinstage_buffer_set_strict(pinstage_buffer *buf, int strict);

/* Caps the pinned memory every buffer and ring of the process holds
 * together (SIZE_MAX, the default: no cap), e.g. below a container's
 * locked-memory limit. An allocation that would pass it fails with
 * OUT_OF_MEMORY without a driver call; what is held already stays. */
PINSTAGE_API void pinstage_set_pinned_limit(size_t bytes);
/* Pinned bytes held now by all buffers and rings (orphaned blocks
 * included), and the cap. Either pointer may be NULL. */
PINSTAGE_API void pinstage_get_pinned_usage(size_t *held, size_t *limit);
/* Releases orphaned blocks: pinned memory whose release the driver refused
 * (see pinstage_buffer_free). Every pinned allocation tries this first on
 * its own; call it where the right context is current, or before exit to
 * learn whether any remain. Returns the first refusal, else success. */
PINSTAGE_API pinstage_status pinstage_pinned_retry_releases(void);

/* Writes `n` elements into pinned memory. `dst` points at n elements of the
 * device buffer's element type, aligned for it. */
typedef void (*pinstage_fill_fn)(void *dst, size_t n, void *user_data);

/* Uploads n elements to `dst`, letting `fill` write them straight into
 * pinned memory: the bytes fill writes are the bytes the DMA engine reads.
 * fill is expected to write all n elements; elements it leaves untouched
 * are uploaded as they are (what the previous transfer through this buffer
 * left there, or zeroes in a fresh allocation).
 * The copy is enqueued on `stream` after the work already queued there; the
 * call returns once it has landed.
 * Errors (nothing is enqueued, fill is not called): INVALID_VALUE when buf,
 * dst or fill is NULL, n is 0, n differs from dst's length, the byte size
 * overflows, or the pinned memory is not aligned for the element;
 * OUT_OF_MEMORY when a pinned limit would be passed; NOT_PERMITTED when
 * called from a fill callback of the same buffer. Otherwise a failure of
 * cuEventCreate (the buffer's first transfer), the pinned allocation,
 * cuMemcpyHtoDAsync_v2, cuEventRecord or cuEventQuery, after which the
 * buffer stays usable (see "Failures"). There is no pageable fallback. */
PINSTAGE_API pinstage_status pinstage_buffer_upload_with(pinstage_buffer *buf, pinstage_devbuf *dst,
                                                         size_t n, CUstream stream,
                                                         pinstage_fill_fn fill, void *user_data);

/* Downloads n elements of `src` into pinned memory and sets *view to them:
 * no copy out. The copy is ordered after the work already queued on
 * `stream`; the call returns once the data is there. The view is read-only
 * and stays valid until the next call that uses this buffer (any transfer,
 * reserve, shrink_to_fit or free).
 * Errors as for upload_with (with view in place of fill); on failure *view is
 * NULL. */
PINSTAGE_API pinstage_status pinstage_buffer_download_into(pinstage_buffer *buf,
                                                           const pinstage_devbuf *src, size_t n,
                                                           CUstream stream, const void **view);

/* Uploads n elements from host memory `src` to `dst`: page-locked memory
 * straight by one DMA, pageable memory by the route the buffer's profile and
 * threshold choose (the driver's pageable path, one copy into pinned memory,
 * or the copy engine). Either way the copy is ordered after work queued on
 * `stream` and has landed when the call returns; `src` may then be reused.
 * A range that is only partly page-locked (registered in pieces, or half
 * registered) is staged, since the driver refuses such a range.
 * INVALID_VALUE for NULL pointers, n == 0, n != dst's length or an
 * overflowing size; else the failing driver call's error, named in the
 * message. Costs beyond the copies: one cuPointerGetAttributes call (about
 * 0.1 us) to learn whether `src` is page-locked. */
PINSTAGE_API pinstage_status pinstage_buffer_upload(pinstage_buffer *buf, pinstage_devbuf *dst,
                                                    const void *src, size_t n, CUstream stream);

/* Downloads n elements of `src` into host memory `dst`; the mirror of
 * upload, with the same routes. Every route sees the results of work queued
 * on `stream` without the caller synchronizing first. Errors as for
 * upload. */
PINSTAGE_API pinstage_status pinstage_buffer_download(pinstage_buffer *buf, void *dst, size_t n,
                                                      const pinstage_devbuf *src, CUstream stream);

/* ---- The asynchronous ring ------------------------------------------------ */

/* A pinstage_ring overlaps a frame's host work with the previous frame's
 * copies: its calls enqueue a copy and return without waiting for it, so
 * the CPU prepares frame k+1 while frame k crosses the bus. It keeps K
 * pinned slots, each a pinned allocation grown like a buffer's (on first
 * use, to its high-water mark, in PINSTAGE_CAPACITY_GRANULARITY steps), and
 * an event per slot recorded behind the slot's last copy. That event is what
 * makes reuse safe by construction:
 *
 *  - Uploads (upload_with_async, upload_async) write a slot on the host, so
 *    a slot is handed to an upload only once its event has completed,
 *    whichever stream its last copy ran on.
 *  - Downloads (download_async) write a slot by DMA, so the copy is queued
 *    behind the slot's last copy on the device instead (cuStreamWaitEvent
 *    when that copy ran on another stream): a download never waits on the
 *    host for a slot.
 *
 * Which slot: a free slot, least recently used first (for an upload, the
 * first of them whose copy has landed; for a download, the first large
 * enough); failing that, the slot of the oldest download whose view was
 * collected (its view ends there). The slot of a download whose ticket is neither collected nor
 * released is never handed out: when all K are such, calls return
 * PINSTAGE_ERROR_NOT_PERMITTED (collect or release a ticket first).
 *
 * When the slot an upload gets is still busy, the ring waits for it
 * (counted in slot_waits / slot_wait_ns: if they grow, K is too small), or,
 * made with PINSTAGE_RING_NONBLOCKING, returns PINSTAGE_ERROR_NOT_READY
 * having done nothing (fill is not called) so the caller can do other work
 * and retry.
 *
 * Stream semantics: every copy is enqueued on the given stream after the
 * work already queued there (NULL is the legacy default stream; non-
 * blocking streams work alike); device work queued later on the same stream
 * sees an upload's data. The calls return before the copies land: the
 * device buffers involved must stay allocated until then (a ticket's
 * completion, or pinstage_ring_synchronize). Waiting, where a call waits,
 * polls the slot's event as the synchronous calls do.
 *
 * Tickets: download_async returns a ticket (never 0). pinstage_ring_wait
 * (or _poll) completes it and returns the slot's bytes as a read-only view,
 * valid until that slot is handed out again (by the ring's choice above,
 * as late as it can) or the ring is freed. Completing a collected ticket
 * again returns the same view. pinstage_ring_release ends a ticket at any
 * time: before completion it discards the download (the slot is reused only
 * behind that copy), after it ends the view. A ticket the ring no longer
 * knows (released, its slot handed out again, or never issued) is refused
 * with INVALID_VALUE.
 *
 * Failures: bad input returns INVALID_VALUE, makes no driver call and
 * changes nothing. A failed driver call leaves the ring usable and the slot
 * it involved free again: a copy that was enqueued when a later call failed
 * is waited for, and if even that wait fails the slot drops its pinned block
 * (retired_blocks), which is never reused. A download whose wait failed in
 * pinstage_ring_synchronize reports the error when its ticket is completed,
 * which ends the ticket.
 *
 * Thread safety: one thread at a time per ring, as for a buffer; distinct
 * rings are independent. */
typedef struct pinstage_ring pinstage_ring;

/* Most slots a ring may have. */
#define PINSTAGE_RING_MAX_SLOTS 64u
/* pinstage_ring_create flag: return PINSTAGE_ERROR_NOT_READY rather than
 * wait when the slot an upload needs is busy. */
#define PINSTAGE_RING_NONBLOCKING 0x1u
/* CUDA_ERROR_NOT_READY: the copy has not landed yet (pinstage_ring_poll), or
 * a PINSTAGE_RING_NONBLOCKING ring has no idle slot. Nothing was done. */
#define PINSTAGE_ERROR_NOT_READY 600

/* Names one download_async; 0 is never a ticket. */
typedef uint64_t pinstage_ticket;

/* Counters of a ring. The transfer counters count successful calls only;
 * the others count what happened (a wait, a refusal, an allocation) even in
 * a call that then failed. */
typedef struct pinstage_ring_stats {
    uint64_t uploads;            /* upload_async and upload_with_async enqueued */
    uint64_t downloads;          /* download_async enqueued */
    uint64_t bytes_uploaded;
    uint64_t bytes_downloaded;
    uint64_t slot_waits;         /* calls that waited for a busy slot */
    uint64_t slot_wait_ns;       /* time those waits took */
    uint64_t would_block;        /* NOT_READY refusals of a non-blocking ring */
    uint64_t pinned_allocations; /* cuMemAllocHost_v2 calls that succeeded */
    uint64_t pin_time_ns;        /* time spent in pinned allocation and release */
    size_t pinned_bytes;         /* pinned now, all slots */
    size_t peak_pinned_bytes;    /* most pinned at once */
    uint64_t retired_blocks;     /* slot blocks dropped after a failed wait (see "Failures") */
    uint64_t release_failures;   /* cuMemFreeHost calls the driver refused (the block is kept) */
} pinstage_ring_stats;

/* Creates a ring of `slots` slots (1 to PINSTAGE_RING_MAX_SLOTS) with
 * `flags` (0 or PINSTAGE_RING_NONBLOCKING). Nothing is pinned and no driver
 * call is made until first use. INVALID_VALUE for a NULL out, a slot count
 * out of range or an unknown flag; OUT_OF_MEMORY if the handle cannot be
 * allocated. */
PINSTAGE_API pinstage_status pinstage_ring_create(pinstage_ring **out, unsigned slots, unsigned flags);
/* Waits for every copy still in flight, then releases the slots, events and
 * handle; uncollected downloads are discarded. The handle is always gone.
 * Returns the first error: a wait's (the stream failed), a refused release
 * (the block is orphaned, as for pinstage_buffer_free) or cuEventDestroy's.
 * NULL is accepted. */
PINSTAGE_API pinstage_status pinstage_ring_free(pinstage_ring *ring);
/* Ensures every slot holds at least `bytes` of pinned memory, so the
 * allocations stay out of a pipeline's loop. Grow-only. A smaller slot's
 * copy is waited for before its block is replaced, and a collected view it
 * held ends; a slot holding an outstanding ticket keeps its block (it grows
 * when next handed out). INVALID_VALUE for bytes 0 or a size that
 * overflows when rounded; else the driver's error (slots grown before the
 * failure keep their larger blocks). */
PINSTAGE_API pinstage_status pinstage_ring_reserve(pinstage_ring *ring, size_t bytes);

/* Uploads n elements to `dst`: `fill` writes them straight into a slot, the
 * copy is enqueued on `stream` and an event recorded behind it, and the
 * call returns without waiting for the DMA. Errors: INVALID_VALUE as for
 * pinstage_buffer_upload_with, NOT_READY and NOT_PERMITTED as above (for
 * these nothing is enqueued and fill is not called); else the failing
 * driver call's error: cuEventCreate (first use), cuEventQuery (waiting for
 * a slot), cuMemAllocHost_v2 (growing it), then, after fill ran,
 * cuMemcpyHtoDAsync_v2 or cuEventRecord. */
PINSTAGE_API pinstage_status pinstage_ring_upload_with_async(pinstage_ring *ring, pinstage_devbuf *dst,
                                                             size_t n, CUstream stream,
                                                             pinstage_fill_fn fill, void *user_data);
/* Uploads n elements from any host memory `src`: copied into a slot (by the
 * worker pool's threads for large copies), then enqueued as above. `src`
 * may be reused as soon as the call returns. Errors as for
 * upload_with_async. */
PINSTAGE_API pinstage_status pinstage_ring_upload_async(pinstage_ring *ring, pinstage_devbuf *dst,
                                                        const void *src, size_t n, CUstream stream);
/* Enqueues a download of n elements of `src` into a slot, ordered after the
 * work queued on `stream`, and sets *ticket; returns without waiting. On
 * failure *ticket is 0. Errors: INVALID_VALUE (NULL ring, src or ticket, n
 * 0 or not src's length); NOT_PERMITTED as above; else the failing driver
 * call's error (also cuStreamWaitEvent). */
PINSTAGE_API pinstage_status pinstage_ring_download_async(pinstage_ring *ring, const pinstage_devbuf *src,
                                                          size_t n, CUstream stream, pinstage_ticket *ticket);
/* Waits until the ticket's download has landed and sets *view to its bytes
 * (see "Tickets" for how long they stay valid). On failure *view is NULL:
 * INVALID_VALUE for an unknown ticket; the copy's driver error, after which
 * the ticket is ended and its slot free. */
PINSTAGE_API pinstage_status pinstage_ring_wait(pinstage_ring *ring, pinstage_ticket ticket,
                                                const void **view);
/* As pinstage_ring_wait without waiting: NOT_READY (ticket kept, *view NULL)
 * while the copy is in flight. */
PINSTAGE_API pinstage_status pinstage_ring_poll(pinstage_ring *ring, pinstage_ticket ticket,
                                                const void **view);
/* Ends a ticket (see "Tickets"). No driver call. INVALID_VALUE for an
 * unknown ticket. */
PINSTAGE_API pinstage_status pinstage_ring_release(pinstage_ring *ring, pinstage_ticket ticket);
/* Waits until every copy the ring enqueued has landed; tickets stay
 * outstanding. Returns the first error, ending the failed downloads' data
 * as for a failed wait (their tickets then report it). */
PINSTAGE_API pinstage_status pinstage_ring_synchronize(pinstage_ring *ring);
/* Copies the counters into *stats (zeroes for a NULL ring). */
PINSTAGE_API void pinstage_ring_get_stats(const pinstage_ring *ring, pinstage_ring_stats *stats);

/* ---- Devices and NUMA placement ------------------------------------------ */

/* A buffer or ring starts unbound: every call uses the calling thread's
 * current context, and its pinned memory lands wherever the kernel puts it.
 * Bound to a device, it makes that device's context current around each of
 * its own calls (restoring the caller's afterwards), so one thread can drive
 * buffers of several GPUs, and it places its pinned memory and its copy
 * threads on the NUMA node the GPU is attached to:
 *
 *  - the node is the driver's CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID (CUDA 12.2+),
 *    else the numa_node of the GPU's PCI function in sysfs;
 *  - the pinned memory is mapped, given a preferred-node memory policy
 *    (mbind; where a container forbids it, its pages are first touched by a
 *    thread on the node's CPUs instead) and registered with the driver
 *    (cuMemHostRegister) rather than allocated with cuMemAllocHost;
 *  - the engine's host copies run on the node's pool: workers on the node's
 *    CPUs (see "The worker pool");
 *  - where the host has one node, or the GPU's node is not known, nothing
 *    is placed: the memory comes from cuMemAllocHost and the copies run on
 *    the process-wide pool, as for an unbound buffer. An explicit node is
 *    honoured on any host.
 *
 * Streams given to a bound buffer's calls must belong to its context (or be
 * NULL, the legacy default stream: then its context's). Its profile is the
 * buffer's own (pinstage_buffer_set_profile), else the default profile when
 * that was measured on the same GPU model (or is built-in or fixed), else
 * the built-in one. Transfers to different devices run at the same time
 * from different threads; each buffer is still used by one thread at a
 * time. */

/* pinstage_binding.numa_node: the node the device is attached to. */
#define PINSTAGE_NUMA_DEVICE (-2)
/* pinstage_binding.numa_node: no placement (cuMemAllocHost's memory, the
 * process-wide pool). */
#define PINSTAGE_NUMA_NONE (-1)

typedef struct pinstage_binding {
    int device;        /* the device's ordinal */
    CUcontext context; /* NULL: the device's primary context, retained while bound (released
                          by free or a later bind); else a context of `device` the program
                          keeps alive while bound */
    int numa_node;     /* PINSTAGE_NUMA_DEVICE (as pinstage_binding_for_device sets it),
                          PINSTAGE_NUMA_NONE, or a node of this host */
} pinstage_binding;

/* The binding to `device`'s primary context, placed on its node. */
static inline pinstage_binding pinstage_binding_for_device(int device) {
    pinstage_binding b = {device, 0, PINSTAGE_NUMA_DEVICE};
    return b;
}

/* Binds the buffer (NULL `binding`: unbinds it). Only while it holds no
 * pinned memory and has made no transfer: bind right after create.
 * INVALID_VALUE for a negative device, a context not of that device, a
 * node below PINSTAGE_NUMA_DEVICE, at or above 64 or not online, and for a
 * buffer already in use (NOT_PERMITTED from its fill callback); the
 * driver's CUDA_ERROR_INVALID_DEVICE (101) for a device that does not
 * exist. A failed bind leaves the buffer as it was. */
PINSTAGE_API pinstage_status pinstage_buffer_bind(pinstage_buffer *buf, const pinstage_binding *binding);
/* The same for a ring, before its first reserve or enqueue. */
PINSTAGE_API pinstage_status pinstage_ring_bind(pinstage_ring *ring, const pinstage_binding *binding);

/* Where a buffer's or ring's memory and threads are. */
typedef struct pinstage_placement {
    int device;       /* the bound device; -1: unbound (the calling thread's context) */
    int device_node;  /* the node the bound device is attached to; -1: not known, or unbound */
    int memory_node;  /* the node its pinned memory is placed on; -1: not placed */
    int memory_found; /* where the pages of its pinned memory are now, asked of the kernel
                         (move_pages, else get_mempolicy) from a sample of up to 64 pages per
                         block: the node; -1 nothing pinned, or the kernel would not say;
                         -2 several nodes */
    int worker_node;  /* the node whose CPUs run its copy threads; -1: any CPU the process may use */
    size_t pinned_bytes; /* pinned bytes it holds (a ring: all slots) */
} pinstage_placement;

/* Fills *out; makes no driver call. INVALID_VALUE for NULL arguments. */
PINSTAGE_API pinstage_status pinstage_buffer_get_placement(const pinstage_buffer *buf, pinstage_placement *out);
PINSTAGE_API pinstage_status pinstage_ring_get_placement(const pinstage_ring *ring, pinstage_placement *out);

/* The host NUMA node `device` is attached to (as above): 0 on a host of one
 * node, -1 when neither the driver nor sysfs knows (the driver's attribute
 * is -1 where the kernel has no NUMA). INVALID_VALUE for a negative device
 * or a NULL node; CUDA_ERROR_INVALID_DEVICE for one that does not exist. */
PINSTAGE_API pinstage_status pinstage_device_numa_node(int device, int *node);
/* NUMA nodes of this host (sysfs: the highest online node + 1); 1 where not
 * known. Makes no driver call. */
PINSTAGE_API int pinstage_numa_node_count(void);

/* ---- Routes, the copy engine and machine profiles ------------------------ */

/* How upload / download move pageable memory:
 *  - PINSTAGE_ROUTE_PAGEABLE: the driver's pageable path (the driver stages).
 *    Wins for small uploads, which the driver sends inline with the command.
 *  - PINSTAGE_ROUTE_STAGED: one memcpy into the buffer's pinned memory, one
 *    DMA (downloads: DMA, then one memcpy out). The seed's staging.
 *  - PINSTAGE_ROUTE_ENGINE: the copy engine. The transfer is cut into chunks
 *    that flow through up to 4 slots of the buffer's pinned memory (8 for
 *    downloads), each guarded by an event; the worker pool and the calling
 *    thread copy chunk k+1 into a free slot while the DMA of chunk k runs
 *    (downloads mirrored).
 * Pinned memory: the staging routes use the buffer's one pinned allocation.
 * The engine needs at most 4 chunks of at most 8 MiB of it (downloads 8 of
 * at most 2 MiB), so a transfer of any size pins at most 32 MiB; capacity,
 * reserve, shrink_to_fit and the stats (peak_capacity, pinned_allocations)
 * describe that same allocation. */
#define PINSTAGE_ROUTE_PAGEABLE 0
#define PINSTAGE_ROUTE_STAGED 1
#define PINSTAGE_ROUTE_ENGINE 2

typedef enum pinstage_direction { PINSTAGE_H2D = 0, PINSTAGE_D2H = 1 } pinstage_direction;

/* One route choice. For the staging routes: `chunk` bytes per chunk (0: the
 * whole transfer; the engine takes at most 8 MiB for uploads and 2 MiB for
 * downloads, whatever is asked) and `threads` sharing each chunk's host
 * copy, the calling thread included (0: the pool's workers and the caller). */
typedef struct pinstage_plan {
    int route;
    size_t chunk;
    unsigned threads;
} pinstage_plan;

/* A machine profile: for each direction and size class (4 KiB to 256 MiB in
 * half-octaves: 4, 6, 8, 12, 16, 24 KiB...; a transfer uses the nearest
 * class on a log scale, a chunk smaller than its class scaled to the
 * transfer's size), the
 * fastest route overall and the fastest staging route, with the times
 * measured. Every buffer follows the process default profile unless given
 * its own: the one set with pinstage_profile_set_default, else the file
 * named by the environment variable PINSTAGE_PROFILE (read at the first
 * transfer; a refused file is reported once on stderr and the built-in
 * profile is used), else the built-in profile, measured on an H200 machine
 * and chosen never to be slower than the driver's pageable path there.
 * Profiles are values: every call copies what it keeps. */
typedef struct pinstage_profile pinstage_profile;

#define PINSTAGE_PROFILE_BUILTIN 0  /* the built-in table */
#define PINSTAGE_PROFILE_MEASURED 1 /* made by pinstage_profile_calibrate */
#define PINSTAGE_PROFILE_FIXED 2    /* one plan at every size: pinstage_profile_fixed */

/* Measures this machine and the current context's GPU: per direction and
 * size class, the driver's pageable path, single-copy staging and the
 * engine at the thread counts and chunk sizes worth trying, each the median
 * of a few synchronous transfers in alternating rounds. `thorough` 0
 * measures 4 KiB-64 MiB (not the half-octaves above 8 MiB, which take the
 * plan below them) in under a second on an H200 machine, and gives the
 * classes above 64 MiB its chunk size with every thread; 1 measures every
 * class to 256 MiB with more settings and repetitions (about a minute). Uses its own stream, pinned and device memory (up to
 * 64 MiB, 256 MiB thorough), freed before it returns; transfers on other
 * threads meanwhile make its figures noisier, not wrong. */
PINSTAGE_API pinstage_status pinstage_profile_calibrate(pinstage_profile **out, int thorough);

/* Reads a profile written by pinstage_profile_save. Refused with
 * INVALID_VALUE and a message naming the file and line when the file is not
 * a profile, of another format version, or damaged; refused when it was
 * measured on another GPU model or driver version than the current
 * context's (needs a current context for that check). */
PINSTAGE_API pinstage_status pinstage_profile_load(pinstage_profile **out, const char *path);
/* Writes the profile as text (the same text pinstage_profile_describe gives). */
PINSTAGE_API pinstage_status pinstage_profile_save(const pinstage_profile *profile, const char *path);
/* The profile as a printable, aligned table, snprintf-style: writes at most
 * len bytes (NUL included) and returns the full text's length. */
PINSTAGE_API size_t pinstage_profile_describe(const pinstage_profile *profile, char *text, size_t len);
/* A profile that uses one plan at every size (for measuring a route at
 * fixed settings, or pinning a choice). INVALID_VALUE for an unknown route. */
PINSTAGE_API pinstage_status pinstage_profile_fixed(pinstage_profile **out, int route, size_t chunk,
                                                    unsigned threads);
/* The plan the profile gives a transfer of `bytes` (the best route overall). */
PINSTAGE_API pinstage_status pinstage_profile_plan(const pinstage_profile *profile, pinstage_direction dir,
                                                   size_t bytes, pinstage_plan *plan);
/* A copy of the built-in profile. */
PINSTAGE_API pinstage_status pinstage_profile_builtin(pinstage_profile **out);
/* Copies the process default into *out (free it with pinstage_profile_free). */
PINSTAGE_API pinstage_status pinstage_profile_get_default(pinstage_profile **out);
/* Makes a copy of `profile` the process default (NULL: the built-in one).
 * Buffers that follow the default use it from their next transfer. */
PINSTAGE_API pinstage_status pinstage_profile_set_default(const pinstage_profile *profile);
/* NULL is accepted. */
PINSTAGE_API void pinstage_profile_free(pinstage_profile *profile);
/* Gives the buffer its own copy of `profile` (NULL: follow the default). */
PINSTAGE_API pinstage_status pinstage_buffer_set_profile(pinstage_buffer *buf, const pinstage_profile *profile);

/* ---- Adapting the route to load ------------------------------------------ */

/* A profile is measured once, on an idle machine; a pipeline's process is
 * rarely idle. Under CPU load the copy engine's threads take turns with the
 * program's own; under memory load they share its bandwidth; either can make
 * the driver's pageable path the faster one. So upload / download of
 * pageable memory keep, per direction and size class, the time each side of
 * the choice took in recent transfers (the median of the last 8, per byte;
 * a time older than 2 s is forgotten, so both are measured under the same
 * load; every 8th transfer of the route taken is timed, and any one 100 ms
 * after its route's last time, so calls of a few microseconds do not each
 * pay for it): the profile's route, and its
 * counterpart across the pageable / pinned-memory divide (the pageable path
 * for a staging route; the profile's staging route for the pageable one).
 * The faster one (by at least 5%) takes the transfer. The other is taken
 * now and then to keep its estimate fresh: every 4th transfer of the class
 * while it has no estimate, then every 16th, backing off to every 128th
 * while it keeps measuring over 1.5x slower, but at least every 250 ms of
 * a class in use; and no sooner than 32 times its own last time (at most
 * 1 s) after the one before, so probes of a far slower route take about
 * 1/32 of a busy class's time (a 256 MiB upload's pageable probe, about 7
 * times the engine's time on the H200 machine, comes about once a second),
 * which the median of the calls would never show. One that beats the route
 * taken is tried again at once,
 * however old that side's other samples, and three such in a row take over,
 * so a change of load turns the choice within a few transfers of being seen.
 * Those transfers are counted in
 * stats.route_probes; transfers that left the profile's route because the
 * other measured faster in stats.route_overrides. A transfer that had to pin
 * memory first is not counted as a measurement. Nor, once, is a probe of the
 * copy engine that had to wake the engine's sleeping threads: while the
 * pageable route is taken they sleep, so such a probe pays a wake-up that
 * steady use of the engine does not; the next transfer probes again, and
 * counts whether it runs warm or (as every call of a paced loop does) cold.
 *
 * The engine's thread count adapts too. Once the host copy runs ahead of
 * the DMA its threads only wait, spinning, so per direction and size class
 * from 16 MiB up the share of its threads' time each engine transfer spent
 * copying is kept (the blocks' time over threads x the transfer's time), in
 * windows of 8 transfers. Where it is under a half, the next get fewer
 * threads, enough for about two thirds (at most half as many at a step,
 * never fewer than 2, the caller included), and the cut stays only if their
 * median time is within 3% of a window at the profile's count run right
 * after it, on the same source beside the same neighbours; a cut that cost
 * more makes the count before it the floor. Every 64 windows the count in
 * force is judged that way again and the floor forgotten. Over 0.8 with every thread asked
 * for, up to half as many more, never beyond the profile's count or the
 * pool's. A source in a cache copies fast and needs few threads; one coming
 * from memory, or a machine whose other tenants take bandwidth, needs more.
 * pinstage_route_get_info says what it decided.
 *
 * Adaptation applies to buffers that follow a measured or the built-in
 * profile with no threshold set (PINSTAGE_AUTO_STAGE_PROFILE); a fixed
 * profile or an explicit threshold means what it says. The estimates are
 * process-wide, as load is: buffers bound to different devices share them,
 * and while transfers run on several threads at once no estimate changes
 * and no route is probed. For reproducible timing turn it off:
 * pinstage_set_adaptive(0), PINSTAGE_ADAPTIVE=0 in the environment, or per
 * buffer pinstage_buffer_set_adaptive(buf, 0). */

/* Process-wide switch (default: on, unless PINSTAGE_ADAPTIVE=0). */
PINSTAGE_API void pinstage_set_adaptive(int on);
/* Per buffer (default 1): 0 makes it follow its profile alone. */
PINSTAGE_API void pinstage_buffer_set_adaptive(pinstage_buffer *buf, int on);
/* Forgets every estimate and thread count (the next transfers follow the
 * profiles again). */
PINSTAGE_API void pinstage_route_reset(void);

#define PINSTAGE_ADAPT_PROFILE 0  /* no transfer of this class yet: the profile's route */
#define PINSTAGE_ADAPT_PAGEABLE 1 /* the pageable route is taken now */
#define PINSTAGE_ADAPT_STAGING 2  /* the route through pinned memory is taken now */

typedef struct pinstage_route_info {
    int adaptive;              /* adaptation is on, process-wide */
    int chosen;                /* PINSTAGE_ADAPT_*: the side transfers of this class take now */
    double pageable_us;        /* recent median time of the pageable route for `bytes`; 0: none */
    double staging_us;         /* the same through pinned memory */
    unsigned pageable_samples; /* recent transfers behind each estimate (at most 8) */
    unsigned staging_samples;
    uint64_t switches;         /* times the side taken changed */
    uint64_t probes;           /* transfers that took the other side to measure it */
    unsigned engine_threads;   /* threads the copy engine's host copies of this class get now,
                                  the caller included; 0: not governed (under 16 MiB, or no
                                  engine transfer yet) */
    uint64_t thread_changes;   /* times engine_threads changed */
} pinstage_route_info;

/* What adaptation knows of transfers of `bytes` in direction `dir` (their
 * size class). INVALID_VALUE for a NULL info, bytes 0 or an unknown dir. */
PINSTAGE_API pinstage_status pinstage_route_get_info(pinstage_direction dir, size_t bytes,
                                                     pinstage_route_info *info);

/* ---- The worker pool ----------------------------------------------------- */

/* The engine's host copies run on a pool of worker threads plus the calling
 * thread: one process-wide pool, and for buffers and rings placed on a NUMA
 * node of a host with several (see "Devices and NUMA placement") one pool
 * per node, whose workers run on that node's CPUs. A transfer's host copy is
 * cut into blocks (a few to a few hundred KiB) that whichever thread is
 * running claims, the caller included: a thread that loses its CPU holds one
 * block, not a share of the transfer, and the other threads copy on into the
 * next chunks. Transfers on several threads share the workers. How many
 * workers one transfer may have is capped by the CPUs that are free now: the
 * CPUs this process may use (its affinity mask, lowered to its cgroup's CPU
 * quota; PINSTAGE_CPUS=N in the environment overrides both), less the
 * threads running elsewhere on the machine (sampled from /proc/loadavg at
 * most every 2 ms) and the callers of the transfers in progress, shared
 * among those transfers, and while other threads keep CPUs busy, one more
 * left for the driver's and the kernel's threads. So copy threads do not
 * take turns with a pipeline's own, and a block is seldom held by a thread
 * that lost its CPU. The blocks grow when a transfer gets few threads (two
 * per thread and chunk).
 * The pool starts at the first engine transfer with one worker per CPU the
 * process may use, less one for the caller and, from 8 CPUs up, one more for
 * the driver's threads and the rest of the program (PINSTAGE_POOL_AUTO). A
 * worker spins while a transfer it helps may still open blocks, then for a
 * short while (200 us by default: the next chunk is usually microseconds
 * away), then parks on a condition variable: an idle process uses no CPU.
 * While it spins it yields its CPU every 20 us, so a thread of the transfer
 * that shares that CPU (the kernel may wake a worker onto its waker's) does
 * not wait for the scheduler's tick. Transfers that come in a rhythm (a
 * frame loop's, 0.5 to 250 ms apart, one to four a period) would each find
 * the workers asleep, and a worker asleep for milliseconds can take 40-130
 * us to get a CPU back (a VM's idle vCPU): so the workers that helped the
 * last one sleep through the gap (never while a transfer is in progress) and
 * are woken by a timer 150 us before the next is due, and spin until shortly
 * after. When the rhythm stops, each gets up once for the transfer that does
 * not come, then sleeps without a timer (at most 250 ms after the last). The
 * workers are joined at exit. A node's pool is sized the same way to the
 * node's CPUs. The workers are named pinstage-1, pinstage-2, ... (node N's:
 * pinstageN-1, ...), as top -H, gdb and /proc/PID/task/TID/comm show them.
 * The functions below act on every pool. */
#define PINSTAGE_POOL_AUTO ((unsigned)-1)

/* Sets the number of worker threads of each pool (0: the calling thread
 * only; PINSTAGE_POOL_AUTO: sized to the CPUs it may use). Running workers
 * are stopped (after the transfer using them) and the new number starts on
 * next use. INVALID_VALUE above 255. */
PINSTAGE_API pinstage_status pinstage_pool_set_threads(unsigned workers);
/* How long an idle worker spins before it parks, in microseconds (at most
 * one second). 0 also turns off the timed wake-up ahead of a rhythm's next
 * transfer. Threads whose CPUs went idle copy slower after it: a spin
 * longer than a frame loop's gap, with a calling thread that does not sleep
 * through the gap either, keeps most of the warm speed, for every worker's
 * CPU through every gap (README, "The worker pool"). */
PINSTAGE_API void pinstage_pool_set_spin_us(unsigned spin_us);
/* Stops and joins the workers (waiting for a transfer using them); the next
 * engine transfer starts them again. */
PINSTAGE_API void pinstage_pool_shutdown(void);

/* Summed over the pools. */
typedef struct pinstage_pool_info {
    unsigned workers; /* configured */
    unsigned running; /* started threads (0 before first use and after shutdown) */
    unsigned parked;  /* of those, parked now */
    unsigned spin_us;
    unsigned pools;   /* NUMA nodes' pools made so far, besides the process-wide one */
} pinstage_pool_info;
PINSTAGE_API void pinstage_pool_get_info(pinstage_pool_info *info);

/* ---- Typed convenience -------------------------------------------------- */

/* 16-bit float storage: distinct types so the typed calls below can tell
 * them from uint16_t. Bits only; no arithmetic. */
typedef struct pinstage_f16 { uint16_t bits; } pinstage_f16;
typedef struct pinstage_bf16 { uint16_t bits; } pinstage_bf16;

/* For every element type T with suffix S (f32 float, f64 double, i8 u8 i16
 * u16 i32 u32 i64 u64 the fixed-width integers, f16 pinstage_f16, bf16
 * pinstage_bf16):
 *   pinstage_devbuf_alloc_S(&d, len)
 *   pinstage_devbuf_wrap_S(&d, ptr, len)
 *   pinstage_buffer_upload_S(buf, d, const T *src, n, stream)
 *   pinstage_buffer_download_S(buf, T *dst, n, d, stream)
 *   pinstage_buffer_download_into_S(buf, d, n, stream, const T **view)
 *   pinstage_buffer_upload_with_S(buf, d, n, stream, void (*fill)(T *, size_t, void *), user)
 *   pinstage_ring_upload_with_async_S(ring, d, n, stream, void (*fill)(T *, size_t, void *), user)
 *   pinstage_ring_upload_async_S(ring, d, const T *src, n, stream)
 *   pinstage_ring_download_async_S(ring, d, n, stream, &ticket)
 * The transfer calls return INVALID_VALUE when the device buffer's element
 * size or alignment is not T's. In C, pinstage_upload(buf, d, src, n, stream)
 * and pinstage_download(buf, dst, n, d, stream) pick the right one from the
 * host pointer's type. */
/* For the typed calls below, not to be called directly: checks that the
 * device buffer holds elements of this size and alignment. */
PINSTAGE_API pinstage_status pinstage_devbuf_check_elem(const pinstage_devbuf *buf,
                                                        size_t elem_size, size_t elem_align,
                                                        const char *caller);

/* For the typed calls below, not to be used directly: a typed fill callback
 * and its user data, handed through the untyped fill. */
typedef struct pinstage_typed_fill {
    void (*fn)(void); /* the typed callback, cast back by the typed trampoline */
    void *user_data;
} pinstage_typed_fill;

#if defined(__cplusplus)
#define PINSTAGE_ALIGNOF(T) alignof(T)
#else
#define PINSTAGE_ALIGNOF(T) _Alignof(T)
#endif

#define PINSTAGE_DEFINE_TYPED(S, T)                                                                \
    static inline pinstage_status pinstage_devbuf_alloc_##S(pinstage_devbuf **out, size_t len) {   \
        return pinstage_devbuf_alloc(out, len, sizeof(T), PINSTAGE_ALIGNOF(T));                    \
    }                                                                                              \
    static inline pinstage_status pinstage_devbuf_wrap_##S(pinstage_devbuf **out, CUdeviceptr ptr, \
                                                           size_t len) {                           \
        return pinstage_devbuf_wrap(out, ptr, len, sizeof(T), PINSTAGE_ALIGNOF(T));                \
    }                                                                                              \
    static inline pinstage_status pinstage_buffer_upload_##S(                                      \
        pinstage_buffer *buf, pinstage_devbuf *dst, const T *src, size_t n, CUstream stream) {     \
        pinstage_status s = pinstage_devbuf_check_elem(dst, sizeof(T), PINSTAGE_ALIGNOF(T),        \
                                                       "pinstage_buffer_upload_" #S);              \
        return s ? s : pinstage_buffer_upload(buf, dst, src, n, stream);                           \
    }                                                                                              \
    static inline pinstage_status pinstage_buffer_download_##S(                                    \
        pinstage_buffer *buf, T *dst, size_t n, const pinstage_devbuf *src, CUstream stream) {     \
        pinstage_status s = pinstage_devbuf_check_elem(src, sizeof(T), PINSTAGE_ALIGNOF(T),        \
                                                       "pinstage_buffer_download_" #S);            \
        return s ? s : pinstage_buffer_download(buf, dst, n, src, stream);                         \
    }                                                                                              \
    static inline pinstage_status pinstage_buffer_download_into_##S(                               \
        pinstage_buffer *buf, const pinstage_devbuf *src, size_t n, CUstream stream,               \
        const T **view) {                                                                          \
        const void *v = 0;                                                                         \
        pinstage_status s = pinstage_devbuf_check_elem(src, sizeof(T), PINSTAGE_ALIGNOF(T),        \
                                                       "pinstage_buffer_download_into_" #S);       \
        if (!s) s = pinstage_buffer_download_into(buf, src, n, stream, view ? &v : 0);             \
        if (view) *view = (const T *)v;                                                            \
        return s;                                                                                  \
    }                                                                                              \
    static inline void pinstage_fill_trampoline_##S(void *dst, size_t n, void *typed) {            \
        const pinstage_typed_fill *f = (const pinstage_typed_fill *)typed;                         \
        ((void (*)(T *, size_t, void *))f->fn)((T *)dst, n, f->user_data);                         \
    }                                                                                              \
    static inline pinstage_status pinstage_buffer_upload_with_##S(                                 \
        pinstage_buffer *buf, pinstage_devbuf *dst, size_t n, CUstream stream,                     \
        void (*fill)(T *, size_t, void *), void *user_data) {                                      \
        pinstage_typed_fill f;                                                                     \
        pinstage_status s = pinstage_devbuf_check_elem(dst, sizeof(T), PINSTAGE_ALIGNOF(T),        \
                                                       "pinstage_buffer_upload_with_" #S);         \
        if (s) return s;                                                                           \
        f.fn = (void (*)(void))fill;                                                               \
        f.user_data = user_data;                                                                   \
        return pinstage_buffer_upload_with(buf, dst, n, stream,                                    \
                                           fill ? pinstage_fill_trampoline_##S : 0, &f);           \
    }                                                                                              \
    static inline pinstage_status pinstage_ring_upload_with_async_##S(                             \
        pinstage_ring *ring, pinstage_devbuf *dst, size_t n, CUstream stream,                      \
        void (*fill)(T *, size_t, void *), void *user_data) {                                      \
        pinstage_typed_fill f;                                                                     \
        pinstage_status s = pinstage_devbuf_check_elem(dst, sizeof(T), PINSTAGE_ALIGNOF(T),        \
                                                       "pinstage_ring_upload_with_async_" #S);     \
        if (s) return s;                                                                           \
        f.fn = (void (*)(void))fill;                                                               \
        f.user_data = user_data;                                                                   \
        return pinstage_ring_upload_with_async(ring, dst, n, stream,                               \
                                               fill ? pinstage_fill_trampoline_##S : 0, &f);       \
    }                                                                                              \
    static inline pinstage_status pinstage_ring_upload_async_##S(                                  \
        pinstage_ring *ring, pinstage_devbuf *dst, const T *src, size_t n, CUstream stream) {      \
        pinstage_status s = pinstage_devbuf_check_elem(dst, sizeof(T), PINSTAGE_ALIGNOF(T),        \
                                                       "pinstage_ring_upload_async_" #S);          \
        return s ? s : pinstage_ring_upload_async(ring, dst, src, n, stream);                      \
    }                                                                                              \
    static inline pinstage_status pinstage_ring_download_async_##S(                                \
        pinstage_ring *ring, const pinstage_devbuf *src, size_t n, CUstream stream,                \
        pinstage_ticket *ticket) {                                                                 \
        pinstage_status s = pinstage_devbuf_check_elem(src, sizeof(T), PINSTAGE_ALIGNOF(T),        \
                                                       "pinstage_ring_download_async_" #S);        \
        if (s && ticket) *ticket = 0;                                                              \
        return s ? s : pinstage_ring_download_async(ring, src, n, stream, ticket);                 \
    }

PINSTAGE_DEFINE_TYPED(f32, float)
PINSTAGE_DEFINE_TYPED(f64, double)
PINSTAGE_DEFINE_TYPED(i8, int8_t)
PINSTAGE_DEFINE_TYPED(u8, uint8_t)
PINSTAGE_DEFINE_TYPED(i16, int16_t)
PINSTAGE_DEFINE_TYPED(u16, uint16_t)
PINSTAGE_DEFINE_TYPED(i32, int32_t)
PINSTAGE_DEFINE_TYPED(u32, uint32_t)
PINSTAGE_DEFINE_TYPED(i64, int64_t)
PINSTAGE_DEFINE_TYPED(u64, uint64_t)
PINSTAGE_DEFINE_TYPED(f16, pinstage_f16)
PINSTAGE_DEFINE_TYPED(bf16, pinstage_bf16)
/* char, distinct from int8_t and uint8_t. */
PINSTAGE_DEFINE_TYPED(char, char)
#if defined(__LP64__)
/* Where int64_t is long (LP64), long long is a distinct type. */
PINSTAGE_DEFINE_TYPED(ll, long long)
PINSTAGE_DEFINE_TYPED(ull, unsigned long long)
#endif
#if defined(__SIZEOF_INT128__)
/* The seed's 128-bit elements, where the compiler has __int128. */
__extension__ typedef __int128 pinstage_i128;
__extension__ typedef unsigned __int128 pinstage_u128;
PINSTAGE_DEFINE_TYPED(i128, pinstage_i128)
PINSTAGE_DEFINE_TYPED(u128, pinstage_u128)
#endif

#if !defined(__cplusplus)
#if defined(__LP64__)
#define PINSTAGE_GENERIC_LL_(op) \
    long long *: op##_ll, const long long *: op##_ll, unsigned long long *: op##_ull, const unsigned long long *: op##_ull,
#else
#define PINSTAGE_GENERIC_LL_(op)
#endif
#if defined(__SIZEOF_INT128__)
#define PINSTAGE_GENERIC_128_(op) \
    pinstage_i128 *: op##_i128, const pinstage_i128 *: op##_i128, pinstage_u128 *: op##_u128, const pinstage_u128 *: op##_u128,
#else
#define PINSTAGE_GENERIC_128_(op)
#endif
#define PINSTAGE_GENERIC_(ptr, op)                                                      \
    _Generic((ptr),                                                                     \
        PINSTAGE_GENERIC_LL_(op) PINSTAGE_GENERIC_128_(op)                              \
        char *: op##_char, const char *: op##_char,                                     \
        float *: op##_f32, const float *: op##_f32,                                     \
        double *: op##_f64, const double *: op##_f64,                                   \
        int8_t *: op##_i8, const int8_t *: op##_i8,                                     \
        uint8_t *: op##_u8, const uint8_t *: op##_u8,                                   \
        int16_t *: op##_i16, const int16_t *: op##_i16,                                 \
        uint16_t *: op##_u16, const uint16_t *: op##_u16,                               \
        int32_t *: op##_i32, const int32_t *: op##_i32,                                 \
        uint32_t *: op##_u32, const uint32_t *: op##_u32,                               \
        int64_t *: op##_i64, const int64_t *: op##_i64,                                 \
        uint64_t *: op##_u64, const uint64_t *: op##_u64,                               \
        pinstage_f16 *: op##_f16, const pinstage_f16 *: op##_f16,                       \
        pinstage_bf16 *: op##_bf16, const pinstage_bf16 *: op##_bf16)
/* Typed upload/download chosen by the host pointer's element type. */
#define pinstage_upload(buf, dst, src, n, stream) \
    PINSTAGE_GENERIC_((src), pinstage_buffer_upload)((buf), (dst), (src), (n), (stream))
#define pinstage_download(buf, dst, n, src, stream) \
    PINSTAGE_GENERIC_((dst), pinstage_buffer_download)((buf), (dst), (n), (src), (stream))
#endif

#ifdef __cplusplus
}
#endif

#endif /* PINSTAGE_H */
