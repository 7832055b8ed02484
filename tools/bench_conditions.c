/* SPDX-License-Identifier: MIT */
/* pinstage-bench --conditions: the paths where programs run them.
 *
 * The default table measures the best case: one warm process, calls back to
 * back, nothing else running. A pipeline's process is none of that, so each
 * condition here measures pageable (the driver's path), auto (upload /
 * download as a program calls them) and floor (the raw DMA from pinned
 * memory) side by side, in the same process:
 *  - fresh-process: N processes started one after another (this program
 *    re-executed), each with freshly allocated and written host memory;
 *  - warm: back to back in this process, the reference for paced;
 *  - paced: each call after 5 ms idle and a pageable copy of other memory,
 *    as a frame loop calls it;
 *  - cpu-load: N-4 of N CPUs busy with arithmetic in this process, over a
 *    sweep of sizes; uploads up to 1 MiB also against pageable-async, the
 *    driver's copy landed as upload's is;
 *  - mem-load: 4 threads streaming memcpy in this process;
 *  - concurrent: 2, 4 and 8 threads, each with its own buffer, stream and
 *    memory, moving the same size at once: aggregate and per-thread GB/s;
 *  - idle: this process's CPU time over one second, one second after the
 *    last transfer, and by thread name: pinstage's workers apart from the
 *    driver's threads and the rest.
 * Every row carries the process CPU time per GB moved. The bound: a staged
 * byte is read and written by the CPU and read again by the DMA engine, so
 * at a parallel memcpy rate M (all the threads the engine may use, 64 MiB,
 * measured just before) a staged transfer runs at most at min(link, 2M/3);
 * fresh-process and mem-load rows of auto carry bound_us, that rate's time
 * for the transfer, the link being this process's floor. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

#define MEMCPY_BYTES ((size_t)64 << 20)
#define PACED_IDLE_US 5000.0

typedef struct {
    char condition[16];
    int process; /* fresh-process: which one; else -1 */
    unsigned threads;
    bench_direction dir;
    size_t bytes;
    char path[24];
    size_t reps;
    double median_us, p10_us, p90_us, mean_us, cpu_us_per_gb;
    double gap_cpu_us_per_gb; /* paced: the other threads' CPU in the gap before each call; -1: not measured */
    double memcpy_gbps, bound_us;                                    /* 0: not measured */
    double pageable_share; /* auto: timed calls that took the pageable route / reps; -1: not a buffer path */
    unsigned engine_threads; /* auto: the governor's thread count for the size after the calls; 0: not governed */
    double aggregate_gbps, bound_gbps, min_thread_gbps, mean_thread_gbps; /* concurrent */
} cond_row;

/* ---- Idle: which threads used the CPU -------------------------------------------- */

/* One second's CPU by thread, so that pinstage's workers (pinstage-N,
 * pinstageN-M: src/pool.c names them) are told apart from the driver's
 * threads and the rest of the process. */
#define MAX_IDLE_THREADS 512
#define MAX_IDLE_GROUPS 16

typedef struct {
    int tid;
    char name[16];
    double cpu_ns;
} thread_cpu;

typedef struct {
    char name[20]; /* a thread's name, or "pinstage-N" for every worker */
    unsigned threads;
    double cpu_us;
} idle_group;

static int is_pinstage_worker(const char *name) {
    if (strncmp(name, "pinstage", 8) != 0) return 0;
    const char *p = name + 8;
    while (isdigit((unsigned char)*p)) p++;
    if (*p++ != '-' || !isdigit((unsigned char)*p)) return 0;
    while (isdigit((unsigned char)*p)) p++;
    return *p == '\0';
}

static int read_line(const char *path, char *out, size_t size) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    int ok = fgets(out, (int)size, f) != NULL;
    fclose(f);
    if (ok) out[strcspn(out, "\n")] = '\0';
    return ok;
}

/* This process's threads and the CPU each has used: ns on CPU from
 * schedstat, or utime + stime in clock ticks where the kernel keeps none. */
static size_t threads_cpu(thread_cpu *out, size_t max) {
    DIR *dir = opendir("/proc/self/task");
    if (!dir) return 0;
    size_t n = 0;
    long tick = sysconf(_SC_CLK_TCK);
    struct dirent *e;
    while (n < max && (e = readdir(dir))) {
        if (e->d_name[0] == '.') continue;
        char path[64], line[512];
        thread_cpu t = {.tid = atoi(e->d_name), .cpu_ns = -1};
        snprintf(path, sizeof path, "/proc/self/task/%d/comm", t.tid);
        if (!read_line(path, line, sizeof line)) continue;
        snprintf(t.name, sizeof t.name, "%.15s", line);
        for (char *c = t.name; *c; c++)
            if (!isalnum((unsigned char)*c) && *c != '-' && *c != '_' && *c != '.') *c = '_'; /* JSON-safe */
        unsigned long long on_cpu;
        snprintf(path, sizeof path, "/proc/self/task/%d/schedstat", t.tid);
        if (read_line(path, line, sizeof line) && sscanf(line, "%llu", &on_cpu) == 1) t.cpu_ns = (double)on_cpu;
        snprintf(path, sizeof path, "/proc/self/task/%d/stat", t.tid);
        if (t.cpu_ns < 0 && tick > 0 && read_line(path, line, sizeof line)) {
            /* Fields 14 and 15, after the name in parentheses (which may hold spaces). */
            char *after = strrchr(line, ')');
            unsigned long long ut, stt;
            if (after && sscanf(after + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &stt) == 2)
                t.cpu_ns = (double)(ut + stt) * 1e9 / (double)tick;
        }
        if (t.cpu_ns >= 0) out[n++] = t;
    }
    closedir(dir);
    return n;
}

