/* SPDX-License-Identifier: MIT */
/* Worker threads that split one piece of work (a chunk's host copy) with the
 * calling thread. No CUDA in here: the pool only runs functions.
 *
 * One job at a time per pool: a caller that finds the pool busy (another
 * thread's transfer) runs its whole job itself rather than wait. The pool is
 * an object, so one pool per NUMA node with threads bound to a GPU's local
 * CPUs can sit beside the process-wide one later. */
#ifndef PINSTAGE_POOL_H
#define PINSTAGE_POOL_H

#include "pinstage.h"

typedef struct ps_pool ps_pool;

/* fn(arg, i) for one piece i of a job. */
typedef void (*ps_task_fn)(void *arg, unsigned index);

/* The process-wide pool (workers start on first use). */
ps_pool *ps_pool_default(void);

/* A job handed to the pool, until joined. */
typedef struct ps_job {
    int posted; /* 0: it already ran on the calling thread */
    unsigned count;
} ps_job;

/* Starts fn(arg, i) for every i in [0, count) on the pool's workers and
 * returns at once, so the caller can make driver calls meanwhile; `arg`
 * must stay valid until ps_pool_join. Never fails: without workers (none
 * configured, the pool busy with another thread's job, threads that cannot
 * be started) the caller runs every piece itself, here. */
void ps_pool_post(ps_pool *pool, ps_job *job, unsigned count, ps_task_fn fn, void *arg);
/* Helps with the job's unclaimed pieces, then waits for all of them. */
void ps_pool_join(ps_pool *pool, ps_job *job);
/* post + join. */
void ps_pool_run(ps_pool *pool, unsigned count, ps_task_fn fn, void *arg);

/* Worker threads the pool runs when started (configured, not necessarily
 * running yet). */
unsigned ps_pool_workers(ps_pool *pool);

/* Pieces a job may have: at most this many threads share one. */
#define PS_POOL_MAX_PIECES 256u

#endif
