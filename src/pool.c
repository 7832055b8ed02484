/* SPDX-License-Identifier: MIT */
/* The worker pool: jobs of blocks claimed by whichever thread is running.
 *
 * Shared state and who may touch it:
 *  - `slots[i]` hold the posted jobs. A poster takes a free slot by a CAS of
 *    `owned` from 0 to 1 and gives it back with a release store of 0 once
 *    every claimed block is finished, so only one job lives in a slot.
 *  - `state` (atomic): generation | final | cancelled | lanes | limit. The
 *    owner publishes a job by writing `fn`, `arg`, `max_seats`,
 *    `open_seating` and each lane's `done` (relaxed), then each lane's
 *    `cursor` and `seats` (release), then `state` with a new generation
 *    (seq_cst). Only the owner changes `state` after that: it raises
 *    `limit` (ps_job_open), sets `cancelled` (ps_job_cancel) and, once every
 *    block is done, sets limit to 0 (ps_job_finish).
 *  - `lanes[l].cursor` (atomic): generation | blocks of lane l claimed.
 *    Block b belongs to lane b % lanes. A block is claimed by a CAS that
 *    increments the cursor while the block it names is below `limit` and
 *    the generation is the one the claimer read in `state`, so every block
 *    runs exactly once and a thread that slept through a job's end can
 *    never claim a block of the slot's next job (whose cursors carry the
 *    new generation). A thread claims from its home lane (the poster lane
 *    0, a worker the lane of its seat) and from other lanes only when its
 *    own has no open block: a job's threads start without queueing for one
 *    line (shared seat and claim words, 14 workers taking turns on them,
 *    cost the 147 KiB transfers 1.4-2.9 us more than lanes on H100 and
 *    H200 machines; docs/findings.md).
 *  - `fn`, `arg` are read by a claimer after its successful claim (acquire):
 *    the job cannot end before that block is done, so they are its job's.
 *  - `lanes[l].done` (atomic): blocks finished by threads whose home lane
 *    is l, incremented with release after each block; the owner sums them
 *    with acquire, so every block's writes are visible when ps_job_finish
 *    returns. The owner resets them before publishing; no claimer of an
 *    earlier job can still add to them (ps_job_finish waits until the sum
 *    is `limit`, and then no open block is left unclaimed).
 *  - `cancelled`: blocks claimed after a claimer saw it are counted done
 *    without running, so ps_job_finish never waits for work no one needs.
 *  - `seats` (atomic): generation | workers seated. A worker claims blocks
 *    of a job only after a CAS that seats it (below `max_seats`), so a job
 *    has at most max_seats workers besides its poster; where the job may
 *    have every worker (`open_seating`) none takes a seat, and a worker's
 *    home lane follows its number.
 *  - `callers`, `posted`, `awake`, `parked`, `sleepers` (atomics): counts.
 *    `callers`: threads inside a job (posted or not), `posted`: of those,
 *    the ones that hold or are taking a slot; `awake`: workers not parked.
 *  - Parking: a worker increments `sleepers` (seq_cst) under `lock`, then
 *    rescans the slots; a poster stores `state` (seq_cst), then reads
 *    `sleepers` and, if any, grants wake-up `tokens` and signals under
 *    `lock`. Either the worker sees the job or the poster sees the sleeper,
 *    so no wake-up is lost. `tokens` is under `lock`.
 *  - `resizing` (atomic): set by set_threads/shutdown, which then wait for
 *    `posted` to drop to 0; a poster increments `posted` (seq_cst) before it
 *    reads `resizing`, so no job is posted while workers start or stop.
 *    `threads`, `nthreads`, `configured` are under `admin`; `started` is
 *    written under `admin` and read without it (atomic).
 *  - `rhythm` (atomics): the start times of the last RHYTHM posted jobs, a
 *    ring written by posters (`rhythm_n` counts them, relaxed stores) and
 *    read by parking workers. A torn or stale read only spoils a guess:
 *    the guess is checked for order and consistency and is never needed
 *    for a job to run.
 * A worker spins while a job it is seated in may still open blocks (the
 * engine's next chunk is microseconds away), then for spin_ns after its
 * last block (WOKEN_SPIN_NS after a wake-up that brought none), then
 * parks: an idle process uses no CPU.
 *
 * Jobs that come in a rhythm (a frame loop's transfers every few
 * milliseconds) would each find the workers asleep, and a worker asleep
 * that long takes 40-130 us to get a CPU back on the lent H200 machine's
 * VM, most of a 4.7 MiB transfer's time. So a worker that helped the last
 * job and sees the posted jobs recur at a steady period (one to four jobs
 * a period, 0.5-250 ms) parks at once instead of spinning, with a timer
 * that gets it up ANTICIPATE_NS before the next job is due, and spins from
 * then until OVERSTAY_NS after (both widened by the rhythm's jitter): the
 * wake-up overlaps the program's own idle
 * time. When the rhythm stops, the one guess that finds no job leaves the
 * workers parked without a timer, so an idle process still uses no CPU
 * (at most one spin of each worker, at most 250 ms after the last job).
 * No worker guesses while a job is in progress: its blocks may open later
 * (a download's after its first DMA), and it needs its workers up. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/prctl.h>
#endif

#include "cpus.h"
#include "numa.h"
#include "pool.h"
#include "status.h"

#define MAX_WORKERS 255u
#define MAX_JOBS 16u
#define DEFAULT_SPIN_NS 200000u /* 200 us */
#define WOKEN_SPIN_NS 20000u    /* 20 us */
/* A spinning worker yields its CPU this often (a system call of about a
 * microsecond when no other thread wants the CPU). */
#define SPIN_YIELD_NS 20000u

/* Rhythm: start times kept; the periods a rhythm may have; how long before
 * a due job a worker gets up (its wake-up latency, 40-130 us measured, with
 * room) and how long after it spins on; the most jitter a rhythm may have
 * (more makes the spin it costs longer than the wake-up it saves). */
