/* SPDX-License-Identifier: MIT */
/* Where the CPU of concurrent transfers goes: N threads, each with its own buffer, stream, source
 * and device memory, move BYTES back to back for SECS; the process's CPU time per GB moved, split
 * by thread: the callers (named psx-caller), the pool's workers (pinstage-*), and the rest (the
 * driver's threads and the main thread). The conditions run of 87c99b0 on the H200 had 64 MiB
 * uploads from 4 threads at 278 ms of CPU per GB against the pageable path's 112 (44.4 GB/s
 * together: 12.4 CPUs busy on average) and 4.7 MiB uploads from 8 threads at 277 against 82;
 * 4 threads copying with streaming stores moved 65.5 GB/s on an H100 (pipe-probe). Which threads
 * hold the CPU decides what to change.
 *
 *   gcc -O2 -pthread -Iinclude concurrent-cpu.c -Lbuild -lpinstage -o concurrent-cpu
 *   concurrent-cpu THREADS BYTES h2d|d2h SECS [LABEL]
 *
 * Environment: PSX_ROUTE=pageable|engine (a fixed profile on every buffer; unset: the built-in
 * profile and adaptation, as pinstage_buffer_upload has), PSX_POOL=N (pinstage_pool_set_threads),
 * PSX_SPIN=US (pinstage_pool_set_spin_us). Warm-up: 0.3 s of transfers on every thread first, so
 * the governor and adaptation have settled as far as they do in the conditions' 0.6 s.
 * One line: aggregate GB/s, the slowest thread's GB/s, CPU ms per GB (all, callers, workers,
 * rest), CPUs busy on average, the share of calls the pageable route took, and the threads the
 * governor gives the class now (0: not governed). CPU from /proc/self/task/TID/schedstat (ns). */
#define _GNU_SOURCE
#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pinstage.h"

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static size_t bytes;
static int d2h;
static double secs;
static pthread_barrier_t ready, warmed;
static _Atomic int go;
static double measure_from, measure_to;

typedef struct {
    size_t moved;
    uint64_t pageable, calls;
    int failed;
} mover;

static pinstage_status move(pinstage_buffer *b, unsigned char *h, pinstage_devbuf *dv, CUstream st) {
    return d2h ? pinstage_buffer_download(b, h, bytes, dv, st) : pinstage_buffer_upload(b, dv, h, bytes, st);
}

static void *run(void *arg) {
    mover *m = arg;
    pthread_setname_np(pthread_self(), "psx-caller");
    CUstream st;
    pinstage_buffer *b;
    pinstage_devbuf *dv;
    unsigned char *h = malloc(bytes);
    if (!h || pinstage_context_init(0) || pinstage_stream_create(&st, PINSTAGE_STREAM_NON_BLOCKING) || pinstage_buffer_create(&b) ||
        pinstage_devbuf_alloc_u8(&dv, bytes)) {
        fprintf(stderr, "setup: %s\n", pinstage_last_error_message());
        exit(1);
    }
    memset(h, 3, bytes);
    const char *route = getenv("PSX_ROUTE");
    if (route) {
        pinstage_profile *f;
        int r = !strcmp(route, "pageable") ? PINSTAGE_ROUTE_PAGEABLE : PINSTAGE_ROUTE_ENGINE;
        if (pinstage_profile_fixed(&f, r, 0, 0) || pinstage_buffer_set_profile(b, f)) exit(1);
        pinstage_profile_free(f);
    }
    pthread_barrier_wait(&ready);
    while (!atomic_load(&go)) {
    }
    /* Warm-up until measure_from, then count what lands inside the window. */
    while (now_s() < measure_from)
        if (move(b, h, dv, st)) m->failed = 1;
    pinstage_stats s0, s1;
    pinstage_buffer_stats(b, &s0);
    pthread_barrier_wait(&warmed);
    while (now_s() < measure_to) {
        if (move(b, h, dv, st)) {
            m->failed = 1;
            break;
        }
        m->moved += bytes;
    }
    pinstage_buffer_stats(b, &s1);
    m->pageable = s1.pageable_transfers - s0.pageable_transfers;
    m->calls = s1.pageable_transfers + s1.staged_transfers - s0.pageable_transfers - s0.staged_transfers;
    pthread_barrier_wait(&warmed);
    pthread_barrier_wait(&warmed); /* main has read every thread's CPU time */
    pinstage_buffer_free(b);
    pinstage_devbuf_free(dv);
    free(h);
    return NULL;
}

