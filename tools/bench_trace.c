/* SPDX-License-Identifier: MIT */
/* pinstage-bench --trace FILE: what the engine's timeline (PINSTAGE_TRACE)
 * says about where each transfer's time went.
 *
 * Per transfer: its time; its chunks' copy time (opened to copied, as the
 * caller saw it) and DMA time (enqueued to landed); the threads that copied
 * and on how many CPUs; the longest block against the median block (a
 * thread that lost its CPU mid-block shows as a block far longer than the
 * rest); how long the last chunk waited for its slowest block after the
 * others of that chunk were done (the straggler); whether the DMA queue
 * ran dry (a chunk copied after the previous chunk had already landed); and
 * the thread time spent copying (the sum of its blocks), also as a share of
 * what the seated threads and the caller had from start to end: the rest of
 * their time they waited for blocks to open, for a DMA, or for a CPU. */
#include <stdlib.h>
#include <string.h>

#include "bench.h"

typedef struct {
    unsigned id, chunks, seats;
    int d2h;
    size_t bytes;
    double begin, end;
} t_rec;

typedef struct {
    unsigned id, chunk;
    int what;
    double at;
} c_rec;

typedef struct {
    unsigned id, chunk, thread;
    int cpu;
    double start, end;
} b_rec;

static int by_id_chunk(const void *a, const void *b) {
    const b_rec *x = a, *y = b;
    if (x->id != y->id) return x->id < y->id ? -1 : 1;
    if (x->chunk != y->chunk) return x->chunk < y->chunk ? -1 : 1;
    return (x->end > y->end) - (x->end < y->end);
}