static double thread_cpu_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* The group named `name`, made if new. Past MAX_IDLE_GROUPS - 3 names the
 * rest share "other-threads", so that pinstage's workers and the threads that
 * ended always have a group of their own. */
static idle_group *group_named(idle_group *groups, unsigned *ng, const char *name) {
    for (unsigned g = 0; g < *ng; g++)
        if (!strcmp(groups[g].name, name)) return &groups[g];
    int kept = !strcmp(name, "pinstage-N") || !strcmp(name, "ended-in-window") || !strcmp(name, "other-threads");
    if (!kept && *ng >= MAX_IDLE_GROUPS - 3) return group_named(groups, ng, "other-threads");
    idle_group *g = &groups[(*ng)++];
    snprintf(g->name, sizeof g->name, "%s", name);
    g->threads = 0;
    g->cpu_us = 0;
    return g;
}

/* Groups the CPU each thread used between two readings by name, most first.
 * The calling thread's is `self_us`, measured over the window alone (its
 * readings of /proc fall outside); what `total_us` (the process's) has
 * beyond the threads found in both readings went to threads that ended in
 * the window. */
static unsigned idle_by_thread(const thread_cpu *before, size_t nb, const thread_cpu *after, size_t na,
                               double self_us, double total_us, idle_group *groups) {
    unsigned ng = 0;
    int self = (int)syscall(SYS_gettid);
    idle_group *g = group_named(groups, &ng, "measuring-thread");
    g->threads = 1;
    g->cpu_us = self_us;
    double counted = self_us;
    for (size_t i = 0; i < na; i++) {
        if (after[i].tid == self) continue;
        double used = after[i].cpu_ns;
        for (size_t j = 0; j < nb; j++)
            if (before[j].tid == after[i].tid) used -= before[j].cpu_ns;
        used = used > 0 ? used / 1e3 : 0;
        g = group_named(groups, &ng, is_pinstage_worker(after[i].name) ? "pinstage-N" : after[i].name);
        g->threads++;
        g->cpu_us += used;
        counted += used;
    }
    unsigned ended = 0;
    for (size_t j = 0; j < nb; j++) {
        size_t i = 0;
        while (i < na && after[i].tid != before[j].tid) i++;
        ended += i == na;
    }
    if (ended || total_us - counted > 1) {
        g = group_named(groups, &ng, "ended-in-window");
        g->threads = ended;
        g->cpu_us = total_us > counted ? total_us - counted : 0;
    }
    for (unsigned i = 1; i < ng; i++)
        for (unsigned j = i; j > 0 && groups[j].cpu_us > groups[j - 1].cpu_us; j--) {
            idle_group t = groups[j];
            groups[j] = groups[j - 1];
            groups[j - 1] = t;
        }
    return ng;
}

static double pinstage_idle_us(const idle_group *groups, unsigned n) {
    for (unsigned g = 0; g < n; g++)
        if (!strcmp(groups[g].name, "pinstage-N")) return groups[g].cpu_us;
    return 0;
}

typedef struct {
    cond_row *rows;
    size_t count, cap;
    bench_driver drv;
    CUstream stream;
    const conditions_options *o;
    unsigned char *memcpy_src, *memcpy_dst; /* for M; dst page-locked */
    double idle_cpu_us;
    idle_group idle_groups[MAX_IDLE_GROUPS]; /* the idle second by thread name, most CPU first */
    unsigned idle_ngroups;
    double link_gbps[2]; /* floor at the largest size, per direction (warm) */
} cond_state;

static cond_row *new_row(cond_state *st, const char *condition) {
    if (st->count == st->cap) {
        size_t cap = st->cap ? st->cap * 2 : 64;
        cond_row *r = realloc(st->rows, cap * sizeof *r);
        if (!r) return NULL;
        st->rows = r;
        st->cap = cap;
    }
    cond_row *r = &st->rows[st->count++];
    memset(r, 0, sizeof *r);
    snprintf(r->condition, sizeof r->condition, "%s", condition);
    r->process = -1;
    r->threads = 1;
    r->pageable_share = -1;
    r->gap_cpu_us_per_gb = -1;
    return r;
}