#define RHYTHM 8u
#define RHYTHM_MIN_NS 500000u    /* 0.5 ms: shorter gaps are covered by the spin */
#define RHYTHM_MAX_NS 250000000u /* 250 ms */
#define ANTICIPATE_NS 150000u
#define OVERSTAY_NS 100000u
#define RHYTHM_JITTER_NS 250000u

/* The state word. */
#define GEN_MASK 0x7fffffffu
#define GEN(s) ((uint32_t)((s) >> 33) & GEN_MASK)
#define FINAL(s) ((unsigned)((s) >> 32) & 1u)
#define CANCELLED(s) ((unsigned)((s) >> 31) & 1u)
#define LANES(s) ((unsigned)((s) >> 16) & 0x7fffu)
#define LIMIT(s) ((unsigned)(s)&0xffffu)
#define PACK(gen, final, cancelled, lanes, limit)                                                        \
    (((uint64_t)((gen)&GEN_MASK) << 33) | ((uint64_t)((final) != 0) << 32) | ((uint64_t)((cancelled) != 0) << 31) | \
     ((uint64_t)(lanes) << 16) | (uint64_t)(limit))
/* A lane's cursor. */
#define CURSOR_GEN(c) ((uint32_t)((c) >> 32) & GEN_MASK)
#define CURSOR_TAKEN(c) ((uint32_t)(c))
#define CURSOR_PACK(gen, taken) (((uint64_t)((gen)&GEN_MASK) << 32) | (uint64_t)(taken))
#define SEATS_GEN(w) ((uint32_t)((w) >> 32) & GEN_MASK)
#define SEATS_PACK(gen, n) (((uint64_t)((gen)&GEN_MASK) << 32) | (uint64_t)(n))

typedef struct {
    struct ps_pool *pool;
    unsigned index;
} worker_arg;

struct ps_pool {
    ps_job_slot slots[MAX_JOBS];
    _Alignas(64) _Atomic int stop;
    _Atomic unsigned spin_ns;
    _Atomic unsigned callers;
    _Atomic unsigned posted;
    _Atomic unsigned awake;
    _Atomic unsigned parked;
    _Atomic unsigned sleepers;
    _Atomic int resizing;
    _Atomic int started;
    _Atomic unsigned planned; /* workers when started; UINT32_MAX: not yet known */
    _Atomic unsigned long wakeups; /* returns from a worker's wait (tests) */
    _Atomic unsigned long early;   /* waits a worker's timer ended (tests) */
    _Atomic uint64_t rhythm[RHYTHM];
    _Atomic unsigned rhythm_n;
    unsigned tokens;          /* under lock */
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_mutex_t admin;
    pthread_t threads[MAX_WORKERS];
    worker_arg args[MAX_WORKERS];
    unsigned nthreads;   /* running */
    unsigned configured; /* to start; UINT32_MAX: sized to the machine */
    /* A node's pool: its workers run on these CPUs only. Set before the
     * pool is published, read-only after. ncpus 0: the default pool, whose
     * workers run wherever the process may. */
    int node;
    unsigned ncpus;
    cpu_set_t cpus;
};

static ps_pool global = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .wake = PTHREAD_COND_INITIALIZER,
    .admin = PTHREAD_MUTEX_INITIALIZER,
    .configured = UINT32_MAX,
    .planned = UINT32_MAX,
    .spin_ns = DEFAULT_SPIN_NS,
    .node = -1,
};

ps_pool *ps_pool_default(void) { return &global; }

/* Per-node pools, made on first use and kept for the life of the process
 * (a pool's workers park when idle). Published with a release store under
 * node_lock; read with acquire. `configured` and spin settings copy the
 * default pool's at creation and follow the public controls after. */
static pthread_mutex_t node_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic(ps_pool *) node_pools[PS_NUMA_MAX_NODES];

ps_pool *ps_pool_for_node(int node) {
    if (node < 0 || node >= PS_NUMA_MAX_NODES) return &global;
    ps_pool *p = atomic_load_explicit(&node_pools[node], memory_order_acquire);
    if (p) return p;
    cpu_set_t cpus;
    /* A node none of whose CPUs this process may use has no pool of its own. */
    if (!ps_numa_node_cpus(node, &cpus)) return &global;
    pthread_mutex_lock(&node_lock);
    if (!(p = atomic_load_explicit(&node_pools[node], memory_order_relaxed)) && (p = calloc(1, sizeof *p))) {
        pthread_mutex_init(&p->lock, NULL);
        pthread_cond_init(&p->wake, NULL);
        pthread_mutex_init(&p->admin, NULL);
        pthread_mutex_lock(&global.admin);
        p->configured = global.configured;
        pthread_mutex_unlock(&global.admin);
        atomic_init(&p->planned, UINT32_MAX);
        atomic_init(&p->spin_ns, atomic_load_explicit(&global.spin_ns, memory_order_relaxed));
        p->node = node;
        p->cpus = cpus;
        p->ncpus = (unsigned)CPU_COUNT(&cpus);
        atomic_store_explicit(&node_pools[node], p, memory_order_release);
    }
    pthread_mutex_unlock(&node_lock);
    return p ? p : &global;
}

int ps_pool_node(const ps_pool *p) { return p->node; }

/* Calls fn on every pool made so far, the default one first. */
static void each_pool(void (*fn)(ps_pool *p, void *arg), void *arg) {
    fn(&global, arg);
    for (int i = 0; i < PS_NUMA_MAX_NODES; i++) {
        ps_pool *p = atomic_load_explicit(&node_pools[i], memory_order_acquire);
        if (p) fn(p, arg);
    }
}

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

/* ---- Claiming ------------------------------------------------------------------- */

