/* SPDX-License-Identifier: MIT */
/* The emulated driver's internals. One mutex guards all state; one condition
 * variable is broadcast on every change (work queued, work finished), which
 * is simple and plenty for test workloads. */
#ifndef PINSTAGE_EMU_INTERNAL_H
#define PINSTAGE_EMU_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "cuda_abi.h"
#include "pinstage_emu.h"

#define EMU_EXPORT __attribute__((visibility("default")))

/* Entry-point ids, one per driver function the emulator provides. */
enum {
#define EMU_ID(name, version, params) EMU_ID_##name,
    PS_DRIVER_ENTRY_POINTS(EMU_ID) PS_EXTRA_ENTRY_POINTS(EMU_ID)
#undef EMU_ID
        EMU_ID_cuGetProcAddress,
    EMU_ENTRY_COUNT
};

typedef struct emu_stream emu_stream;

typedef struct emu_dep {
    emu_stream *stream;
    uint64_t seq; /* satisfied once stream->completed >= seq */
} emu_dep;

typedef enum { EMU_OP_COPY, EMU_OP_MEMSET, EMU_OP_MARKER, EMU_OP_HOST_FN } emu_op_kind;

typedef struct emu_op {
    emu_op_kind kind;
    uint64_t seq;
    void *dst;
    const void *src;
    size_t bytes;
    unsigned char value;
    void *staging; /* a pageable source copied at call time; freed after the op */
    int pinned_host; /* a copy to or from page-locked host memory (its own DMA rate) */
    int device;      /* the context it was queued in: whose copy rate applies */
    CUhostFn fn;
    void *user_data;
    emu_dep deps[8];
    size_t ndeps;
    emu_dep *more_deps; /* when a legacy-stream op waits on many streams */
    size_t nmore_deps;
    struct emu_op *next;
} emu_op;

struct emu_stream {
    unsigned flags;
    int legacy;
    int device; /* the context it was created in; the legacy stream serves every context: -1 */
    int destroyed;
    uint64_t enqueued, completed;
    emu_op *head, *tail;
    pthread_t worker;
    int exited, joined; /* a destroyed stream's worker ends; the next create joins it */
    emu_stream *next_all;
};

typedef struct emu_event {
    unsigned flags;
    int device; /* the context it was created in */
    emu_stream *stream; /* NULL until recorded */
    uint64_t seq;
    struct emu_event *next_all;
} emu_event;

typedef struct emu_region {
    uintptr_t start; /* device address, or host address for pinned ranges */
    size_t bytes;
    void *backing; /* device: host memory behind the range; pinned: block to free */
    int registered; /* pinned ranges: 1 for cuMemHostRegister, 0 for allocations */
    int device;     /* whose primary context made it: its destruction frees it */
} emu_region;

typedef struct emu_regions {
    emu_region *items;
    size_t count, cap;
} emu_regions;

typedef struct emu_state {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    int initialized;
    int shutting_down;
    int inline_ops; /* run each queued op at once on the calling thread (PINSTAGE_EMU_INLINE) */
    /* configuration */
    double latency_ns;
    double bytes_per_ns;
    double pinned_bytes_per_ns;   /* DMA to or from page-locked host memory; 0: bytes_per_ns */
    double pageable_ns_per_byte;  /* the driver staging pageable memory, on the calling thread */
    int devices;
#define EMU_MAX_DEVICES 64
    double device_bytes_per_ns[EMU_MAX_DEVICES]; /* per device; 0: bytes_per_ns */
    int numa[EMU_MAX_DEVICES];                   /* host node per device (PINSTAGE_EMU_NUMA) */
    int have_numa;                               /* else the attribute is unknown, as before CUDA 12.2 */
    int device_failure[EMU_MAX_DEVICES];         /* non-zero: every call in that context fails so */
    size_t device_limit, pinned_limit, pinned_align;
    /* counting and faults */
    unsigned long calls[EMU_ENTRY_COUNT];
    /* every call since the last reset, in order (the first EMU_TRACE_MAX) */
#define EMU_TRACE_MAX 65536
    unsigned short trace[EMU_TRACE_MAX];
    size_t trace_len;
    unsigned long fail_at[EMU_ENTRY_COUNT]; /* 0: no fault */
    int fail_result[EMU_ENTRY_COUNT];
    int fail_every[EMU_ENTRY_COUNT];
    /* memory */
    emu_regions device, pinned;
    uintptr_t next_device_address;
    size_t device_bytes, pinned_bytes, registered_bytes, pinned_allocations;
    /* contexts, streams, events */
    int *primary_refs; /* per device */
    unsigned *primary_flags; /* per device: cuDevicePrimaryCtxSetFlags */
    struct CUctx_st *contexts;
    emu_stream *streams; /* every stream ever created, the legacy one first */
    emu_stream *legacy;
    emu_event *events;
} emu_state;

extern emu_state emu;

/* Entry: counts the call and applies an injected fault. Returns non-zero
 * (the result to return) when the call must fail. Takes and drops emu.lock. */
CUresult emu_enter(int id);
/* For calls that need cuInit and a current context (lock held). */
CUresult emu_need_context(void);

/* Memory (lock held). */
CUresult emu_device_range(CUdeviceptr ptr, size_t bytes, void **host);
int emu_is_pinned(const void *p, size_t bytes);
/* Whether [p, p + bytes) touches a pinned range without lying inside one. */
int emu_is_partly_pinned(const void *p, size_t bytes);
void emu_regions_free(emu_regions *r);
/* The current context's device (lock held; the context was checked). */
int emu_current_device(void);
/* A stream or event used in a context that is not the one it was made in
 * (lock held): the error a real driver gives, else 0. */
CUresult emu_check_stream_context(const emu_stream *s);
/* A primary context was destroyed: its allocations and registrations go. */
void emu_free_context_memory(int device);

/* Streams (lock held). */
CUresult emu_resolve_stream(CUstream handle, emu_stream **stream);
emu_op *emu_new_op(emu_op_kind kind);
uint64_t emu_enqueue(emu_stream *stream, emu_op *op);
void emu_wait(emu_stream *stream, uint64_t seq);
void emu_streams_init(void);
void emu_streams_shutdown(void);

/* Configuration read from the environment at first use. */
void emu_configure(void);

/* Entry points, named emu_<driver name>. */
#define EMU_DECLARE(name, version, params) CUresult emu_##name params;
PS_DRIVER_ENTRY_POINTS(EMU_DECLARE)
PS_EXTRA_ENTRY_POINTS(EMU_DECLARE)
#undef EMU_DECLARE

/* Shorthand at the top of every entry point. */
#define EMU_ENTER(name)                          \
    do {                                         \
        CUresult enter_ = emu_enter(EMU_ID_##name); \
        if (enter_ != CUDA_SUCCESS) return enter_; \
    } while (0)

#endif