int bench_trace_summary(const char *path, FILE *out) {
    FILE *f = fopen(path, "r");
    if (!f) return bench_fail("cannot open the --trace file");
    size_t nt = 0, nc = 0, nb = 0, ct = 64, cc = 1024, cb = 4096;
    t_rec *ts = malloc(ct * sizeof *ts);
    c_rec *cs = malloc(cc * sizeof *cs);
    b_rec *bs = malloc(cb * sizeof *bs);
    char line[256];
    int ok = ts && cs && bs;
    while (ok && fgets(line, sizeof line, f)) {
        unsigned long long a, b;
        char dir[8];
        if (line[0] == 'T') {
            if (nt == ct && !(ts = realloc(ts, (ct *= 2) * sizeof *ts))) break;
            t_rec *t = &ts[nt];
            if (sscanf(line, "T %u %7s %zu %u %u %llu %llu", &t->id, dir, &t->bytes, &t->chunks, &t->seats, &a, &b) == 7) {
                t->d2h = !strcmp(dir, "d2h");
                t->begin = a / 1e3;
                t->end = b / 1e3;
                nt++;
            }
        } else if (line[0] == 'C') {
            if (nc == cc && !(cs = realloc(cs, (cc *= 2) * sizeof *cs))) break;
            c_rec *c = &cs[nc];
            if (sscanf(line, "C %u %u %d %llu", &c->id, &c->chunk, &c->what, &a) == 4) {
                c->at = a / 1e3;
                nc++;
            }
        } else if (line[0] == 'B') {
            if (nb == cb && !(bs = realloc(bs, (cb *= 2) * sizeof *bs))) break;
            b_rec *x = &bs[nb];
            if (sscanf(line, "B %u %u %u %d %llu %llu", &x->id, &x->chunk, &x->thread, &x->cpu, &a, &b) == 6) {
                x->start = a / 1e3;
                x->end = b / 1e3;
                nb++;
            }
        }
    }
    fclose(f);
    if (!ts || !cs || !bs) {
        free(ts), free(cs), free(bs);
        return bench_fail("out of host memory reading the trace");
    }
    qsort(bs, nb, sizeof *bs, by_id_chunk);
    fprintf(out, "# pinstage trace %s: %zu transfers, %zu chunk events, %zu blocks\n", path, nt, nc, nb);
    fprintf(out, "# per transfer: us; copy_us / dma_us: median per chunk; threads (cpus) that copied; "
                 "block_us median / max; straggler_us: the last block of a chunk after the one before it; "
                 "dry: chunks copied after the DMA before them had landed; copying_us: thread time in blocks, "
                 "use: that over (seats + 1) x us\n");
    fprintf(out, "%5s %4s %10s %6s %5s %9s %8s %8s %8s %9s %9s %9s %4s %10s %5s\n", "id", "dir", "bytes", "chunks",
            "seats", "us", "copy_us", "dma_us", "threads", "block_us", "block_max", "straggler", "dry", "copying_us",
            "use");
    size_t bi = 0;
    for (size_t i = 0; i < nt; i++) {
        t_rec *t = &ts[i];
        unsigned n = t->chunks;
        double *opened = calloc(n + 1, sizeof(double)), *copied = calloc(n + 1, sizeof(double));
        double *enq = calloc(n + 1, sizeof(double)), *landed = calloc(n + 1, sizeof(double));
        double *copy_us = calloc(n + 1, sizeof(double)), *dma_us = calloc(n + 1, sizeof(double));
        if (!opened || !copied || !enq || !landed || !copy_us || !dma_us) {
            free(opened), free(copied), free(enq), free(landed), free(copy_us), free(dma_us);
            break;
        }
        for (size_t k = 0; k < nc; k++) {
            if (cs[k].id != t->id || cs[k].chunk >= n) continue;
            double *slot = cs[k].what == 0 ? opened : cs[k].what == 1 ? copied : cs[k].what == 2 ? enq : landed;
            slot[cs[k].chunk] = cs[k].at;
        }
        size_t ncopy = 0, ndma = 0;
        unsigned dry = 0;
        for (unsigned k = 0; k < n; k++) {
            /* Uploads: opened -> copied -> enqueued -> landed; downloads:
             * enqueued -> landed (opened) -> copied. */
            double from = t->d2h ? landed[k] : opened[k];
            if (from > 0 && copied[k] > from) copy_us[ncopy++] = copied[k] - from;
            if (enq[k] > 0 && landed[k] > enq[k]) dma_us[ndma++] = landed[k] - enq[k];
            if (!t->d2h && k > 0 && landed[k - 1] > 0 && copied[k] > landed[k - 1]) dry++;
        }
        /* Blocks of this transfer. */
        while (bi < nb && bs[bi].id < t->id) bi++;
        size_t b0 = bi;
        while (bi < nb && bs[bi].id == t->id) bi++;
        size_t count = bi - b0;
        double *dur = calloc(count ? count : 1, sizeof(double));
        unsigned threads_seen[256] = {0}, cpus_seen[1024] = {0}, nthreads = 0, ncpus = 0;
        double straggler = 0, copying = 0;
        for (size_t k = b0; k < bi && dur; k++) {
            dur[k - b0] = bs[k].end - bs[k].start;
            copying += dur[k - b0];
            if (bs[k].thread < 256 && !threads_seen[bs[k].thread]++) nthreads++;
            if (bs[k].cpu >= 0 && bs[k].cpu < 1024 && !cpus_seen[bs[k].cpu]++) ncpus++;
            /* Sorted by chunk, then end: the last block of a chunk against the one before. */
            int last_of_chunk = k + 1 == bi || bs[k + 1].chunk != bs[k].chunk;
            if (last_of_chunk && k > b0 && bs[k - 1].chunk == bs[k].chunk && bs[k].end - bs[k - 1].end > straggler)
                straggler = bs[k].end - bs[k - 1].end;
        }
        double block_med = 0, block_max = 0;
        if (dur && count) {
            block_med = bench_median(dur, count);
            block_max = dur[count - 1];
        }
        double us = t->end > t->begin ? t->end - t->begin : 0, had = us * (t->seats + 1);
        fprintf(out, "%5u %4s %10zu %6u %5u %9.1f %8.1f %8.1f %4u (%2u) %9.1f %9.1f %9.1f %4u %10.1f %5.2f\n", t->id,
                t->d2h ? "d2h" : "h2d", t->bytes, n, t->seats, us, ncopy ? bench_median(copy_us, ncopy) : 0,
                ndma ? bench_median(dma_us, ndma) : 0, nthreads, ncpus, block_med, block_max, straggler, dry,
                copying, had > 0 ? copying / had : 0);
        free(dur);
        free(opened), free(copied), free(enq), free(landed), free(copy_us), free(dma_us);
    }
    free(ts), free(cs), free(bs);
    return 0;
}