/* Lane l's next block if it is open in `v`: 1 and *block, else 0. */
static int lane_next(const ps_job_slot *s, uint64_t v, unsigned l, uint64_t *cursor, unsigned *block) {
    uint64_t c = atomic_load_explicit(&s->lanes[l].cursor, memory_order_acquire);
    unsigned b = l + CURSOR_TAKEN(c) * LANES(v);
    *cursor = c;
    *block = b;
    return CURSOR_GEN(c) == GEN(v) && b < LIMIT(v);
}

/* Claims an open block of job `gen` in `s`: from lane `home` first, then
 * from the lanes after it. */
static int claim(ps_job_slot *s, uint32_t gen, unsigned home, unsigned *block) {
    uint64_t v = atomic_load_explicit(&s->state, memory_order_acquire);
    unsigned lanes = LANES(v);
    if (GEN(v) != gen || !lanes) return 0;
    for (unsigned d = 0; d < lanes; d++) {
        unsigned l = (home + d) % lanes;
        uint64_t c;
        while (lane_next(s, v, l, &c, block))
            if (atomic_compare_exchange_weak_explicit(&s->lanes[l].cursor, &c, c + 1, memory_order_acq_rel,
                                                      memory_order_acquire))
                return 1;
    }
    return 0;
}

/* Whether job `v` in `s` has a block open and unclaimed. */
static int blocks_open(const ps_job_slot *s, uint64_t v) {
    unsigned lanes = LANES(v), b;
    uint64_t c;
    if (!LIMIT(v)) return 0;
    for (unsigned l = 0; l < lanes; l++)
        if (lane_next(s, v, l, &c, &b)) return 1;
    return 0;
}

/* Runs a claimed block (unless the job was cancelled) and counts it done
 * in the lane of the thread that ran it. */
static void run_block(ps_job_slot *s, unsigned home, unsigned block) {
    if (!CANCELLED(atomic_load_explicit(&s->state, memory_order_acquire))) {
        ps_block_fn fn = atomic_load_explicit(&s->fn, memory_order_relaxed);
        fn(atomic_load_explicit(&s->arg, memory_order_relaxed), block);
    }
    atomic_fetch_add_explicit(&s->lanes[home].done, 1, memory_order_release);
}

/* Runs open blocks of job `gen` until none is left open: how many ran. */
static unsigned serve(ps_job_slot *s, uint32_t gen, unsigned home) {
    unsigned block, ran = 0;
    while (claim(s, gen, home, &block)) {
        run_block(s, home, block);
        ran++;
    }
    return ran;
}

/* Seats a worker in job `v` of `s`: 1 and its home lane, or 0 when the
 * job's seats are taken. */
static int take_seat(ps_job_slot *s, uint64_t v, unsigned index, unsigned *home) {
    uint32_t gen = GEN(v);
    unsigned helpers = LANES(v) > 1 ? LANES(v) - 1 : 1;
    if (atomic_load_explicit(&s->open_seating, memory_order_relaxed)) {
        *home = 1 + index % helpers;
        return 1;
    }
    uint64_t w = atomic_load_explicit(&s->seats, memory_order_acquire);
    for (;;) {
        if (SEATS_GEN(w) != gen || (uint32_t)w >= atomic_load_explicit(&s->max_seats, memory_order_relaxed)) return 0;
        if (atomic_compare_exchange_weak_explicit(&s->seats, &w, w + 1, memory_order_acq_rel, memory_order_acquire)) {
            *home = 1 + (uint32_t)w % helpers;
            return 1;
        }
    }
}

/* A job a worker could take part in now: open blocks and a free seat. */
static int seat_open(ps_job_slot *s, uint64_t v) {
    if (!blocks_open(s, v)) return 0;
    if (atomic_load_explicit(&s->open_seating, memory_order_relaxed)) return 1;
    uint64_t w = atomic_load_explicit(&s->seats, memory_order_acquire);
    return SEATS_GEN(w) == GEN(v) && (uint32_t)w < atomic_load_explicit(&s->max_seats, memory_order_relaxed);
}

/* ---- Workers -------------------------------------------------------------------- */

static int any_seat_open(ps_pool *p) {
    for (unsigned i = 0; i < MAX_JOBS; i++)
        if (seat_open(&p->slots[i], atomic_load_explicit(&p->slots[i].state, memory_order_seq_cst))) return 1;
    return 0;
}

/* ---- Rhythm ------------------------------------------------------------------- */

static void note_job(ps_pool *p, uint64_t at) {
    unsigned i = atomic_fetch_add_explicit(&p->rhythm_n, 1, memory_order_relaxed);
    atomic_store_explicit(&p->rhythm[i % RHYTHM], at, memory_order_relaxed);
}

/* When the next job is due (monotonic ns) if the last ones came in a
 * rhythm: m jobs a period (1-4), the last few periods (5 for one job a
 * period, else max(m, 3)) within the jitter allowed; 0 if they did not.
 * *jitter: the spread of those periods. */
static uint64_t next_job_due(ps_pool *p, uint64_t *jitter) {
    unsigned n = atomic_load_explicit(&p->rhythm_n, memory_order_relaxed);
    unsigned have = n < RHYTHM ? n : RHYTHM;
    uint64_t t[RHYTHM]; /* newest first */
    for (unsigned j = 0; j < have; j++) {
        t[j] = atomic_load_explicit(&p->rhythm[(n - 1 - j) % RHYTHM], memory_order_relaxed);
        /* Posters racing each other (or this read) leave times out of order:
         * no guess from those. */
        if (j && t[j] > t[j - 1]) return 0;
    }
    for (unsigned m = 1; m <= 4; m++) {
        unsigned k = m == 1 ? 5 : m < 3 ? 3 : m; /* periods compared */
        if (k - 1 + m >= have) break;
        uint64_t sum = 0, lo = UINT64_MAX, hi = 0;
        for (unsigned j = 0; j < k; j++) {
            uint64_t d = t[j] - t[j + m];
            sum += d;
            if (d < lo) lo = d;
            if (d > hi) hi = d;
        }
        uint64_t period = sum / k, spread = hi - lo;
        if (period < RHYTHM_MIN_NS || period > RHYTHM_MAX_NS || spread > RHYTHM_JITTER_NS || spread > period / 8)
            continue;
        /* The job after the newest is the one a period after the job m-1 before it. */
        *jitter = spread;
        return t[m - 1] + period;
    }
    return 0;
}