static unsigned engine_threads(void) {
    pinstage_pool_info info;
    pinstage_pool_get_info(&info);
    return info.workers + 1;
}

static int get_driver(bench_driver *drv) {
    pinstage_status s;
    if ((s = pinstage_driver_get_proc("cuMemAllocHost", 3020, (void **)&drv->alloc_host)) ||
        (s = pinstage_driver_get_proc("cuMemFreeHost", 2000, (void **)&drv->free_host)) ||
        (s = pinstage_driver_get_proc("cuMemcpyHtoDAsync", 3020, (void **)&drv->htod_async)) ||
        (s = pinstage_driver_get_proc("cuMemcpyDtoHAsync", 3020, (void **)&drv->dtoh_async)) ||
        (s = pinstage_driver_get_proc("cuStreamSynchronize", 2000, (void **)&drv->stream_sync)))
        return bench_driver_fail("driver entry points", s);
    return 0;
}

/* ---- The parallel memcpy rate M --------------------------------------------------- */

typedef struct {
    pthread_barrier_t *start, *end;
    unsigned char *dst;
    const unsigned char *src;
    size_t len;
    int rounds;
} memcpy_part;

static void *memcpy_worker(void *arg) {
    memcpy_part *p = arg;
    for (int r = 0; r < p->rounds; r++) {
        pthread_barrier_wait(p->start);
        memcpy(p->dst, p->src, p->len);
        pthread_barrier_wait(p->end);
    }
    return NULL;
}

/* GB/s of a 64 MiB copy from pageable into page-locked memory, split over
 * `threads` threads (the calling one included): the median of 5. */
static double memcpy_gbps(cond_state *st, unsigned threads) {
    if (!st->memcpy_src) {
        void *pinned = NULL;
        if (st->drv.alloc_host(&pinned, MEMCPY_BYTES)) return 0;
        st->memcpy_dst = pinned;
        st->memcpy_src = bench_host_memory(MEMCPY_BYTES);
        if (!st->memcpy_src) return 0;
        memset(st->memcpy_dst, 0, MEMCPY_BYTES);
    }
    enum { ROUNDS = 5 };
    pthread_barrier_t start, end;
    pthread_barrier_init(&start, NULL, threads);
    pthread_barrier_init(&end, NULL, threads);
    memcpy_part parts[256];
    pthread_t t[256];
    if (threads > 256) threads = 256;
    size_t slice = MEMCPY_BYTES / threads / 64 * 64;
    for (unsigned i = 0; i < threads; i++) {
        size_t from = i * slice, len = i + 1 == threads ? MEMCPY_BYTES - from : slice;
        parts[i] = (memcpy_part){&start, &end, st->memcpy_dst + from, st->memcpy_src + from, len, ROUNDS};
    }
    unsigned started = 1;
    for (unsigned i = 1; i < threads; i++)
        if (pthread_create(&t[i], NULL, memcpy_worker, &parts[i]) == 0) started++;
    double us[ROUNDS];
    if (started == threads) {
        for (int r = 0; r < ROUNDS; r++) {
            pthread_barrier_wait(&start);
            double t0 = bench_now_us();
            memcpy(parts[0].dst, parts[0].src, parts[0].len);
            pthread_barrier_wait(&end);
            us[r] = bench_now_us() - t0;
        }
    }
    for (unsigned i = 1; i < started; i++) pthread_join(t[i], NULL);
    pthread_barrier_destroy(&start);
    pthread_barrier_destroy(&end);
    if (started != threads) return 0;
    return (double)MEMCPY_BYTES / (bench_median(us, ROUNDS) * 1e3);
}

/* ---- One size and direction, paths side by side ---------------------------------- */

static const char *const three_paths[] = {"pageable", "auto", "floor"};

static int measure(cond_state *st, const char *condition, bench_direction d, size_t bytes, const char *const *names,
                   size_t n, const bench_run_options *o, cond_row **first) {
    const bench_path *paths[BENCH_MAX_PATHS];
    bench_result res[BENCH_MAX_PATHS];
    for (size_t i = 0; i < n; i++) paths[i] = bench_find_path(names[i]);
    bench_cell cell = {.direction = d, .bytes = bytes, .stream = st->stream, .driver = &st->drv,
                       .seed = (unsigned)(bytes / 4096 + (size_t)d)};
    pinstage_status s;
    if (!(cell.host = bench_host_memory(bytes))) return bench_fail("out of host memory");
    if ((s = pinstage_devbuf_alloc_u8(&cell.device, bytes))) {
        free(cell.host);
        return bench_driver_fail("device memory", s);
    }
    memset(res, 0, sizeof res);
    int rc = bench_measure(&cell, paths, n, o, "", res);
    pinstage_devbuf_free(cell.device);
    free(cell.host);
    if (rc) return rc;
    *first = NULL;
    for (size_t i = 0; i < n; i++) {
        cond_row *r = new_row(st, condition);
        if (!r) return bench_fail("out of host memory");
        if (!*first) *first = r;
        r->dir = d;
        r->bytes = bytes;
        snprintf(r->path, sizeof r->path, "%s", names[i]);
        r->reps = res[i].reps;
        r->median_us = res[i].median_us;
        r->p10_us = res[i].p10_us;
        r->p90_us = res[i].p90_us;
        r->mean_us = res[i].mean_us;
        r->cpu_us_per_gb = res[i].cpu_us_per_gb;
        r->gap_cpu_us_per_gb = res[i].gap_cpu_us_per_gb;
        r->pageable_share = res[i].pageable_share;
        r->engine_threads = res[i].engine_threads;
    }
    return 0;
}

