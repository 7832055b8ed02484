/* SPDX-License-Identifier: MIT */
/* The copy engine behind upload / download of ordinary memory: the transfer
 * is cut into chunks that flow through a ring of slots of the buffer's
 * pinned memory (PS_ENGINE_SLOTS for uploads, PS_ENGINE_D2H_SLOTS for
 * downloads), each slot guarded by an event. While the DMA of
 * chunk k runs, the pool copies chunk k+1 into the next free slot (downloads
 * mirror it: the DMA of chunk k+1 runs while chunk k is copied out). A
 * transfer shorter than the slots gives each chunk a place of its own. */
#ifndef PINSTAGE_ENGINE_H
#define PINSTAGE_ENGINE_H

#include "driver.h"
#include "policy.h"
#include "pool.h"

/* The pinned memory and events a transfer may use. */
typedef struct ps_stage {
    unsigned char *pinned; /* at least ps_engine_footprint() bytes */
    CUevent *events;       /* PS_ENGINE_MAX_SLOTS created events */
} ps_stage;

/* A download's plan while other transfers use the pool (`others` in
 * progress): chunks of at least PS_ENGINE_SHARED_D2H_CHUNK. Each chunk is a
 * DMA, an event and queries, and eight threads making those calls for
 * 256 KiB chunks of 4.7 MiB downloads moved 27.8 GB/s together on the H200
 * machine, 38.4 GB/s with 1 MiB chunks. Uploads keep their profile's: with
 * a fixed 256 KiB or 1 MiB chunk they lost a third or more. Decide before
 * sizing the pinned memory: the footprint follows the chunk. */
#define PS_ENGINE_SHARED_D2H_CHUNK ((size_t)1 << 20)
ps_plan ps_engine_plan_shared(ps_plan plan, ps_direction dir, size_t bytes, unsigned others);

/* Pinned bytes a transfer of `bytes` in `dir` needs under `plan`: at most
 * PS_ENGINE_MAX_FOOTPRINT, whatever the transfer's size. */
size_t ps_engine_footprint(ps_direction dir, size_t bytes, const ps_plan *plan);

/* The threads (the caller included) a transfer under `plan` asks for: the
 * plan's count, or the pool's workers and the caller. */
unsigned ps_engine_threads(ps_pool *pool, const ps_plan *plan);

/* What a transfer's host copy took (governor.h): the threads that shared
 * it, the caller included; its blocks' time, all threads together; the
 * transfer's wall time. Blocks are timed only when it is asked for. */
typedef struct ps_engine_report {
    unsigned threads;
    uint64_t copy_ns, wall_ns;
} ps_engine_report;

/* Moves `bytes` between ordinary host memory and the device through the
 * stage, ordered after the work queued on `stream`, landed on return. On
 * failure, *in_flight says whether a DMA may still touch the pinned memory
 * (the waits that would tell failed too): then it must never be reused.
 * `report` (may be NULL) is filled on success. */
pinstage_status ps_engine_h2d(const ps_driver *d, ps_pool *pool, const ps_stage *stage, CUdeviceptr dst,
                              const void *src, size_t bytes, CUstream stream, const ps_plan *plan,
                              int *in_flight, ps_engine_report *report, const char *caller);
pinstage_status ps_engine_d2h(const ps_driver *d, ps_pool *pool, const ps_stage *stage, void *dst,
                              CUdeviceptr src, size_t bytes, CUstream stream, const ps_plan *plan,
                              int *in_flight, ps_engine_report *report, const char *caller);

/* Copies `len` bytes of ordinary memory into pinned memory a DMA reads next,
 * shared by the pool's threads and the caller (streaming stores for large
 * pieces), returning when it is done. */
void ps_engine_copy_in(ps_pool *pool, void *pinned, const void *src, size_t len);

#endif