static struct timespec realtime_at(uint64_t monotonic_ns) {
    struct timespec rt;
    clock_gettime(CLOCK_REALTIME, &rt);
    uint64_t now = now_ns(), in = monotonic_ns > now ? monotonic_ns - now : 0;
    uint64_t ns = (uint64_t)rt.tv_nsec + in % 1000000000u;
    rt.tv_sec += (time_t)(in / 1000000000u + ns / 1000000000u);
    rt.tv_nsec = (long)(ns % 1000000000u);
    return rt;
}

/* ---- Parking ------------------------------------------------------------------- */

/* How park() ended: it did not sleep (a token or an open seat was there
 * already, or the pool is stopping), a token woke it, or its own timer did. */
enum { PARK_SKIPPED, PARK_WOKEN, PARK_TIMER };

/* Sleeps until granted a token (or stopped), or, given a time (monotonic
 * ns), until then at the latest. */
static int park(ps_pool *p, uint64_t wake_at) {
    int how = PARK_SKIPPED;
    pthread_mutex_lock(&p->lock);
    atomic_fetch_add_explicit(&p->sleepers, 1, memory_order_seq_cst);
    atomic_fetch_sub_explicit(&p->awake, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&p->parked, 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_seq_cst);
    /* A seat open now is taken without waiting (the poster may have looked
     * for sleepers before this one counted itself), and without a token:
     * the poster counted this worker as up, so a token left is for one
     * asleep, which taking it would leave asleep and the job a worker
     * short. Once asleep, a worker leaves only with a token or at its
     * time: one woken by a signal meant for a worker that was already up
     * goes back to sleep. */
    int stopping = atomic_load_explicit(&p->stop, memory_order_acquire);
    int seat_waiting = !stopping && any_seat_open(p);
    if (!stopping && !seat_waiting && !p->tokens) {
        struct timespec until = {0, 0};
        if (wake_at) until = realtime_at(wake_at);
        how = PARK_WOKEN;
        do {
            if (!wake_at) {
                pthread_cond_wait(&p->wake, &p->lock);
            } else if (pthread_cond_timedwait(&p->wake, &p->lock, &until) == ETIMEDOUT) {
                how = PARK_TIMER;
                break;
            }
            atomic_fetch_add_explicit(&p->wakeups, 1, memory_order_relaxed);
        } while (!atomic_load_explicit(&p->stop, memory_order_acquire) && !p->tokens);
        if (how == PARK_TIMER) atomic_fetch_add_explicit(&p->early, 1, memory_order_relaxed);
    }
    if (p->tokens && !seat_waiting) {
        p->tokens--;
        /* A few wake-ups spread as a tree: the poster made one system call;
         * each worker it woke passes on up to two of the tokens left, and
         * the rest sleep on (after a broadcast they are up already, and a
         * signal with no waiter does nothing). */
        unsigned others = atomic_load_explicit(&p->sleepers, memory_order_relaxed) - 1;
        unsigned pass = p->tokens < 2 ? p->tokens : 2;
        if (pass > others) pass = others;
        while (pass--) pthread_cond_signal(&p->wake);
    }
    atomic_fetch_sub_explicit(&p->parked, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&p->awake, 1, memory_order_relaxed);
    atomic_fetch_sub_explicit(&p->sleepers, 1, memory_order_seq_cst);
    pthread_mutex_unlock(&p->lock);
    return how;
}

/* From this many wake-ups one broadcast: the workers then start together,
 * where a tree of signals brings the last of 14 only after several hops
 * (each a wake-up latency), and a transfer after idle ran short of threads
 * for most of its time. Those woken without a token sleep again at once. */
#define BROADCAST_FROM 4u

/* Grants up to `n` parked workers a wake-up (for a job with `seated`
 * workers already): for a few, one signal now and the rest passed on by
 * the workers it wakes (park); for more, a broadcast. Returns how many
 * were granted. */
static unsigned wake(ps_pool *p, unsigned n, unsigned seated) {
    atomic_thread_fence(memory_order_seq_cst);
    if (!n || !atomic_load_explicit(&p->sleepers, memory_order_seq_cst)) return 0;
    /* The only job in progress: workers up now (spinning after the last
     * one, or up for a rhythm's next) take its seats, so fewer sleepers are
     * needed. One that is about to park sees the job (park rescans after
     * counting itself, the fences pair with this one). */
    if (atomic_load_explicit(&p->callers, memory_order_relaxed) <= 1) {
        unsigned up = atomic_load_explicit(&p->awake, memory_order_seq_cst);
        unsigned idle = up > seated ? up - seated : 0;
        n = n > idle ? n - idle : 0;
        if (!n) return 0;
    }
    pthread_mutex_lock(&p->lock);
    unsigned sleeping = atomic_load_explicit(&p->sleepers, memory_order_relaxed);
    unsigned spare = sleeping > p->tokens ? sleeping - p->tokens : 0;
    if (n > spare) n = spare;
    p->tokens += n;
    if (n >= BROADCAST_FROM)
        pthread_cond_broadcast(&p->wake);
    else if (n)
        pthread_cond_signal(&p->wake);
    pthread_mutex_unlock(&p->lock);
    return n;
}

static _Thread_local unsigned thread_index;
static _Thread_local unsigned last_seats, last_woken;
static _Thread_local size_t last_blocks;

unsigned ps_pool_last_seats(void) { return last_seats; }
size_t ps_pool_last_blocks(void) { return last_blocks; }
unsigned ps_pool_last_woken(void) { return last_woken; }

unsigned long ps_pool_wakeups(ps_pool *p) { return atomic_load_explicit(&p->wakeups, memory_order_relaxed); }