/* The bound of the auto row among the rows from `first` on (n of them). */
static void set_bound(cond_row *first, size_t n, double m_gbps) {
    cond_row *floor = NULL, *autorow = NULL;
    for (size_t i = 0; i < n; i++) {
        first[i].memcpy_gbps = m_gbps;
        if (!strcmp(first[i].path, "floor")) floor = &first[i];
        if (!strcmp(first[i].path, "auto")) autorow = &first[i];
    }
    if (!floor || !autorow || m_gbps <= 0) return;
    double link = (double)floor->bytes / (floor->median_us * 1e3), staged = 2 * m_gbps / 3;
    double rate = link < staged ? link : staged;
    autorow->bound_us = (double)autorow->bytes / (rate * 1e3);
}

static void progress(const cond_state *st, const char *what) {
    if (!st->o->quiet) fprintf(stderr, "[conditions] %s\n", what);
}

/* ---- Fresh processes -------------------------------------------------------------- */

int bench_conditions_child(const conditions_options *o, unsigned process) {
    cond_state st;
    memset(&st, 0, sizeof st);
    st.o = o;
    int rc = get_driver(&st.drv);
    pinstage_status s;
    if (!rc && (s = pinstage_stream_create(&st.stream, PINSTAGE_STREAM_NON_BLOCKING))) rc = bench_driver_fail("stream", s);
    bench_run_options ro = {300, 10, 0.4, 1, NULL, NULL};
    for (size_t z = 0; z < o->nsizes && !rc; z++)
        for (int d = 0; d < 2 && !rc; d++) {
            double m = memcpy_gbps(&st, engine_threads());
            cond_row *first;
            if ((rc = measure(&st, "fresh-process", (bench_direction)d, o->sizes[z], three_paths, 3, &ro, &first))) break;
            for (cond_row *r = first; r < st.rows + st.count; r++)
                printf("row %s %zu %s %zu %.3f %.3f %.3f %.3f %.1f %.3f %.4f %u\n", bench_direction_name(r->dir),
                       r->bytes, r->path, r->reps, r->median_us, r->p10_us, r->p90_us, r->mean_us, r->cpu_us_per_gb, m,
                       r->pageable_share, r->engine_threads);
        }
    (void)process;
    fflush(stdout);
    if (st.stream) pinstage_stream_destroy(st.stream);
    if (st.memcpy_dst) st.drv.free_host(st.memcpy_dst);
    free(st.memcpy_src);
    free(st.rows);
    return rc;
}

static int fresh_processes(cond_state *st) {
    const conditions_options *o = st->o;
    for (unsigned p = 0; p < o->processes; p++) {
        char msg[64];
        snprintf(msg, sizeof msg, "fresh process %u of %u", p + 1, o->processes);
        progress(st, msg);
        int fds[2];
        if (pipe(fds)) return bench_fail("pipe failed");
        char number[16], sizes[256] = "";
        snprintf(number, sizeof number, "%u", p);
        for (size_t z = 0, at = 0; z < o->nsizes && at < sizeof sizes; z++)
            at += (size_t)snprintf(sizes + at, sizeof sizes - at, "%s%zu", z ? "," : "", o->sizes[z]);
        char *argv[48];
        size_t k = 0;
        argv[k++] = (char *)o->exe;
        for (size_t i = 0; i < o->nchild_args; i++) argv[k++] = o->child_args[i];
        argv[k++] = "--sizes";
        argv[k++] = sizes;
        argv[k++] = "--quiet";
        argv[k++] = "--conditions-child";
        argv[k++] = number;
        argv[k] = NULL;
        fflush(NULL);
        pid_t pid = fork();
        if (pid < 0) return bench_fail("fork failed");
        if (pid == 0) {
            dup2(fds[1], STDOUT_FILENO);
            close(fds[0]);
            close(fds[1]);
            execv(o->exe, argv);
            _exit(127);
        }
        close(fds[1]);
        FILE *in = fdopen(fds[0], "r");
        char line[512];
        size_t before = st->count;
        while (in && fgets(line, sizeof line, in)) {
            char dir[8], path[24];
            size_t bytes, reps;
            double med, p10, p90, mean, cpu, m, share;
            unsigned threads;
            if (sscanf(line, "row %7s %zu %23s %zu %lf %lf %lf %lf %lf %lf %lf %u", dir, &bytes, path, &reps, &med,
                       &p10, &p90, &mean, &cpu, &m, &share, &threads) != 12)
                continue;
            cond_row *r = new_row(st, "fresh-process");
            if (!r) break;
            r->process = (int)p;
            r->dir = strcmp(dir, "h2d") ? BENCH_D2H : BENCH_H2D;
            r->bytes = bytes;
            snprintf(r->path, sizeof r->path, "%s", path);
            r->reps = reps;
            r->median_us = med;
            r->p10_us = p10;
            r->p90_us = p90;
            r->mean_us = mean;
            r->cpu_us_per_gb = cpu;
            r->memcpy_gbps = m;
            r->pageable_share = share;
            r->engine_threads = threads;
        }
        if (in) fclose(in);
        int status = 0;
        waitpid(pid, &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status)) {
            fprintf(stderr, "pinstage-bench: fresh process %u failed (status %d)\n", p, status);
            return 1;
        }
        /* Rows come in threes: pageable, auto, floor of one size and direction. */
        for (size_t i = before; i + 3 <= st->count; i += 3) set_bound(&st->rows[i], 3, st->rows[i].memcpy_gbps);
    }
    return 0;
}

