/* SPDX-License-Identifier: MIT */
/* The worker pool: threads that share a job's pieces with the caller.
 *
 * Shared state and who may touch it:
 *  - `state` (atomic): the posted job as generation (48 bits) | piece count
 *    (16 bits), written only by the thread that owns `busy`, with seq_cst.
 *    Generations only grow (2^48 jobs: centuries at a million a second).
 *  - `pieces[i].claimed` / `.done` (atomics, one cache line per piece): the
 *    generation that claimed / finished piece i. Worker w owns pieces w,
 *    w + n, w + 2n...; the caller, when it joins, steals any piece still
 *    unclaimed. A claim is a CAS from an older generation to the job's, so
 *    each piece runs exactly once, and no two threads fight over one cache
 *    line in the common case (a shared claim counter cost microseconds per
 *    job on 16 cores). `done` is stored with release, read with acquire:
 *    the pieces' writes are visible when the caller's join returns.
 *  - `fn`, `arg`: written only by the `busy` owner before it publishes
 *    `state`, and only while no piece of the previous job is unfinished;
 *    read by a thread after it claimed a piece of the job, which cannot
 *    finish before that piece does, so they are the job's own.
 *  - `busy` (atomic flag): who owns the job slot. A transfer takes it with a
 *    test-and-set; resizing and shutdown wait for it.
 *  - `sleepers` (atomic) and `lock`/`wake`: parking. A worker increments
 *    sleepers (seq_cst) under `lock`, then re-reads `state`; a submitter
 *    stores `state` (seq_cst), then reads sleepers and, if any, broadcasts
 *    under `lock`. Either the worker sees the new job or the submitter sees
 *    the sleeper, so no wake-up is lost.
 *  - `planned` (atomic, relaxed): the worker count a transfer plans its
 *    pieces for, read without a lock on every transfer; a stale value only
 *    changes how many pieces a job has, never whether they all run.
 *  - `threads`, `nthreads`, `started`, `configured`: under `admin`, and
 *    changed only while `busy` is held, so no job runs while workers start
 *    or stop. Workers read `stop` and `spin_ns` atomically.
 * Idle workers spin for spin_ns after their last piece (a pipeline's next
 * chunk is microseconds away), then park on the condition variable: an idle
 * process uses no CPU. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "pool.h"
#include "status.h"

#define MAX_WORKERS 255u
#define DEFAULT_SPIN_NS 200000u /* 200 us */

typedef struct {
    _Alignas(64) _Atomic uint64_t claimed;
    _Atomic uint64_t done;
} piece_slot;

typedef struct {
    struct ps_pool *pool;
    unsigned index;
} worker_arg;

struct ps_pool {
    _Alignas(64) _Atomic uint64_t state;
    _Alignas(64) _Atomic int busy;
    _Atomic int stop;
    _Atomic unsigned sleepers;
    _Atomic unsigned parked; /* workers parked now: for pinstage_pool_get_info */
    _Atomic unsigned spin_ns;
    _Atomic unsigned nworkers; /* running workers, for the piece owners */
    _Atomic unsigned planned;  /* workers the pool runs when started; UINT32_MAX: not yet known */
    ps_task_fn fn;
    void *arg;
    uint64_t generation; /* owned by the `busy` holder */
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_mutex_t admin;
    pthread_t threads[MAX_WORKERS];
    worker_arg args[MAX_WORKERS];
    unsigned nthreads;   /* running */
    unsigned configured; /* to start; UINT32_MAX: sized to the machine */
    int started;
    piece_slot pieces[PS_POOL_MAX_PIECES];
};

#define GEN(s) ((s) >> 16)
#define COUNT(s) ((unsigned)((s)&0xffffu))
#define PACK(gen, count) (((uint64_t)(gen) << 16) | (uint64_t)(count))

static ps_pool global = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .wake = PTHREAD_COND_INITIALIZER,
    .admin = PTHREAD_MUTEX_INITIALIZER,
    .configured = UINT32_MAX,
    .planned = UINT32_MAX,
    .spin_ns = DEFAULT_SPIN_NS,
};

ps_pool *ps_pool_default(void) { return &global; }

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Runs piece i of job `gen` unless another thread claimed it. */
static int try_run(ps_pool *p, unsigned i, uint64_t gen) {
    piece_slot *slot = &p->pieces[i];
    uint64_t v = atomic_load_explicit(&slot->claimed, memory_order_relaxed);
    do {
        if (v >= gen) return 0;
    } while (!atomic_compare_exchange_weak_explicit(&slot->claimed, &v, gen, memory_order_acq_rel,
                                                     memory_order_relaxed));
    p->fn(p->arg, i);
    atomic_store_explicit(&slot->done, gen, memory_order_release);
    return 1;
}