unsigned long ps_pool_early_wakeups(ps_pool *p) { return atomic_load_explicit(&p->early, memory_order_relaxed); }

unsigned ps_pool_pending_wakeups(ps_pool *p) {
    pthread_mutex_lock(&p->lock);
    unsigned n = p->tokens;
    pthread_mutex_unlock(&p->lock);
    return n;
}

unsigned ps_pool_thread_index(void) { return thread_index; }

static void *worker_main(void *arg) {
    worker_arg *a = arg;
    ps_pool *p = a->pool;
    thread_index = a->index + 1;
#if defined(PR_SET_TIMERSLACK)
    /* Timed wake-ups (a rhythm's next job) land within a microsecond of
     * their time, not the default 50. */
    prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
#endif
    uint32_t seated[MAX_JOBS]; /* the generation seated in per slot; 0: none (generations start at 1) */
    unsigned home[MAX_JOBS];   /* the lane claimed from first, where seated */
    memset(seated, 0, sizeof seated);
    memset(home, 0, sizeof home);
    uint64_t idle_since = now_ns();
    /* How long to spin before parking: spin_ns after running blocks (the
     * next job of a loop of transfers is near), only WOKEN_SPIN_NS after a
     * wake-up that brought no block (the job's seats went to others). */
    uint64_t patience = atomic_load_explicit(&p->spin_ns, memory_order_relaxed);
    unsigned polls = 0;
    uint64_t last_yield = idle_since;
    int helped = 0; /* ran blocks since it last parked */
    while (!atomic_load_explicit(&p->stop, memory_order_acquire)) {
        unsigned ran = 0;
        int live = 0;
        for (unsigned j = 0; j < MAX_JOBS; j++) {
            unsigned i = (j + a->index) % MAX_JOBS;
            ps_job_slot *s = &p->slots[i];
            uint64_t v = atomic_load_explicit(&s->state, memory_order_acquire);
            uint32_t gen = GEN(v);
            if (LIMIT(v) && (seated[i] == gen || (blocks_open(s, v) && take_seat(s, v, a->index, &home[i])))) {
                seated[i] = gen;
                ran += serve(s, gen, home[i]);
                v = atomic_load_explicit(&s->state, memory_order_acquire);
            }
            /* Seated in a job that may still open blocks: stay awake for it. */
            if (seated[i] && seated[i] == GEN(v) && LIMIT(v) && !(FINAL(v) && !blocks_open(s, v))) live = 1;
        }
        if (ran) {
            idle_since = now_ns();
            patience = atomic_load_explicit(&p->spin_ns, memory_order_relaxed);
            polls = 0;
            helped = 1;
            continue;
        }
        /* Reading the clock every poll would slow the poll; every 64th is enough. */
        if (++polls & 63u) {
            cpu_relax();
            continue;
        }
        uint64_t now = now_ns();
        /* A spinning worker holds no block, but it may hold the CPU of a
         * thread of this process that does, or that opens the blocks (the
         * kernel may wake a worker onto its waker's CPU): that thread would
         * wait for the scheduler's tick. Now and then give the CPU up. With
         * 12 of 16 CPUs busy on the H200 machine, 27 of 147 traced 64 MiB
         * downloads ran their 3 threads on 2 CPUs, 23 had a block held for
         * 3 ms or more (4 ms is one tick), and the 90th percentile was
         * 6.6 ms; with the yield no block was held that long, and the 90th
         * percentile was 2.6 ms. */
        if (now - last_yield >= SPIN_YIELD_NS) {
            sched_yield();
            last_yield = now;
        }
        if (live) continue;
        uint64_t spin_end = idle_since + patience, jitter = 0;
        /* A helper of jobs that come in a rhythm sleeps through the gap to
         * the next one, if its spin would not reach it, and is up and
         * spinning from just before the job is due until just after. */
        /* Not while a job is in progress: a download's job is posted before
         * its first chunk lands, and the job after it, a period away, sent
         * its workers to sleep just before its blocks opened (64 MiB
         * downloads in fresh processes: 0.80 of the floor, 0.88 with no
         * rhythm at all, on the H200 machine). */
        uint64_t due = helped && atomic_load_explicit(&p->spin_ns, memory_order_relaxed) &&
                               !atomic_load_explicit(&p->callers, memory_order_relaxed)
                           ? next_job_due(p, &jitter)
                           : 0;
        /* A late job costs a wake-up, an early spin only CPU: the window
         * reaches further past the time due than before it. */
        uint64_t wake_at = due ? due - ANTICIPATE_NS - jitter : 0, stay = due + OVERSTAY_NS + 2 * jitter;
        if (due && now >= wake_at && now < stay) {
            cpu_relax();
            continue;
        }
        if (!(due && now < wake_at && spin_end < wake_at)) {
            if (now < spin_end) {
                cpu_relax();
                continue;
            }
            wake_at = 0; /* the spin is over and no job is due: sleep until woken */
        }
        int how = park(p, wake_at);
        idle_since = now_ns();
        if (how == PARK_TIMER) {
            patience = stay > idle_since ? stay - idle_since : 0;
        } else {
            patience = atomic_load_explicit(&p->spin_ns, memory_order_relaxed);
            if (patience > WOKEN_SPIN_NS) patience = WOKEN_SPIN_NS;
        }
        /* A worker that did not sleep (a seat was open, or it took a token
         * left over) still knows the rhythm. */
        if (how != PARK_SKIPPED) helped = 0;
    }
    atomic_fetch_sub_explicit(&p->awake, 1, memory_order_relaxed);
    return NULL;
}

/* CPUs the pool's threads may use: the process's, or its node's. */
static unsigned pool_cpus(const ps_pool *p) {
    unsigned cpus = ps_cpus_usable();
    return p->ncpus && p->ncpus < cpus ? p->ncpus : cpus;
}