/* ---- Concurrent transfers ------------------------------------------------------------ */

typedef struct {
    int device;
    bench_direction dir;
    size_t bytes;
    int pageable;
    double window_us;
    pthread_barrier_t *ready;
    _Atomic int *go;
    double bytes_moved, busy_us;
    double *calls;
    size_t ncalls, cap;
    uint64_t pageable_calls; /* auto: timed calls that took the pageable route */
    int failed;
} mover;

static void *move_loop(void *arg) {
    mover *m = arg;
    pinstage_buffer *buf = NULL;
    pinstage_devbuf *dev = NULL;
    CUstream stream = NULL;
    unsigned char *host = bench_host_memory(m->bytes);
    if (pinstage_context_init(m->device) || pinstage_buffer_create(&buf) ||
        (bench_config.profile && pinstage_buffer_set_profile(buf, bench_config.profile)) ||
        pinstage_devbuf_alloc_u8(&dev, m->bytes) || pinstage_stream_create(&stream, PINSTAGE_STREAM_NON_BLOCKING) ||
        !host)
        m->failed = 1;
    for (int w = 0; w < 5 && !m->failed; w++) {
        pinstage_status s = m->dir == BENCH_H2D ? pinstage_buffer_upload(buf, dev, host, m->bytes, stream)
                                                : pinstage_buffer_download(buf, host, m->bytes, dev, stream);
        if (s) m->failed = 1;
    }
    pinstage_stats before, after;
    pinstage_buffer_stats(buf, &before);
    pthread_barrier_wait(m->ready);
    while (!atomic_load(m->go)) {
    }
    double start = bench_now_us(), end = start + m->window_us;
    while (!m->failed && bench_now_us() < end) {
        double t = bench_now_us();
        pinstage_status s;
        if (m->pageable)
            s = m->dir == BENCH_H2D ? pinstage_devbuf_copy_from_host(dev, host, m->bytes)
                                    : pinstage_devbuf_copy_to_host(dev, host, m->bytes);
        else
            s = m->dir == BENCH_H2D ? pinstage_buffer_upload(buf, dev, host, m->bytes, stream)
                                    : pinstage_buffer_download(buf, host, m->bytes, dev, stream);
        double took = bench_now_us() - t;
        if (s) {
            m->failed = 1;
            break;
        }
        if (m->ncalls == m->cap) {
            size_t cap = m->cap ? m->cap * 2 : 256;
            double *c = realloc(m->calls, cap * sizeof *c);
            if (!c) {
                m->failed = 1;
                break;
            }
            m->calls = c;
            m->cap = cap;
        }
        m->calls[m->ncalls++] = took;
        m->bytes_moved += (double)m->bytes;
    }
    m->busy_us = bench_now_us() - start;
    pinstage_buffer_stats(buf, &after);
    m->pageable_calls = after.pageable_transfers - before.pageable_transfers;
    pinstage_stream_destroy(stream);
    pinstage_devbuf_free(dev);
    pinstage_buffer_free(buf);
    free(host);
    pinstage_context_release(m->device);
    return NULL;
}

