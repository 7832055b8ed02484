/* SPDX-License-Identifier: MIT */
/* PINSTAGE_TRACE=FILE: the engine's timeline in memory, written at exit. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "pool.h"
#include "trace.h"

#define MAX_TRANSFERS 512u
#define MAX_CHUNKS 32768u
#define MAX_BLOCKS 262144u

typedef struct {
    int dir;
    unsigned chunks, seats;
    size_t bytes;
    uint64_t begin, end;
} transfer_rec;

typedef struct {
    uint32_t id;
    unsigned chunk;
    int what;
    uint64_t at;
} chunk_rec;

typedef struct {
    uint32_t id;
    unsigned chunk, thread;
    int cpu;
    uint64_t start, end;
} block_rec;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static const char *path;
static transfer_rec *transfers;
static chunk_rec *chunks;
static block_rec *blocks;
static _Atomic unsigned ntransfers, nchunks, nblocks;

uint64_t ps_trace_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void write_trace(void) {
    FILE *f = fopen(path, "w");
    if (!f) return;
    unsigned nt = atomic_load(&ntransfers), nc = atomic_load(&nchunks), nb = atomic_load(&nblocks);
    if (nt > MAX_TRANSFERS) nt = MAX_TRANSFERS;
    if (nc > MAX_CHUNKS) nc = MAX_CHUNKS;
    if (nb > MAX_BLOCKS) nb = MAX_BLOCKS;
    fprintf(f, "# pinstage trace 1: T id dir bytes chunks seats begin_ns end_ns | C id chunk what at_ns "
               "(0 opened 1 copied 2 enqueued 3 landed) | B id chunk thread cpu start_ns end_ns\n");
    for (unsigned i = 0; i < nt; i++)
        fprintf(f, "T %u %s %zu %u %u %llu %llu\n", i + 1, transfers[i].dir ? "d2h" : "h2d", transfers[i].bytes,
                transfers[i].chunks, transfers[i].seats, (unsigned long long)transfers[i].begin,
                (unsigned long long)transfers[i].end);
    for (unsigned i = 0; i < nc; i++)
        fprintf(f, "C %u %u %d %llu\n", chunks[i].id, chunks[i].chunk, chunks[i].what,
                (unsigned long long)chunks[i].at);
    for (unsigned i = 0; i < nb; i++)
        fprintf(f, "B %u %u %u %d %llu %llu\n", blocks[i].id, blocks[i].chunk, blocks[i].thread, blocks[i].cpu,
                (unsigned long long)blocks[i].start, (unsigned long long)blocks[i].end);
    fclose(f);
}

static void setup(void) {
    path = getenv("PINSTAGE_TRACE");
    if (!path || !*path) {
        path = NULL;
        return;
    }
    transfers = calloc(MAX_TRANSFERS, sizeof *transfers);
    chunks = calloc(MAX_CHUNKS, sizeof *chunks);
    blocks = calloc(MAX_BLOCKS, sizeof *blocks);
    if (!transfers || !chunks || !blocks) {
        path = NULL;
        return;
    }
    atexit(write_trace);
}

uint32_t ps_trace_begin(int dir, size_t bytes, unsigned nchunk) {
    pthread_once(&once, setup);
    if (!path) return 0;
    unsigned i = atomic_fetch_add(&ntransfers, 1);
    if (i >= MAX_TRANSFERS) return 0;
    transfers[i] = (transfer_rec){dir, nchunk, 0, bytes, ps_trace_now(), 0};
    return i + 1;
}

void ps_trace_seats(uint32_t id, unsigned seats) {
    if (id) transfers[id - 1].seats = seats;
}

void ps_trace_chunk(uint32_t id, unsigned chunk, int what) {
    if (!id) return;
    unsigned i = atomic_fetch_add(&nchunks, 1);
    if (i < MAX_CHUNKS) chunks[i] = (chunk_rec){id, chunk, what, ps_trace_now()};
}

void ps_trace_block(uint32_t id, unsigned chunk, uint64_t start, uint64_t end) {
    if (!id) return;
    unsigned i = atomic_fetch_add(&nblocks, 1);
    if (i < MAX_BLOCKS) blocks[i] = (block_rec){id, chunk, ps_pool_thread_index(), sched_getcpu(), start, end};
}

void ps_trace_end(uint32_t id) {
    if (id) transfers[id - 1].end = ps_trace_now();
}