/* One worker per CPU this pool may use, less one for the calling thread,
 * and on machines of 8 CPUs or more one more for the driver's own threads
 * and the rest of the program. */
static unsigned machine_workers(const ps_pool *p) {
    unsigned cpus = pool_cpus(p);
    unsigned workers = cpus > 1 ? cpus - 1 : 0;
    if (cpus >= 8) workers--;
    return workers > MAX_WORKERS ? MAX_WORKERS : workers;
}

/* admin held, no job posted. */
static void start_locked(ps_pool *p) {
    unsigned want = p->configured == UINT32_MAX ? machine_workers(p) : p->configured;
    pthread_attr_t attr, *use = NULL;
    /* A node's workers start on its CPUs: the pages they first touch, and
     * the memory they stream, are local. */
    if (p->ncpus && pthread_attr_init(&attr) == 0) {
        use = &attr;
        if (pthread_attr_setaffinity_np(&attr, sizeof p->cpus, &p->cpus)) {
            pthread_attr_destroy(&attr);
            use = NULL;
        }
    }
    atomic_store_explicit(&p->stop, 0, memory_order_release);
    p->nthreads = 0;
    for (unsigned i = 0; i < want; i++) {
        p->args[i] = (worker_arg){p, i};
        atomic_fetch_add_explicit(&p->awake, 1, memory_order_relaxed);
        if (pthread_create(&p->threads[i], use, worker_main, &p->args[i]) != 0) {
            atomic_fetch_sub_explicit(&p->awake, 1, memory_order_relaxed);
            break;
        }
        p->nthreads++;
        /* Named before the first job can see it, for top -H, gdb, perf and
         * /proc: whose threads these are. */
        char name[32];
        if (p->node >= 0) snprintf(name, sizeof name, "pinstage%d-%u", p->node, i + 1);
        else snprintf(name, sizeof name, "pinstage-%u", i + 1);
        name[15] = '\0'; /* the kernel keeps 15 characters */
        pthread_setname_np(p->threads[i], name);
    }
    if (use) pthread_attr_destroy(use);
    atomic_store_explicit(&p->started, 1, memory_order_release);
}

/* admin held, no job posted. */
static void stop_locked(ps_pool *p) {
    if (!atomic_load_explicit(&p->started, memory_order_acquire)) return;
    atomic_store_explicit(&p->stop, 1, memory_order_seq_cst);
    pthread_mutex_lock(&p->lock);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    for (unsigned i = 0; i < p->nthreads; i++) pthread_join(p->threads[i], NULL);
    p->nthreads = 0;
    p->tokens = 0;
    atomic_store_explicit(&p->started, 0, memory_order_release);
}

/* ---- Jobs --------------------------------------------------------------------- */

/* Workers a new job may have: what it asks, no more than run, and no more
 * than the CPUs left free by other threads and by the posters of every job
 * in progress, shared among those posters. */
static unsigned seats_for(ps_pool *p, unsigned helpers) {
    unsigned workers = ps_pool_workers(p);
    if (helpers > workers) helpers = workers;
    if (!helpers) return 0;
    unsigned callers = atomic_load_explicit(&p->callers, memory_order_relaxed);
    unsigned awake = atomic_load_explicit(&p->awake, memory_order_relaxed);
    if (!callers) callers = 1;
    /* Other threads' load is known for the machine only: a node's pool
     * counts its share of it. */
    unsigned usable = ps_cpus_usable(), cpus = pool_cpus(p);
    unsigned long busy = ps_cpus_busy_elsewhere(callers + awake);
    if (cpus < usable) busy = busy * cpus / usable;
    /* A node's pool: a poster running on another node's CPU does not take
     * one of this node's. */
    long local_callers = callers;
    if (p->ncpus) {
        int cpu = sched_getcpu();
        if (cpu < 0 || cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &p->cpus)) local_callers--;
    }
    /* With every CPU taken, a thread of the driver or the kernel that wakes
     * takes one from a worker, which then holds its block for a scheduler
     * time slice and the transfer waits it out. Beside other busy threads
     * one CPU stays free for them: on the H200 machine, with 12 of 16 CPUs
     * busy, the 90th percentile of 4.7 MiB downloads given 3 workers was
     * 2.1 and 3.7 ms in two runs, given 2 workers 0.38 and 0.39 ms (medians
     * 286-290 against 299-301 us). */
    long spare = busy > 0;
    long free_cpus = (long)cpus - (long)busy - local_callers - spare;
    long share = free_cpus > 0 ? free_cpus / (long)callers : 0;
    return share < (long)helpers ? (unsigned)share : helpers;
}

/* A slot for a new job, or NULL (resizing, no workers, all slots in use). */
static ps_job_slot *take_slot(ps_pool *p) {
    atomic_fetch_add_explicit(&p->posted, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&p->resizing, memory_order_seq_cst)) goto none;
    if (!atomic_load_explicit(&p->started, memory_order_acquire)) {
        pthread_mutex_lock(&p->admin);
        if (!atomic_load_explicit(&p->started, memory_order_relaxed)) start_locked(p);
        pthread_mutex_unlock(&p->admin);
    }
    for (unsigned i = 0; i < MAX_JOBS; i++) {
        int expected = 0;
        if (atomic_compare_exchange_strong_explicit(&p->slots[i].owned, &expected, 1, memory_order_acquire,
                                                    memory_order_relaxed))
            return &p->slots[i];
    }
none:
    atomic_fetch_sub_explicit(&p->posted, 1, memory_order_seq_cst);
    return NULL;
}

void ps_job_enter(ps_pool *p, ps_job *job, unsigned helpers) {
    job->pool = p;
    atomic_fetch_add_explicit(&p->callers, 1, memory_order_relaxed);
    job->seats = seats_for(p, helpers);
}

/* The lanes of a job with `seats` workers: one per thread. */
static unsigned lanes_for(unsigned seats) { return seats + 1 < PS_JOB_LANES ? seats + 1 : PS_JOB_LANES; }