static int concurrent(cond_state *st, unsigned threads, bench_direction d, size_t bytes, int pageable,
                      double bound_gbps) {
    mover m[64];
    pthread_t t[64];
    pthread_barrier_t ready;
    _Atomic int go = 0;
    pthread_barrier_init(&ready, NULL, threads + 1);
    for (unsigned i = 0; i < threads; i++) {
        memset(&m[i], 0, sizeof m[i]);
        m[i].device = st->o->device;
        m[i].dir = d;
        m[i].bytes = bytes;
        m[i].pageable = pageable;
        m[i].window_us = 600000;
        m[i].ready = &ready;
        m[i].go = &go;
        pthread_create(&t[i], NULL, move_loop, &m[i]);
    }
    pthread_barrier_wait(&ready);
    double cpu = bench_cpu_us(), start = bench_now_us();
    atomic_store(&go, 1);
    for (unsigned i = 0; i < threads; i++) pthread_join(t[i], NULL);
    double wall = bench_now_us() - start;
    cpu = bench_cpu_us() - cpu;
    pthread_barrier_destroy(&ready);
    double total = 0, least = 0, sum = 0;
    size_t calls = 0;
    uint64_t pageable_calls = 0;
    int failed = 0;
    for (unsigned i = 0; i < threads; i++) {
        failed |= m[i].failed;
        total += m[i].bytes_moved;
        double gbps = m[i].busy_us > 0 ? m[i].bytes_moved / (m[i].busy_us * 1e3) : 0;
        sum += gbps;
        if (i == 0 || gbps < least) least = gbps;
        calls += m[i].ncalls;
        pageable_calls += m[i].pageable_calls;
    }
    double *all = calloc(calls ? calls : 1, sizeof *all);
    size_t k = 0;
    for (unsigned i = 0; i < threads; i++) {
        if (all) memcpy(all + k, m[i].calls, m[i].ncalls * sizeof *all);
        k += m[i].ncalls;
        free(m[i].calls);
    }
    if (failed || !all) {
        free(all);
        return bench_fail("a concurrent transfer failed");
    }
    cond_row *r = new_row(st, "concurrent");
    if (!r) {
        free(all);
        return bench_fail("out of host memory");
    }
    r->threads = threads;
    r->dir = d;
    r->bytes = bytes;
    snprintf(r->path, sizeof r->path, "%s", pageable ? "pageable" : "auto");
    r->reps = calls;
    if (!pageable && calls) r->pageable_share = (double)pageable_calls / (double)calls;
    qsort(all, calls, sizeof *all, bench_compare_double);
    r->median_us = bench_quantile(all, calls, 0.5);
    r->p10_us = bench_quantile(all, calls, 0.1);
    r->p90_us = bench_quantile(all, calls, 0.9);
    double all_us = 0;
    for (size_t i = 0; i < calls; i++) all_us += all[i];
    r->mean_us = calls ? all_us / (double)calls : 0;
    free(all);
    r->aggregate_gbps = total / (wall * 1e3);
    r->cpu_us_per_gb = total > 0 ? cpu / (total / 1e9) : 0;
    r->min_thread_gbps = least;
    r->mean_thread_gbps = sum / threads;
    r->bound_gbps = bound_gbps;
    return 0;
}

/* ---- Reports ------------------------------------------------------------------------ */

static void json_row(FILE *out, const cond_row *r, int last) {
    fprintf(out, "    {\"condition\": \"%s\", \"direction\": \"%s\", \"bytes\": %zu, \"path\": \"%s\", ", r->condition,
            bench_direction_name(r->dir), r->bytes, r->path);
    if (r->process >= 0) fprintf(out, "\"process\": %d, ", r->process);
    if (!strcmp(r->condition, "concurrent"))
        fprintf(out, "\"threads\": %u, \"aggregate_gbps\": %.3f, \"bound_gbps\": %.3f, \"min_thread_gbps\": %.3f, "
                     "\"mean_thread_gbps\": %.3f, ",
                r->threads, r->aggregate_gbps, r->bound_gbps, r->min_thread_gbps, r->mean_thread_gbps);
    if (r->memcpy_gbps > 0) fprintf(out, "\"memcpy_gbps\": %.3f, ", r->memcpy_gbps);
    if (r->bound_us > 0) fprintf(out, "\"bound_us\": %.3f, ", r->bound_us);
    if (r->pageable_share >= 0) fprintf(out, "\"pageable_share\": %.4f, ", r->pageable_share);
    if (r->engine_threads) fprintf(out, "\"engine_threads\": %u, ", r->engine_threads);
    if (r->gap_cpu_us_per_gb >= 0) fprintf(out, "\"gap_cpu_us_per_gb\": %.1f, ", r->gap_cpu_us_per_gb);
    fprintf(out,
            "\"reps\": %zu, \"median_us\": %.3f, \"p10_us\": %.3f, \"p90_us\": %.3f, \"mean_us\": %.3f, "
            "\"cpu_us_per_gb\": %.1f}%s\n",
            r->reps, r->median_us, r->p10_us, r->p90_us, r->mean_us, r->cpu_us_per_gb, last ? "" : ",");
}