/* CPU ns so far of the process's threads, by kind: 0 callers, 1 workers, 2 the rest. Threads
 * that ended are not counted: none ends inside the window (the callers wait on a barrier). */
static void cpu_by_kind(double ns[3]) {
    ns[0] = ns[1] = ns[2] = 0;
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[300], comm[64] = "";
        unsigned long long run = 0;
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (f) {
            if (!fgets(comm, sizeof comm, f)) comm[0] = 0;
            fclose(f);
        }
        snprintf(path, sizeof path, "/proc/self/task/%s/schedstat", e->d_name);
        if ((f = fopen(path, "r"))) {
            if (fscanf(f, "%llu", &run) != 1) run = 0;
            fclose(f);
        }
        int kind = !strncmp(comm, "psx-caller", 10) ? 0 : !strncmp(comm, "pinstage", 8) ? 1 : 2;
        ns[kind] += (double)run;
    }
    if (d) closedir(d);
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: concurrent-cpu THREADS BYTES h2d|d2h SECS [LABEL]\n");
        return 2;
    }
    unsigned nt = (unsigned)atoi(argv[1]);
    bytes = strtoull(argv[2], 0, 0);
    d2h = !strcmp(argv[3], "d2h");
    secs = atof(argv[4]);
    const char *label = argc > 5 ? argv[5] : "-";
    if (nt < 1 || nt > 64 || !bytes || secs <= 0) return 2;
    if (pinstage_context_init(0)) {
        fprintf(stderr, "context: %s\n", pinstage_last_error_message());
        return 1;
    }
    if (getenv("PSX_POOL") && pinstage_pool_set_threads((unsigned)atoi(getenv("PSX_POOL")))) return 1;
    if (getenv("PSX_SPIN")) pinstage_pool_set_spin_us((unsigned)atoi(getenv("PSX_SPIN")));
    pthread_t t[64];
    mover m[64];
    memset(m, 0, sizeof m);
    pthread_barrier_init(&ready, NULL, nt + 1);
    pthread_barrier_init(&warmed, NULL, nt + 1);
    for (unsigned i = 0; i < nt; i++) pthread_create(&t[i], NULL, run, &m[i]);
    pthread_barrier_wait(&ready);
    measure_from = now_s() + 0.3;
    measure_to = measure_from + 0.05 + secs; /* the window opens once every thread has warmed */
    atomic_store(&go, 1);
    pthread_barrier_wait(&warmed);
    double before[3], after[3], t0 = now_s();
    cpu_by_kind(before);
    pthread_barrier_wait(&warmed); /* every thread has left the window */
    double wall = now_s() - t0;
    cpu_by_kind(after);
    pthread_barrier_wait(&warmed);
    double moved = 0, least = -1;
    uint64_t pageable = 0, calls = 0;
    for (unsigned i = 0; i < nt; i++) {
        pthread_join(t[i], NULL);
        if (m[i].failed) {
            fprintf(stderr, "a transfer failed: %s\n", pinstage_last_error_message());
            return 1;
        }
        moved += (double)m[i].moved;
        pageable += m[i].pageable;
        calls += m[i].calls;
        if (least < 0 || (double)m[i].moved < least) least = (double)m[i].moved;
    }
    pinstage_route_info info;
    memset(&info, 0, sizeof info);
    pinstage_route_get_info(d2h ? PINSTAGE_D2H : PINSTAGE_H2D, bytes, &info);
    if (moved <= 0) {
        printf("%-10s %2u thr %s %9zu: no transfer finished in the window\n", label, nt, d2h ? "d2h" : "h2d", bytes);
        return 0;
    }
    double gb = moved / 1e9, cpu[3], all = 0;
    for (int k = 0; k < 3; k++) all += cpu[k] = (after[k] - before[k]) / 1e6; /* ms */
    printf("%-10s %2u thr %s %9zu: %6.2f GB/s, slowest %5.2f; CPU ms/GB %6.1f = callers %6.1f + workers %6.1f + "
           "rest %5.1f; %5.2f CPUs; pageable %.2f; governed %u\n",
           label, nt, d2h ? "d2h" : "h2d", bytes, gb / wall, least / 1e9 / wall, all / gb, cpu[0] / gb, cpu[1] / gb,
           cpu[2] / gb, all / 1e3 / wall, calls ? (double)pageable / (double)calls : 0.0, info.engine_threads);
    return 0;
}