static void *worker_main(void *arg) {
    worker_arg *a = arg;
    ps_pool *p = a->pool;
    uint64_t seen = atomic_load_explicit(&p->state, memory_order_acquire);
    uint64_t idle_since = now_ns();
    unsigned polls = 0;
    while (!atomic_load_explicit(&p->stop, memory_order_acquire)) {
        uint64_t s = atomic_load_explicit(&p->state, memory_order_acquire);
        if (s != seen) {
            unsigned n = atomic_load_explicit(&p->nworkers, memory_order_relaxed);
            seen = s;
            for (unsigned i = a->index; i < COUNT(s); i += n) try_run(p, i, GEN(s));
            idle_since = now_ns();
            continue;
        }
        /* Reading the clock every poll would slow the poll; every 64th is enough. */
        if ((++polls & 63u) || now_ns() - idle_since < atomic_load_explicit(&p->spin_ns, memory_order_relaxed)) {
            cpu_relax();
            continue;
        }
        pthread_mutex_lock(&p->lock);
        atomic_fetch_add_explicit(&p->sleepers, 1, memory_order_seq_cst);
        atomic_fetch_add_explicit(&p->parked, 1, memory_order_relaxed);
        while (!atomic_load_explicit(&p->stop, memory_order_seq_cst) &&
               atomic_load_explicit(&p->state, memory_order_seq_cst) == seen)
            pthread_cond_wait(&p->wake, &p->lock);
        atomic_fetch_sub_explicit(&p->parked, 1, memory_order_relaxed);
        atomic_fetch_sub_explicit(&p->sleepers, 1, memory_order_seq_cst);
        pthread_mutex_unlock(&p->lock);
        idle_since = now_ns();
    }
    return NULL;
}

static unsigned machine_workers(void) {
    long cpus = 0;
#ifdef CPU_COUNT
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) cpus = CPU_COUNT(&set);
#endif
    if (cpus <= 0) cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (cpus <= 1) return 0;
    return cpus - 1 > (long)MAX_WORKERS ? MAX_WORKERS : (unsigned)(cpus - 1);
}

/* admin held and busy owned. */
static void start_locked(ps_pool *p) {
    unsigned want = p->configured == UINT32_MAX ? machine_workers() : p->configured;
    atomic_store_explicit(&p->stop, 0, memory_order_release);
    p->nthreads = 0;
    for (unsigned i = 0; i < want; i++) {
        p->args[i] = (worker_arg){p, i};
        if (pthread_create(&p->threads[i], NULL, worker_main, &p->args[i]) != 0) break;
        p->nthreads++;
        /* Workers started so far own the pieces: a worker that failed to
         * start leaves none unowned (and the caller steals any anyway). */
        atomic_store_explicit(&p->nworkers, p->nthreads, memory_order_relaxed);
    }
    p->started = 1;
}

/* admin held and busy owned. */
static void stop_locked(ps_pool *p) {
    if (!p->started) return;
    atomic_store_explicit(&p->stop, 1, memory_order_seq_cst);
    pthread_mutex_lock(&p->lock);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    for (unsigned i = 0; i < p->nthreads; i++) pthread_join(p->threads[i], NULL);
    p->nthreads = 0;
    p->started = 0;
}

static void acquire_busy(ps_pool *p) {
    while (atomic_exchange_explicit(&p->busy, 1, memory_order_acquire)) {
        struct timespec ts = {0, 50000};
        nanosleep(&ts, NULL);
    }
}

static void release_busy(ps_pool *p) { atomic_store_explicit(&p->busy, 0, memory_order_release); }

void ps_pool_post(ps_pool *p, ps_job *job, unsigned count, ps_task_fn fn, void *arg) {
    if (count > PS_POOL_MAX_PIECES) count = PS_POOL_MAX_PIECES;
    job->posted = 0;
    job->count = count;
    if (count <= 1 || atomic_exchange_explicit(&p->busy, 1, memory_order_acquire)) {
        for (unsigned i = 0; i < count; i++) fn(arg, i);
        return;
    }
    if (!p->started) {
        pthread_mutex_lock(&p->admin);
        start_locked(p);
        pthread_mutex_unlock(&p->admin);
    }
    if (p->nthreads == 0) {
        release_busy(p);
        for (unsigned i = 0; i < count; i++) fn(arg, i);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    p->generation++;
    atomic_store_explicit(&p->state, PACK(p->generation, count), memory_order_seq_cst);
    if (atomic_load_explicit(&p->sleepers, memory_order_seq_cst)) {
        pthread_mutex_lock(&p->lock);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->lock);
    }
    job->posted = 1;
}