static void json_report(FILE *out, const cond_state *st, const bench_context *ctx) {
    fprintf(out, "{\n  \"schema\": \"pinstage-bench-conditions/1\",\n");
    bench_json_context(out, ctx,
                       "conditions: fresh processes, warm, paced, CPU load, memory load, concurrent threads; "
                       "wall clock around each whole synchronous call, median; process CPU time per GB");
    fprintf(out, ",\n  \"processes\": %u,\n  \"engine_threads\": %u,\n", st->o->processes, engine_threads());
    fprintf(out, "  \"idle\": {\"cpu_us\": %.1f, \"window_s\": 1.0, \"after_s\": 1.0, \"pinstage_cpu_us\": %.1f, \"threads\": [",
            st->idle_cpu_us, pinstage_idle_us(st->idle_groups, st->idle_ngroups));
    for (unsigned g = 0; g < st->idle_ngroups; g++)
        fprintf(out, "%s{\"name\": \"%s\", \"threads\": %u, \"cpu_us\": %.1f}", g ? ", " : "", st->idle_groups[g].name,
                st->idle_groups[g].threads, st->idle_groups[g].cpu_us);
    fprintf(out, "]},\n");
    fprintf(out, "  \"results\": [\n");
    for (size_t i = 0; i < st->count; i++) json_row(out, &st->rows[i], i + 1 == st->count);
    fprintf(out, "  ]\n}\n");
}

static void text_report(FILE *out, const cond_state *st, const bench_context *ctx) {
    bench_text_context(out, ctx);
    fprintf(out, "# conditions: paths side by side in each process; medians in us; cpu: process CPU us per GB\n");
    fprintf(out, "# idle: %.1f us of CPU in the second that began one second after the last transfer; by thread:",
            st->idle_cpu_us);
    for (unsigned g = 0; g < st->idle_ngroups; g++)
        fprintf(out, "%s %s x%u %.1f us", g ? "," : "", st->idle_groups[g].name, st->idle_groups[g].threads,
                st->idle_groups[g].cpu_us);
    fprintf(out, "\n");
    fprintf(out, "# pg: the share of the timed calls of auto that took the pageable route; gap_cpu/GB (paced): "
                 "CPU us per GB the process's other threads used in the gap before each call\n");
    fprintf(out, "\n%-13s %4s %4s %10s %-14s %5s %11s %11s %11s %10s %10s %9s %9s %5s\n", "condition", "proc", "thr",
            "bytes", "path", "reps", "median_us", "cpu_us/GB", "gap_cpu/GB", "memcpy", "bound_us", "agg_GB/s",
            "min_GB/s", "pg");
    for (size_t i = 0; i < st->count; i++) {
        const cond_row *r = &st->rows[i];
        char share[16] = "-", gap[24] = "-";
        if (r->pageable_share >= 0) snprintf(share, sizeof share, "%.2f", r->pageable_share);
        if (r->gap_cpu_us_per_gb >= 0) snprintf(gap, sizeof gap, "%.0f", r->gap_cpu_us_per_gb);
        fprintf(out, "%-13s %4d %4u %10zu %-14s %5zu %11.1f %11.0f %11s %10.1f %10.1f %9.2f %9.2f %5s  %s\n",
                r->condition, r->process, r->threads, r->bytes, r->path, r->reps, r->median_us, r->cpu_us_per_gb, gap,
                r->memcpy_gbps, r->bound_us, r->aggregate_gbps, r->min_thread_gbps, share, bench_direction_name(r->dir));
    }
}

/* ---- The whole run ------------------------------------------------------------------- */