void ps_job_post(ps_job *job, size_t count, size_t limit, ps_block_fn fn, void *arg) {
    ps_pool *p = job->pool;
    if (count > PS_JOB_MAX_BLOCKS) count = PS_JOB_MAX_BLOCKS;
    if (limit > count) limit = count;
    job->count = count;
    if (count < 2) job->seats = 0;
    job->slot = job->seats ? take_slot(p) : NULL;
    if (!job->slot) {
        job->seats = 0;
        job->slot = &job->local;
        atomic_init(&job->local.state, 0);
    }
    last_seats = job->seats;
    last_blocks = count;
    last_woken = 0;
    ps_job_slot *s = job->slot;
    unsigned lanes = lanes_for(job->seats);
    uint32_t gen = (GEN(atomic_load_explicit(&s->state, memory_order_relaxed)) + 1) & GEN_MASK;
    if (!gen) gen = 1; /* 0 means "not seated" to the workers */
    atomic_store_explicit(&s->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&s->arg, arg, memory_order_relaxed);
    atomic_store_explicit(&s->max_seats, job->seats, memory_order_relaxed);
    atomic_store_explicit(&s->open_seating, job->seats && job->seats >= ps_pool_workers(p), memory_order_relaxed);
    for (unsigned l = 0; l < lanes; l++) {
        atomic_store_explicit(&s->lanes[l].done, 0, memory_order_relaxed);
        atomic_store_explicit(&s->lanes[l].cursor, CURSOR_PACK(gen, 0), memory_order_release);
    }
    atomic_store_explicit(&s->seats, SEATS_PACK(gen, 0), memory_order_release);
    atomic_store_explicit(&s->state, PACK(gen, limit == count, 0, lanes, limit), memory_order_seq_cst);
    if (s == &job->local) return;
    note_job(p, now_ns());
    if (limit) last_woken = wake(p, job->seats, 0);
}

void ps_job_start(ps_pool *p, ps_job *job, size_t count, size_t limit, unsigned helpers, ps_block_fn fn,
                  void *arg) {
    ps_job_enter(p, job, count > 1 ? helpers : 0);
    ps_job_post(job, count, limit, fn, arg);
}

void ps_job_open(ps_job *job, size_t limit) {
    ps_job_slot *s = job->slot;
    if (limit > job->count) limit = job->count;
    uint64_t v = atomic_load_explicit(&s->state, memory_order_relaxed), to;
    do {
        if (LIMIT(v) >= limit || FINAL(v)) return;
        to = PACK(GEN(v), limit == job->count, 0, LANES(v), limit);
    } while (!atomic_compare_exchange_weak_explicit(&s->state, &v, to, memory_order_seq_cst, memory_order_relaxed));
    /* Seated workers are spinning for it; parked ones wake if seats are free
     * (where none is taken, every worker the job may have). */
    if (s != &job->local) {
        uint64_t w = atomic_load_explicit(&s->seats, memory_order_relaxed);
        if ((uint32_t)w < job->seats) last_woken += wake(job->pool, job->seats - (uint32_t)w, (uint32_t)w);
    }
}

int ps_job_help(ps_job *job) {
    unsigned block;
    ps_job_slot *s = job->slot;
    if (!claim(s, GEN(atomic_load_explicit(&s->state, memory_order_relaxed)), 0, &block)) return 0;
    run_block(s, 0, block);
    return 1;
}

static size_t done_in(ps_job_slot *s, unsigned lanes) {
    size_t done = 0;
    for (unsigned l = 0; l < lanes; l++) done += atomic_load_explicit(&s->lanes[l].done, memory_order_acquire);
    return done;
}

size_t ps_job_done(ps_job *job) {
    ps_job_slot *s = job->slot;
    return done_in(s, LANES(atomic_load_explicit(&s->state, memory_order_relaxed)));
}

void ps_job_cancel(ps_job *job) {
    ps_job_slot *s = job->slot;
    uint64_t v = atomic_load_explicit(&s->state, memory_order_relaxed), to;
    do {
        to = PACK(GEN(v), 1, 1, LANES(v), LIMIT(v));
    } while (!atomic_compare_exchange_weak_explicit(&s->state, &v, to, memory_order_seq_cst, memory_order_relaxed));
}

void ps_job_finish(ps_job *job) {
    ps_pool *p = job->pool;
    ps_job_slot *s = job->slot;
    ps_job_open(job, job->count);
    while (ps_job_help(job)) {
    }
    /* Every open block is claimed now (after a cancel, the rest were
     * counted without running); wait for those other threads are running.
     * A worker that lost its CPU mid-block gets it back sooner if this
     * thread yields now and then. */
    uint64_t v = atomic_load_explicit(&s->state, memory_order_relaxed);
    for (unsigned spins = 0; done_in(s, LANES(v)) < LIMIT(v); spins++) {
        if (spins % 4096 == 4095)
            sched_yield();
        else
            cpu_relax();
    }
    /* Finished: no worker counts itself live in it any more. */
    atomic_store_explicit(&s->state, PACK(GEN(v), 1, 0, LANES(v), 0), memory_order_seq_cst);
    if (s != &job->local) {
        atomic_store_explicit(&s->owned, 0, memory_order_release);
        atomic_fetch_sub_explicit(&p->posted, 1, memory_order_seq_cst);
    }
    atomic_fetch_sub_explicit(&p->callers, 1, memory_order_relaxed);
}

void ps_pool_run(ps_pool *p, size_t count, unsigned helpers, ps_block_fn fn, void *arg) {
    ps_job job;
    ps_job_start(p, &job, count, count, helpers, fn, arg);
    ps_job_finish(&job);
}

unsigned ps_pool_callers(ps_pool *p) { return atomic_load_explicit(&p->callers, memory_order_relaxed); }

