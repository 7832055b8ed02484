/* SPDX-License-Identifier: MIT */
/* Worker threads that share jobs with the threads that post them. No CUDA
 * in here: the pool only runs functions.
 *
 * A job is `count` blocks, fn(arg, i) for each. Blocks are claimed one at a
 * time by whichever thread is running: the poster (it helps while it waits)
 * and any worker that holds one of the job's seats. The blocks are dealt
 * to lanes, one per thread, and each thread claims from its own lane first,
 * so threads that all start at once do not queue for one cache line; a
 * thread whose lane is empty takes blocks from the others'. So a
 * descheduled thread holds at most the one block it is copying, never a
 * fixed share of the job. A job may open its blocks gradually (`limit`):
 * the copy engine opens a chunk's blocks once the slot they go into is
 * free, and workers keep claiming across chunks without a barrier between
 * them.
 *
 * Several jobs may be posted at once (transfers on different threads): the
 * workers spread over them. How many workers a job may have (its seats) is
 * capped so that the posters and the workers together never outnumber the
 * CPUs that are free: the CPUs this process may use (affinity, cgroup
 * quota) less what other threads keep busy (see cpus.h), and, while other
 * threads keep some busy, less one more for the driver's and the kernel's
 * threads. */
#ifndef PINSTAGE_POOL_H
#define PINSTAGE_POOL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "pinstage.h"

typedef struct ps_pool ps_pool;

/* Runs block `block` of a job. */
typedef void (*ps_block_fn)(void *arg, size_t block);

/* Most blocks one job may have. */
#define PS_JOB_MAX_BLOCKS 65535u

/* Lanes a job's blocks are dealt to: block b is lane b % lanes's. */
#define PS_JOB_LANES 32u

/* One lane: the next of its blocks to claim, and the blocks its home thread
 * (and thieves, when it had none left) finished. A line of its own, so
 * threads claiming from their own lanes share no line that they write. */
typedef struct ps_job_lane {
    _Alignas(64) _Atomic uint64_t cursor; /* generation:32 | blocks of the lane claimed:32 */
    _Atomic uint32_t done;
} ps_job_lane;

/* Where a job's claim state lives: one of the pool's slots while posted,
 * else the job's own (the poster runs every block). */
typedef struct ps_job_slot {
    /* generation:31 | final:1 | cancelled:1 | lanes:15 | limit:16.
     * `final`: limit is count; limit 0 once the job has finished. */
    _Alignas(64) _Atomic uint64_t state;
    _Atomic uint64_t seats; /* generation:32 | workers seated:32 */
    _Atomic uint32_t max_seats;
    _Atomic int open_seating; /* every worker may join: none takes a seat */
    _Atomic(ps_block_fn) fn;
    _Atomic(void *) arg;
    _Atomic int owned; /* a poster holds the slot */
    ps_job_lane lanes[PS_JOB_LANES];
} ps_job_slot;

typedef struct ps_job {
    ps_pool *pool;
    ps_job_slot *slot; /* &local when not posted */
    size_t count;
    unsigned seats; /* workers it may have */
    ps_job_slot local;
} ps_job;

/* The process-wide pool (workers start on first use): its workers run on
 * any CPU the process may use. */
ps_pool *ps_pool_default(void);

/* The pool of NUMA node `node`, whose workers run on the node's CPUs only
 * (made on first use); the default pool for node -1 or a node without CPUs
 * this process may use. */
ps_pool *ps_pool_for_node(int node);

/* The node whose CPUs run the pool's workers; -1 for the default pool. */
int ps_pool_node(const ps_pool *pool);

/* Starts a job of `count` blocks (at most PS_JOB_MAX_BLOCKS) of which the
 * first `limit` may be claimed now, with at most `helpers` workers besides
 * the calling thread (capped by the CPUs free now). Never fails: without a
 * worker to spare the caller runs every block itself, in ps_job_help and
 * ps_job_finish. `arg` must stay valid until ps_job_finish returns.
 * ps_job_enter + ps_job_post. */
void ps_job_start(ps_pool *pool, ps_job *job, size_t count, size_t limit, unsigned helpers, ps_block_fn fn,
                  void *arg);
/* The two halves of ps_job_start, for a poster that sizes its blocks by the
 * threads it gets: enter counts the calling thread in and sets job->seats,
 * the workers the job may have; post publishes the job (with no seats when
 * count < 2 or no slot is free). */
void ps_job_enter(ps_pool *pool, ps_job *job, unsigned helpers);
void ps_job_post(ps_job *job, size_t count, size_t limit, ps_block_fn fn, void *arg);
/* Lets blocks below `limit` be claimed (limits only grow). */
void ps_job_open(ps_job *job, size_t limit);
/* Claims and runs one open block on the calling thread: 1 if it ran one. */
int ps_job_help(ps_job *job);
/* Blocks finished so far (their writes are visible to the caller); after
 * a cancel, blocks skipped count as finished. */
size_t ps_job_done(ps_job *job);
/* No block runs any more unless it is running or claimed already (after a
 * failure): the open blocks left are counted done without running, so
 * ps_job_finish waits only for blocks already running. */
void ps_job_cancel(ps_job *job);
/* Opens every block (unless cancelled), runs the unclaimed ones, waits for
 * those other threads are running and gives the slot back. */
void ps_job_finish(ps_job *job);

/* start + finish with every block open. */
void ps_pool_run(ps_pool *pool, size_t count, unsigned helpers, ps_block_fn fn, void *arg);

/* Threads inside a job now (posted or not): the transfers in progress. */
unsigned ps_pool_callers(ps_pool *pool);

/* 1 + the worker's number on a worker thread, 0 on any other (traces). */
unsigned ps_pool_thread_index(void);

/* Worker threads the pool runs when started (configured, not necessarily
 * running yet). */
unsigned ps_pool_workers(ps_pool *pool);

/* Sleeping workers the calling thread's last job woke: 0 when the workers
 * it got were awake (a transfer's time then says what the route costs when
 * used steadily). */
unsigned ps_pool_last_woken(void);

/* For tests: the seats the calling thread's last job was given, its
 * blocks, and how many times a sleeping worker's wait returned. */
unsigned ps_pool_last_seats(void);
size_t ps_pool_last_blocks(void);
unsigned long ps_pool_wakeups(ps_pool *pool);
/* For tests: waits that a worker's own timer ended (a rhythm's next job due). */
unsigned long ps_pool_early_wakeups(ps_pool *pool);
/* For tests: wake-ups granted to parked workers that have not run yet to
 * take them (a busy machine may not give them a CPU before the job ends). */
unsigned ps_pool_pending_wakeups(ps_pool *pool);

#endif