int bench_conditions(const conditions_options *o, const bench_context *ctx, FILE *text, FILE *json) {
    cond_state st;
    memset(&st, 0, sizeof st);
    st.o = o;
    int rc = get_driver(&st.drv);
    pinstage_status s;
    if (!rc && (s = pinstage_stream_create(&st.stream, PINSTAGE_STREAM_NON_BLOCKING))) rc = bench_driver_fail("stream", s);
    if (!rc) rc = fresh_processes(&st);

    /* Warm, back to back: the best case, and the link for the bounds. */
    bench_run_options warm = {300, 30, 1.0, 1, NULL, NULL};
    progress(&st, "warm");
    for (size_t z = 0; z < o->nsizes && !rc; z++)
        for (int d = 0; d < 2 && !rc; d++) {
            cond_row *first;
            if ((rc = measure(&st, "warm", (bench_direction)d, o->sizes[z], three_paths, 3, &warm, &first))) break;
            double floor = (double)first[2].bytes / (first[2].median_us * 1e3);
            if (floor > st.link_gbps[d] || z + 1 == o->nsizes) st.link_gbps[d] = floor;
        }

    /* Paced: idle and another copy before every call. */
    progress(&st, "paced");
    for (size_t z = 0; z < o->nsizes && !rc; z++)
        for (int d = 0; d < 2 && !rc; d++) {
            bench_pace pa = {PACED_IDLE_US, (bench_direction)d, bench_host_memory(o->sizes[z]), NULL, 0};
            if (!pa.other_host || (s = pinstage_devbuf_alloc_u8(&pa.other_device, o->sizes[z]))) {
                free(pa.other_host);
                rc = bench_fail("out of memory for the paced run");
                break;
            }
            bench_run_options paced = {40, 3, 0.8, 1, bench_pace_call, &pa};
            cond_row *first;
            rc = measure(&st, "paced", (bench_direction)d, o->sizes[z], three_paths, 3, &paced, &first);
            pinstage_devbuf_free(pa.other_device);
            free(pa.other_host);
        }

    /* CPU load: N-4 of N CPUs busy in this process, over the sweep. */
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    bench_load l;
    memset(&l, 0, sizeof l);
    if (!rc) {
        progress(&st, "cpu load");
        bench_load_start(&l, cpus > 4 ? (unsigned)(cpus - 4) : 0, BENCH_LOAD_CPU);
        size_t sweep[64], n = 0;
        for (size_t b = o->sweep_lo; b && b <= o->sweep_hi && n < 56; b *= 2) sweep[n++] = b;
        for (size_t z = 0; z < o->nsizes; z++) sweep[n++] = o->sizes[z];
        qsort(sweep, n, sizeof sweep[0], bench_compare_size);
        /* cuMemcpyHtoD_v2 from pageable memory returns before its last DMA
         * lands, and upload returns after: uploads up to 1 MiB, where that
         * DMA is much of a call, are shown against the landed copy (the
         * async one + sync) as well; the larger ones would only lengthen
         * the sweep. */
        static const char *const loaded_paths[] = {"pageable", "auto", "pageable-async"};
        const size_t landed_shown_max = (size_t)1 << 20;
        /* Enough warm-up for the route to follow the load (adapt.c). */
        bench_run_options loaded = {100, 20, 0.4, 1, NULL, NULL};
        for (size_t z = 0; z < n && !rc; z++) {
            if (z && sweep[z] == sweep[z - 1]) continue;
            for (int d = 0; d < 2 && !rc; d++) {
                size_t npaths = d == BENCH_H2D && sweep[z] <= landed_shown_max ? 3 : 2;
                cond_row *first;
                rc = measure(&st, "cpu-load", (bench_direction)d, sweep[z], loaded_paths, npaths, &loaded, &first);
            }
        }
        bench_load_stop(&l);
    }

    /* Memory load: 4 threads streaming memcpy. */
    if (!rc) {
        progress(&st, "memory load");
        bench_load_start(&l, 4, BENCH_LOAD_MEMORY);
        bench_run_options loaded = {100, 20, 0.6, 1, NULL, NULL};
        for (size_t z = 0; z < o->nsizes && !rc; z++)
            for (int d = 0; d < 2 && !rc; d++) {
                double m = memcpy_gbps(&st, engine_threads());
                cond_row *first;
                if ((rc = measure(&st, "mem-load", (bench_direction)d, o->sizes[z], three_paths, 3, &loaded, &first)))
                    break;
                set_bound(first, 3, m);
            }
        bench_load_stop(&l);
    }

    /* Concurrent: 2, 4, 8 threads at once, each its own buffer and stream. */
    static const unsigned thread_counts[] = {2, 4, 8};
    for (size_t z = 0; z < o->nsizes && !rc; z++) {
        if (o->sizes[z] < ((size_t)1 << 20)) continue; /* frames, not small tensors */
        for (int d = 0; d < 2 && !rc; d++) {
            double m = memcpy_gbps(&st, engine_threads()), staged = 2 * m / 3;
            double bound = st.link_gbps[d] < staged ? st.link_gbps[d] : staged;
            for (size_t t = 0; t < 3 && !rc; t++) {
                char msg[96];
                snprintf(msg, sizeof msg, "concurrent: %u threads, %s %zu bytes", thread_counts[t],
                         bench_direction_name((bench_direction)d), o->sizes[z]);
                progress(&st, msg);
                if (!(rc = concurrent(&st, thread_counts[t], (bench_direction)d, o->sizes[z], 0, bound)))
                    rc = concurrent(&st, thread_counts[t], (bench_direction)d, o->sizes[z], 1, bound);
            }
        }
    }

    /* Idle: nothing but the library's threads, one second after the last transfer. */
    if (!rc) {
        progress(&st, "idle");
        bench_sleep_us(1e6);
        static thread_cpu before[MAX_IDLE_THREADS], after[MAX_IDLE_THREADS];
        size_t nb = threads_cpu(before, MAX_IDLE_THREADS);
        double cpu = bench_cpu_us(), self = thread_cpu_us();
        bench_sleep_us(1e6);
        st.idle_cpu_us = bench_cpu_us() - cpu;
        self = thread_cpu_us() - self;
        size_t na = threads_cpu(after, MAX_IDLE_THREADS);
        st.idle_ngroups = idle_by_thread(before, nb, after, na, self, st.idle_cpu_us, st.idle_groups);
    }

    if (!rc) {
        if (text) text_report(text, &st, ctx);
        if (json) json_report(json, &st, ctx);
    }
    if (st.stream) pinstage_stream_destroy(st.stream);
    if (st.memcpy_dst) st.drv.free_host(st.memcpy_dst);
    free(st.memcpy_src);
    free(st.rows);
    return rc;
}