unsigned ps_pool_workers(ps_pool *p) {
    /* On every transfer's path: no lock. `planned` follows `configured`. */
    unsigned n = atomic_load_explicit(&p->planned, memory_order_relaxed);
    if (n != UINT32_MAX) return n;
    pthread_mutex_lock(&p->admin);
    n = p->configured == UINT32_MAX ? machine_workers(p) : p->configured;
    atomic_store_explicit(&p->planned, n, memory_order_relaxed);
    pthread_mutex_unlock(&p->admin);
    return n;
}

/* ---- Public control ------------------------------------------------------------ */

/* Blocks new posts and waits until no job is posted; then admin is taken. */
static void begin_resize(ps_pool *p) {
    atomic_store_explicit(&p->resizing, 1, memory_order_seq_cst);
    while (atomic_load_explicit(&p->posted, memory_order_seq_cst)) {
        struct timespec ts = {0, 50000};
        nanosleep(&ts, NULL);
    }
    pthread_mutex_lock(&p->admin);
}

static void end_resize(ps_pool *p) {
    pthread_mutex_unlock(&p->admin);
    atomic_store_explicit(&p->resizing, 0, memory_order_seq_cst);
}

static void set_threads(ps_pool *p, void *arg) {
    unsigned workers = *(const unsigned *)arg;
    begin_resize(p);
    stop_locked(p);
    p->configured = workers == PINSTAGE_POOL_AUTO ? UINT32_MAX : workers;
    atomic_store_explicit(&p->planned, UINT32_MAX, memory_order_relaxed);
    end_resize(p);
}

pinstage_status pinstage_pool_set_threads(unsigned workers) {
    if (workers != PINSTAGE_POOL_AUTO && workers > MAX_WORKERS)
        return ps_fail(PINSTAGE_ERROR_INVALID_VALUE,
                       "pinstage_pool_set_threads: workers=%u; at most %u (or PINSTAGE_POOL_AUTO)", workers,
                       MAX_WORKERS);
    /* node_lock: a pool made meanwhile copies the new setting or gets it here. */
    pthread_mutex_lock(&node_lock);
    each_pool(set_threads, &workers);
    pthread_mutex_unlock(&node_lock);
    return PINSTAGE_SUCCESS;
}

static void shutdown_pool(ps_pool *p, void *arg) {
    (void)arg;
    begin_resize(p);
    stop_locked(p);
    end_resize(p);
}

void pinstage_pool_shutdown(void) { each_pool(shutdown_pool, NULL); }

static void set_spin(ps_pool *p, void *arg) {
    atomic_store_explicit(&p->spin_ns, *(const unsigned *)arg, memory_order_relaxed);
}

void pinstage_pool_set_spin_us(unsigned spin_us) {
    unsigned ns = spin_us > 1000000u ? 1000000000u : spin_us * 1000u;
    pthread_mutex_lock(&node_lock);
    each_pool(set_spin, &ns);
    pthread_mutex_unlock(&node_lock);
}

static void add_info(ps_pool *p, void *arg) {
    pinstage_pool_info *info = arg;
    pthread_mutex_lock(&p->admin);
    info->workers += p->configured == UINT32_MAX ? machine_workers(p) : p->configured;
    info->running += atomic_load_explicit(&p->started, memory_order_relaxed) ? p->nthreads : 0;
    pthread_mutex_unlock(&p->admin);
    info->parked += atomic_load_explicit(&p->parked, memory_order_relaxed);
    info->pools += p != &global;
}

void pinstage_pool_get_info(pinstage_pool_info *info) {
    if (!info) return;
    memset(info, 0, sizeof *info);
    each_pool(add_info, info);
    info->spin_us = atomic_load_explicit(&global.spin_ns, memory_order_relaxed) / 1000u;
}

/* Workers are joined at exit, and a child of fork() has none of its
 * parent's threads: it starts its own on first use. */
static void stop_at_exit(ps_pool *p, void *arg) {
    (void)arg;
    atomic_store_explicit(&p->resizing, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&p->posted, memory_order_seq_cst)) return; /* a transfer is running */
    pthread_mutex_lock(&p->admin);
    stop_locked(p);
    pthread_mutex_unlock(&p->admin);
    atomic_store_explicit(&p->resizing, 0, memory_order_seq_cst);
}

__attribute__((destructor)) static void pool_at_exit(void) { each_pool(stop_at_exit, NULL); }

static void lock_admin(ps_pool *p, void *arg) {
    (void)arg;
    pthread_mutex_lock(&p->admin);
}

static void unlock_admin(ps_pool *p, void *arg) {
    (void)arg;
    pthread_mutex_unlock(&p->admin);
}

static void before_fork(void) {
    pthread_mutex_lock(&node_lock);
    each_pool(lock_admin, NULL);
}

static void after_fork_parent(void) {
    each_pool(unlock_admin, NULL);
    pthread_mutex_unlock(&node_lock);
}

static void reset_in_child(ps_pool *p, void *arg) {
    (void)arg;
    /* The parent's jobs and workers do not exist here. */
    for (unsigned i = 0; i < MAX_JOBS; i++) {
        ps_job_slot *s = &p->slots[i];
        uint64_t v = atomic_load(&s->state);
        atomic_store(&s->state, PACK(GEN(v), 1, 0, 0, 0));
        atomic_store(&s->owned, 0);
    }
    atomic_store(&p->started, 0);
    p->nthreads = 0;
    p->tokens = 0;
    atomic_store(&p->callers, 0);
    atomic_store(&p->posted, 0);
    atomic_store(&p->awake, 0);
    atomic_store(&p->sleepers, 0);
    atomic_store(&p->parked, 0);
    atomic_store(&p->resizing, 0);
    atomic_store(&p->rhythm_n, 0);
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_mutex_unlock(&p->admin);
}

static void after_fork_child(void) {
    each_pool(reset_in_child, NULL);
    pthread_mutex_init(&node_lock, NULL);
}

__attribute__((constructor)) static void pool_register_fork(void) {
    pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}