void ps_pool_join(ps_pool *p, ps_job *job) {
    if (!job->posted) return;
    uint64_t gen = p->generation;
    /* Steal what no worker has started, then wait for the rest. */
    for (unsigned i = job->count; i-- > 0;) try_run(p, i, gen);
    for (unsigned i = 0; i < job->count; i++)
        while (atomic_load_explicit(&p->pieces[i].done, memory_order_acquire) != gen) cpu_relax();
    job->posted = 0;
    release_busy(p);
}

void ps_pool_run(ps_pool *p, unsigned count, ps_task_fn fn, void *arg) {
    ps_job job;
    ps_pool_post(p, &job, count, fn, arg);
    ps_pool_join(p, &job);
}

unsigned ps_pool_workers(ps_pool *p) {
    /* On every transfer's path: no lock. `planned` follows `configured`. */
    unsigned n = atomic_load_explicit(&p->planned, memory_order_relaxed);
    if (n != UINT32_MAX) return n;
    pthread_mutex_lock(&p->admin);
    n = p->configured == UINT32_MAX ? machine_workers() : p->configured;
    atomic_store_explicit(&p->planned, n, memory_order_relaxed);
    pthread_mutex_unlock(&p->admin);
    return n;
}

/* ---- Public control ------------------------------------------------------------ */

pinstage_status pinstage_pool_set_threads(unsigned workers) {
    ps_pool *p = &global;
    if (workers != PINSTAGE_POOL_AUTO && workers > MAX_WORKERS)
        return ps_fail(PINSTAGE_ERROR_INVALID_VALUE,
                       "pinstage_pool_set_threads: workers=%u; at most %u (or PINSTAGE_POOL_AUTO)", workers,
                       MAX_WORKERS);
    acquire_busy(p);
    pthread_mutex_lock(&p->admin);
    stop_locked(p);
    p->configured = workers == PINSTAGE_POOL_AUTO ? UINT32_MAX : workers;
    atomic_store_explicit(&p->planned, UINT32_MAX, memory_order_relaxed);
    pthread_mutex_unlock(&p->admin);
    release_busy(p);
    return PINSTAGE_SUCCESS;
}

void pinstage_pool_shutdown(void) {
    ps_pool *p = &global;
    acquire_busy(p);
    pthread_mutex_lock(&p->admin);
    stop_locked(p);
    pthread_mutex_unlock(&p->admin);
    release_busy(p);
}

void pinstage_pool_set_spin_us(unsigned spin_us) {
    unsigned ns = spin_us > 1000000u ? 1000000000u : spin_us * 1000u;
    atomic_store_explicit(&global.spin_ns, ns, memory_order_relaxed);
}

void pinstage_pool_get_info(pinstage_pool_info *info) {
    ps_pool *p = &global;
    if (!info) return;
    pthread_mutex_lock(&p->admin);
    info->workers = p->configured == UINT32_MAX ? machine_workers() : p->configured;
    info->running = p->started ? p->nthreads : 0;
    pthread_mutex_unlock(&p->admin);
    info->parked = atomic_load_explicit(&p->parked, memory_order_relaxed);
    info->spin_us = atomic_load_explicit(&p->spin_ns, memory_order_relaxed) / 1000u;
}

/* Workers are joined at exit, and a child of fork() has none of its
 * parent's threads: it starts its own on first use. */
__attribute__((destructor)) static void pool_at_exit(void) {
    ps_pool *p = &global;
    if (atomic_exchange_explicit(&p->busy, 1, memory_order_acquire)) return; /* a transfer is running */
    pthread_mutex_lock(&p->admin);
    stop_locked(p);
    pthread_mutex_unlock(&p->admin);
    release_busy(p);
}

static void before_fork(void) { pthread_mutex_lock(&global.admin); }
static void after_fork_parent(void) { pthread_mutex_unlock(&global.admin); }
static void after_fork_child(void) {
    global.started = 0;
    global.nthreads = 0;
    atomic_store(&global.nworkers, 0);
    atomic_store(&global.sleepers, 0);
    atomic_store(&global.parked, 0);
    atomic_store(&global.busy, 0);
    pthread_mutex_init(&global.lock, NULL);
    pthread_cond_init(&global.wake, NULL);
    pthread_mutex_unlock(&global.admin);
}

__attribute__((constructor)) static void pool_register_fork(void) {
    pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}
