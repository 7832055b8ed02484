/* SPDX-License-Identifier: MIT */
/* pinstage-bench: options, the measurement loop and the correctness check.
 * Run `pinstage-bench --help` for usage. */
#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

static const char usage[] =
    "usage: pinstage-bench [options]\n"
    "Measures every host<->device transfer path side by side on this machine's GPU.\n"
    "\n"
    "  --sizes LIST       comma-separated sizes in bytes, K/M/G suffixes (powers of 1024)\n"
    "                     default: the seed's shapes 112x112x3, 128x128x3, 640x640x3 f32\n"
    "  --sweep A:B        powers of two from A to B, e.g. 4K:256M\n"
    "  --direction D      h2d, d2h or both (default both)\n"
    "  --paths LIST       comma-separated subset of: pageable,auto,builtin,staged,engine,pageable-route,\n"
    "                     pinned-host,resident,pageable-async,fresh-pin,floor (default all)\n"
    "  --engine C:T       the engine path's chunk bytes and threads (0: all), default 1M:0\n"
    "  --profile FILE     the profile \"auto\" follows (default: $PINSTAGE_PROFILE, else built-in)\n"
    "  --calibrate FILE   measure this machine's profile, print it, save it to FILE; no benchmark\n"
    "  --thorough         with --calibrate: every size to 256 MiB, more settings (several seconds)\n"
    "  --pipeline         no path table: a 640x640x3 f32 frame pipeline (fill, upload, device\n"
    "                     work, download, consume) with the synchronous buffer and with the ring,\n"
    "                     frames per second side by side, and how soon upload_with_async returns\n"
    "  --fill LIST        with --pipeline: host fill times as multiples of one frame's transfer\n"
    "                     time (default 0,1,3)\n"
    "  --frames N         with --pipeline: frames per round (default 300; 5 rounds)\n"
    "  --ring-slots K     with --pipeline: the ring's slots (default 4)\n"
    "  --soak N           no path table: N transfers of mixed shapes, directions and calls on\n"
    "                     several threads, every byte verified; errors, mismatches, RSS and\n"
    "                     pinned bytes at 10% and at the end (exit 1 on any error or mismatch)\n"
    "  --soak-threads T   with --soak: threads, each with its own buffer, ring and stream (default 4)\n"
    "  --pool-threads N   worker threads of the engine's pool (default: one per CPU, less one)\n"
    "  --sched MODE       the context's scheduling: auto, spin, yield or blocking (default auto)\n"
    "  --host-alloc MODE  pageable host memory: malloc (default), hugepages (2 MiB-aligned,\n"
    "                     MADV_HUGEPAGE) or small-pages (MADV_NOHUGEPAGE); always written first\n"
    "  --reps N           timed calls per path and size (default 300)\n"
    "  --warmup N         untimed calls first (default 30)\n"
    "  --budget S         cap on seconds of timed calls per size and direction; fewer reps\n"
    "                     (at least 10) are taken for large sizes (default 3)\n"
    "  --device N         CUDA device (default 0)\n"
    "  --format F         text, csv or json (default text)\n"
    "  -o FILE            write the report to FILE instead of standard output\n"
    "  --json FILE        also write the JSON report to FILE (one run, two formats)\n"
    "  --emulate          use the emulated driver: figures are not GPU figures\n"
    "  --driver PATH      driver library to load (default: $PINSTAGE_DRIVER, else libcuda.so.1)\n"
    "  --quiet            no progress on standard error\n"
    "\n"
    "Each figure is the wall-clock time of one whole synchronous call. Each path runs in\n"
    "blocks of consecutive calls, the blocks of all paths alternating in 3 passes so drift\n"
    "affects them alike. Ratios are pageable median / path median: above 1 is faster than\n"
    "the driver's pageable path.\n";

typedef struct {
    size_t bytes;
    const char *label;
} bench_size;

static const bench_size seed_sizes[] = {
    {112 * 112 * 3 * 4, "112x112x3 f32"},
    {128 * 128 * 3 * 4, "128x128x3 f32"},
    {640 * 640 * 3 * 4, "640x640x3 f32"},
};

static int fail(const char *what) {
    fprintf(stderr, "pinstage-bench: %s\n", what);
    return 2;
}

static int driver_fail(const char *what, pinstage_status s) {
    fprintf(stderr, "pinstage-bench: %s: %s: %s\n", what, pinstage_status_name(s), pinstage_last_error_message());
    return 1;
}

static int parse_size(const char *s, size_t *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    double scale = 1;
    if (*end == 'K' || *end == 'k') scale = 1024.0, end++;
    else if (*end == 'M' || *end == 'm') scale = 1024.0 * 1024, end++;
    else if (*end == 'G' || *end == 'g') scale = 1024.0 * 1024 * 1024, end++;
    if (*end == 'i' && end[1] == 'B') end += 2;
    else if (*end == 'B') end++;
    if (errno || end == s || *end || v <= 0 || v * scale > 64.0 * 1024 * 1024 * 1024) return -1;
    *out = (size_t)(v * scale);
    return *out ? 0 : -1;
}

/* A whole non-negative integer, nothing after it. */
static int parse_count(const char *s, unsigned long *out) {
    char *end;
    errno = 0;
    if (*s < '0' || *s > '9') return -1;
    *out = strtoul(s, &end, 10);
    return errno || *end ? -1 : 0;
}

static int parse_seconds(const char *s, double *out) {
    char *end;
    errno = 0;
    *out = strtod(s, &end);
    return errno || end == s || *end || *out < 0 ? -1 : 0;
}

double bench_now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

int bench_compare_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double quantile(const double *sorted, size_t n, double q) {
    double pos = q * (double)(n - 1);
    size_t i = (size_t)pos;
    double frac = pos - (double)i;
    return i + 1 < n ? sorted[i] * (1 - frac) + sorted[i + 1] * frac : sorted[i];
}

static void fill_pattern(unsigned char *p, size_t n, unsigned seed) {
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        p[i] = (unsigned char)(x >> 24);
    }
}

static int emulator_path(char *out, size_t len) {
    char exe[2048];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) *slash = 0;
        const char *rel[] = {"/", "/../", "/../lib/", "/../lib64/", "/../lib/x86_64-linux-gnu/"};
        for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
            int w = snprintf(out, len, "%s%slibpinstage_emu.so", exe, rel[i]);
            if (w > 0 && (size_t)w < len && access(out, R_OK) == 0) return 0;
        }
    }
    snprintf(out, len, "libpinstage_emu.so"); /* the loader's search path */
    return 0;
}

static void describe_machine(bench_context *ctx, int device) {
    pinstage_device_info info;
    memset(&info, 0, sizeof info);
    pinstage_device_get_info(device, &info);
    snprintf(ctx->device_name, sizeof ctx->device_name, "%s", info.name);
    snprintf(ctx->pci_bus_id, sizeof ctx->pci_bus_id, "%s", info.pci_bus_id);
    ctx->compute_major = info.compute_major;
    ctx->compute_minor = info.compute_minor;
    ctx->copy_engines = info.copy_engines;
    snprintf(ctx->pcie_link, sizeof ctx->pcie_link, "unknown");
    if (!ctx->emulated) {
        /* The driver API does not report the link; sysfs does. */
        char id[32], path[256], speed[64] = "", width[32] = "";
        size_t i;
        for (i = 0; info.pci_bus_id[i] && i < sizeof id - 1; i++)
            id[i] = (char)(info.pci_bus_id[i] >= 'A' && info.pci_bus_id[i] <= 'F' ? info.pci_bus_id[i] + 32 : info.pci_bus_id[i]);
        id[i] = 0;
        FILE *f;
        snprintf(path, sizeof path, "/sys/bus/pci/devices/%s/current_link_speed", id);
        if ((f = fopen(path, "r"))) {
            if (!fgets(speed, sizeof speed, f)) speed[0] = 0;
            fclose(f);
        }
        snprintf(path, sizeof path, "/sys/bus/pci/devices/%s/current_link_width", id);
        if ((f = fopen(path, "r"))) {
            if (!fgets(width, sizeof width, f)) width[0] = 0;
            fclose(f);
        }
        double gts = atof(speed);
        int gen = gts >= 60 ? 6 : gts >= 30 ? 5 : gts >= 15 ? 4 : gts >= 7 ? 3 : gts >= 4 ? 2 : gts >= 2 ? 1 : 0;
        if (gen && atoi(width) > 0) snprintf(ctx->pcie_link, sizeof ctx->pcie_link, "Gen%d x%d", gen, atoi(width));
    }
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    snprintf(ctx->host_cpu, sizeof ctx->host_cpu, "unknown");
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
            char *v = strchr(line, ':') + 1;
            while (*v == ' ') v++;
            v[strcspn(v, "\n")] = 0;
            snprintf(ctx->host_cpu, sizeof ctx->host_cpu, "%s", v);
            break;
        }
    if (f) fclose(f);
    ctx->host_cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    time_t t = time(NULL);
    strftime(ctx->date, sizeof ctx->date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&t));
}

/* Runs each path once on a fresh pattern and checks the bytes it moved. */
static int check_path(bench_cell *c, const bench_path *p, void **state, int *ready,
                      unsigned char *scratch) {
    c->seed++;
    if (c->direction == BENCH_H2D) {
        fill_pattern(c->host, c->bytes, c->seed);
        pinstage_status s = p->setup(c, state);
        if (s) return driver_fail(p->name, s);
        *ready = 1;
        if ((s = p->run(c, *state))) return driver_fail(p->name, s);
        if ((s = pinstage_stream_synchronize(NULL)) || (s = pinstage_devbuf_copy_to_host(c->device, scratch, c->bytes)))
            return driver_fail("reading back", s);
        fill_pattern(c->host, c->bytes, c->seed);
        if (memcmp(scratch, c->host, c->bytes)) {
            fprintf(stderr, "pinstage-bench: %s h2d moved wrong bytes at %zu bytes\n", p->name, c->bytes);
            return 1;
        }
    } else {
        fill_pattern(scratch, c->bytes, c->seed);
        pinstage_status s = pinstage_devbuf_copy_from_host(c->device, scratch, c->bytes);
        if (!s) s = pinstage_stream_synchronize(NULL);
        if (s) return driver_fail("writing the pattern", s);
        memset(c->host, 0xee, c->bytes);
        if ((s = p->setup(c, state))) return driver_fail(p->name, s);
        *ready = 1;
        if ((s = p->run(c, *state))) return driver_fail(p->name, s);
        if (memcmp(scratch, c->host, c->bytes)) {
            fprintf(stderr, "pinstage-bench: %s d2h moved wrong bytes at %zu bytes\n", p->name, c->bytes);
            return 1;
        }
    }
    return 0;
}

/* How the pageable host memory is allocated. The driver's pageable path
 * varies with the pages behind it (transparent huge pages or not), so the
 * bench can measure each kind. */
enum { HOST_MALLOC, HOST_HUGEPAGES, HOST_SMALL_PAGES };
static int host_alloc = HOST_MALLOC;
static const char *const host_alloc_names[] = {"malloc", "hugepages", "small-pages"};

static unsigned char *host_memory(size_t bytes) {
    void *p = NULL;
    if (host_alloc == HOST_MALLOC) {
        p = malloc(bytes);
    } else {
        size_t huge = (size_t)2 << 20, rounded = (bytes + huge - 1) / huge * huge;
        if (posix_memalign(&p, huge, rounded)) return NULL;
        madvise(p, rounded, host_alloc == HOST_HUGEPAGES ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    }
    /* Written, as the memory a program passes has been. */
    if (p) memset(p, 0x11, bytes);
    return p;
}

/* Paths one run measures (a name may be given more than once). */
#define MAX_PATHS 32
/* Timed calls are split into this many blocks per path, alternating. */
#define PASSES 3
/* Untimed calls at the start of each block. */
#define BLOCK_WARMUP 3

typedef struct {
    size_t reps, warmup;
    double budget_s;
    int quiet;
} run_options;

/* Measures the chosen paths for one size and direction. */
static int measure_cell(bench_cell *c, const bench_path **paths, size_t npaths, const run_options *o,
                        const char *label, bench_result *out) {
    void *state[MAX_PATHS] = {0};
    int ready[MAX_PATHS] = {0};
    double *samples[MAX_PATHS] = {0};
    unsigned char *scratch = malloc(c->bytes);
    int rc = 0;
    if (!scratch) return fail("out of host memory");
    for (size_t p = 0; p < npaths && !rc; p++) rc = check_path(c, paths[p], &state[p], &ready[p], scratch);
    free(scratch);

    /* Warm-up, path by path; it also tells how long a round of all paths takes. */
    double round_us = 0;
    for (size_t p = 0; p < npaths && !rc; p++) {
        double start = bench_now_us();
        for (size_t w = 0; w < o->warmup && !rc; w++) {
            pinstage_status s = paths[p]->run(c, state[p]);
            if (s) rc = driver_fail(paths[p]->name, s);
        }
        if (o->warmup) round_us += (bench_now_us() - start) / (double)o->warmup;
    }
    size_t reps = o->reps;
    if (round_us > 0 && o->budget_s > 0) {
        size_t fit = (size_t)(o->budget_s * 1e6 / round_us);
        if (fit < reps) reps = fit < 10 ? 10 : fit;
    }
    for (size_t p = 0; p < npaths && !rc; p++)
        if (!(samples[p] = malloc(reps * sizeof(double)))) rc = fail("out of host memory");
    /* Each path runs in blocks of consecutive calls, as a pipeline calls it, so
     * a call that returns before its copy lands (the driver's pageable upload)
     * pays for it in the next call of its own path, not in another path's.
     * The blocks alternate over PASSES passes so drift affects all paths; the
     * first calls of a block, which follow another path, are not timed. */
    size_t taken[MAX_PATHS] = {0};
    for (size_t pass = 0; pass < PASSES && !rc; pass++)
        for (size_t p = 0; p < npaths && !rc; p++) {
            size_t block = reps / PASSES + (pass < reps % PASSES);
            for (size_t k = 0; k < BLOCK_WARMUP + block && !rc; k++) {
                double start = bench_now_us();
                pinstage_status s = paths[p]->run(c, state[p]);
                double elapsed = bench_now_us() - start;
                if (s) rc = driver_fail(paths[p]->name, s);
                if (k >= BLOCK_WARMUP) samples[p][taken[p]++] = elapsed;
            }
        }
    for (size_t p = 0; p < npaths; p++) {
        if (!rc) {
            qsort(samples[p], reps, sizeof(double), bench_compare_double);
            bench_result *res = &out[p];
            res->direction = c->direction;
            res->bytes = c->bytes;
            res->label = label;
            res->path = paths[p];
            res->reps = reps;
            res->median_us = quantile(samples[p], reps, 0.5);
            res->min_us = samples[p][0];
            res->p10_us = quantile(samples[p], reps, 0.1);
            res->p90_us = quantile(samples[p], reps, 0.9);
            res->gbps = (double)c->bytes / (res->median_us * 1e3);
        }
        if (ready[p]) paths[p]->teardown(c, state[p]);
        free(samples[p]);
    }
    if (!rc) {
        double pageable = 0;
        for (size_t p = 0; p < npaths; p++)
            if (!strcmp(paths[p]->name, "pageable")) pageable = out[p].median_us;
        for (size_t p = 0; p < npaths; p++) out[p].ratio = pageable > 0 ? pageable / out[p].median_us : 0;
    }
    return rc;
}

int main(int argc, char **argv) {
    bench_size sizes[64];
    size_t nsizes = 0;
    int directions = 3, device = 0, emulate = 0;
    const char *paths_arg = NULL, *output = NULL, *json_output = NULL, *driver = NULL;
    const char *profile_path = NULL, *calibrate_path = NULL;
    int thorough = 0, sched = -1, pipeline_mode = 0;
    unsigned long soak = 0;
    unsigned soak_threads = 4;
    pipeline_options pipe = {300, 5, 4, {0, 1, 3}, 3, 0};
    long pool_threads = -1;
    bench_format format = BENCH_TEXT;
    run_options o = {300, 30, 3.0, 0};
    bench_context ctx;
    memset(&ctx, 0, sizeof ctx);

    size_t pos = 0;
    for (int i = 0; i < argc && pos < sizeof ctx.command - 1; i++)
        pos += (size_t)snprintf(ctx.command + pos, sizeof ctx.command - pos, "%s%s", i ? " " : "",
                                i ? argv[i] : "pinstage-bench");

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEEDS_VALUE() \
    if (!v) return fail("missing value after an option (see --help)"); \
    i++
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage, stdout);
            return 0;
        } else if (!strcmp(a, "--sizes")) {
            NEEDS_VALUE();
            char copy[1024];
            snprintf(copy, sizeof copy, "%s", v);
            for (char *save = NULL, *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                if (nsizes == 64) return fail("at most 64 sizes");
                if (parse_size(t, &sizes[nsizes].bytes)) return fail("bad size in --sizes (e.g. 4K,1.5M,150528)");
                sizes[nsizes++].label = "";
            }
        } else if (!strcmp(a, "--sweep")) {
            NEEDS_VALUE();
            char lo[64], hi[64];
            size_t a_bytes, b_bytes;
            if (sscanf(v, "%63[^:]:%63s", lo, hi) != 2 || parse_size(lo, &a_bytes) || parse_size(hi, &b_bytes) ||
                a_bytes > b_bytes)
                return fail("bad --sweep, expected A:B such as 4K:256M");
            for (size_t b = a_bytes; b <= b_bytes && nsizes < 64; b *= 2) sizes[nsizes++] = (bench_size){b, ""};
        } else if (!strcmp(a, "--direction")) {
            NEEDS_VALUE();
            if (!strcmp(v, "h2d")) directions = 1;
            else if (!strcmp(v, "d2h")) directions = 2;
            else if (!strcmp(v, "both")) directions = 3;
            else return fail("--direction takes h2d, d2h or both");
        } else if (!strcmp(a, "--paths")) {
            NEEDS_VALUE();
            paths_arg = v;
        } else if (!strcmp(a, "--reps")) {
            NEEDS_VALUE();
            unsigned long n;
            if (parse_count(v, &n) || n < 1) return fail("--reps takes a whole number of at least 1");
            o.reps = n;
        } else if (!strcmp(a, "--warmup")) {
            NEEDS_VALUE();
            unsigned long n;
            if (parse_count(v, &n)) return fail("--warmup takes a whole number");
            o.warmup = n;
        } else if (!strcmp(a, "--budget")) {
            NEEDS_VALUE();
            if (parse_seconds(v, &o.budget_s)) return fail("--budget takes seconds, e.g. 2 or 0.5");
        } else if (!strcmp(a, "--device")) {
            NEEDS_VALUE();
            unsigned long n;
            if (parse_count(v, &n) || n > 1024) return fail("--device takes a device number");
            device = (int)n;
        } else if (!strcmp(a, "--engine")) {
            NEEDS_VALUE();
            char chunk[64];
            unsigned long threads;
            size_t bytes = 0;
            if (sscanf(v, "%63[^:]:", chunk) != 1 || !strchr(v, ':') ||
                (strcmp(chunk, "0") && parse_size(chunk, &bytes)) || parse_count(strchr(v, ':') + 1, &threads) ||
                threads > 4096)
                return fail("--engine takes CHUNK:THREADS, e.g. 1M:0 or 256K:8");
            bench_config.engine.chunk = bytes;
            bench_config.engine.threads = (unsigned)threads;
        } else if (!strcmp(a, "--profile")) {
            NEEDS_VALUE();
            profile_path = v;
        } else if (!strcmp(a, "--calibrate")) {
            NEEDS_VALUE();
            calibrate_path = v;
        } else if (!strcmp(a, "--thorough")) {
            thorough = 1;
        } else if (!strcmp(a, "--soak")) {
            NEEDS_VALUE();
            if (parse_count(v, &soak) || soak < 2) return fail("--soak takes a number of transfers, at least 2");
        } else if (!strcmp(a, "--soak-threads")) {
            NEEDS_VALUE();
            unsigned long n;
            if (parse_count(v, &n) || n < 1 || n > 256) return fail("--soak-threads takes 1 to 256");
            soak_threads = (unsigned)n;
        } else if (!strcmp(a, "--pipeline")) {
            pipeline_mode = 1;
        } else if (!strcmp(a, "--fill")) {
            NEEDS_VALUE();
            char copy[256];
            snprintf(copy, sizeof copy, "%s", v);
            pipe.nfills = 0;
            for (char *save = NULL, *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                if (pipe.nfills == 8) return fail("at most 8 values in --fill");
                if (parse_seconds(t, &pipe.fills[pipe.nfills]) || pipe.fills[pipe.nfills] > 100)
                    return fail("--fill takes multiples such as 0,1,3 (at most 100)");
                pipe.nfills++;
            }
            if (!pipe.nfills) return fail("--fill takes multiples such as 0,1,3");
        } else if (!strcmp(a, "--frames")) {
            NEEDS_VALUE();
            unsigned long n;
            if (parse_count(v, &n) || n < 1 || n > 1000000) return fail("--frames takes 1 to 1000000");
            pipe.frames = (unsigned)n;
        } else if (!strcmp(a, "--ring-slots")) {
            NEEDS_VALUE();
            unsigned long n;
            if (parse_count(v, &n) || n < 1 || n > PINSTAGE_RING_MAX_SLOTS) return fail("--ring-slots takes 1 to 64");
            pipe.slots = (unsigned)n;
        } else if (!strcmp(a, "--pool-threads")) {
            NEEDS_VALUE();
            unsigned long n;
            if (parse_count(v, &n) || n > 255) return fail("--pool-threads takes 0-255");
            pool_threads = (long)n;
        } else if (!strcmp(a, "--sched")) {
            NEEDS_VALUE();
            if (!strcmp(v, "auto")) sched = 0;
            else if (!strcmp(v, "spin")) sched = 1;
            else if (!strcmp(v, "yield")) sched = 2;
            else if (!strcmp(v, "blocking")) sched = 4;
            else return fail("--sched takes auto, spin, yield or blocking");
        } else if (!strcmp(a, "--host-alloc")) {
            NEEDS_VALUE();
            if (!strcmp(v, "malloc")) host_alloc = HOST_MALLOC;
            else if (!strcmp(v, "hugepages")) host_alloc = HOST_HUGEPAGES;
            else if (!strcmp(v, "small-pages")) host_alloc = HOST_SMALL_PAGES;
            else return fail("--host-alloc takes malloc, hugepages or small-pages");
        } else if (!strcmp(a, "--format")) {
            NEEDS_VALUE();
            if (!strcmp(v, "text")) format = BENCH_TEXT;
            else if (!strcmp(v, "csv")) format = BENCH_CSV;
            else if (!strcmp(v, "json")) format = BENCH_JSON;
            else return fail("--format takes text, csv or json");
        } else if (!strcmp(a, "-o")) {
            NEEDS_VALUE();
            output = v;
        } else if (!strcmp(a, "--json")) {
            NEEDS_VALUE();
            json_output = v;
        } else if (!strcmp(a, "--emulate")) {
            emulate = 1;
        } else if (!strcmp(a, "--driver")) {
            NEEDS_VALUE();
            driver = v;
        } else if (!strcmp(a, "--quiet")) {
            o.quiet = 1;
        } else {
            fprintf(stderr, "pinstage-bench: unknown option '%s'\n\n%s", a, usage);
            return 2;
        }
    }
    if (!nsizes) {
        memcpy(sizes, seed_sizes, sizeof seed_sizes);
        nsizes = 3;
    }

    const bench_path *paths[MAX_PATHS];
    size_t npaths = 0;
    if (paths_arg) {
        char copy[512];
        snprintf(copy, sizeof copy, "%s", paths_arg);
        for (char *save = NULL, *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            size_t k;
            for (k = 0; k < bench_path_count && strcmp(bench_paths[k].name, t); k++) {
            }
            if (k == bench_path_count) {
                fprintf(stderr, "pinstage-bench: unknown path '%s'\n", t);
                return 2;
            }
            if (npaths == MAX_PATHS) return fail("at most 32 paths in --paths");
            paths[npaths++] = &bench_paths[k];
        }
    } else {
        for (size_t k = 0; k < bench_path_count; k++) paths[npaths++] = &bench_paths[k];
    }

    /* The driver: a real one unless --emulate asks for the emulator. */
    char emu[4096];
    if (emulate && !driver) {
        emulator_path(emu, sizeof emu);
        driver = emu;
    }
    pinstage_status s = pinstage_driver_load(driver);
    if (s) {
        fprintf(stderr, "pinstage-bench: no CUDA driver: %s\n%s\n", pinstage_last_error_message(),
                "Run on a machine with an NVIDIA GPU, or pass --emulate to exercise the paths on the "
                "emulated driver (its figures are not GPU figures).");
        return 1;
    }
    pinstage_driver_info dinfo;
    if ((s = pinstage_driver_get_info(&dinfo))) return driver_fail("driver", s);
    if (dinfo.emulated && !emulate)
        fprintf(stderr, "pinstage-bench: the loaded driver is the emulator; figures are marked as such\n");
    ctx.emulated = dinfo.emulated;
    ctx.driver_version = dinfo.driver_version;
    snprintf(ctx.driver_path, sizeof ctx.driver_path, "%s", dinfo.path);
    snprintf(ctx.library_version, sizeof ctx.library_version, "%s", pinstage_version_string());
    ctx.reps = o.reps;
    ctx.warmup = o.warmup;
    ctx.time_budget_s = o.budget_s;
    if (sched >= 0) {
        /* The primary context's scheduling mode, set before it is made current. */
        int (*set_flags)(int, unsigned) = NULL;
        if ((s = pinstage_driver_get_proc("cuDevicePrimaryCtxSetFlags", 11000, (void **)&set_flags)) ||
            (s = (pinstage_status)set_flags(device, (unsigned)sched)))
            return driver_fail("--sched", s);
    }
    if ((s = pinstage_context_init(device))) return driver_fail("device", s);
    if (pool_threads >= 0 && (s = pinstage_pool_set_threads((unsigned)pool_threads))) return driver_fail("--pool-threads", s);
    if (calibrate_path) {
        pinstage_profile *measured;
        double start = bench_now_us();
        if ((s = pinstage_profile_calibrate(&measured, thorough))) return driver_fail("calibration", s);
        double seconds = (bench_now_us() - start) / 1e6;
        size_t len = pinstage_profile_describe(measured, NULL, 0);
        char *text = malloc(len + 1);
        if (text) {
            pinstage_profile_describe(measured, text, len + 1);
            fputs(text, stdout);
            free(text);
        }
        printf("# calibrated in %.2f s (%s)\n", seconds, thorough ? "thorough" : "default");
        s = pinstage_profile_save(measured, calibrate_path);
        pinstage_profile_free(measured);
        if (s) return driver_fail("saving the profile", s);
        return 0;
    }
    pinstage_profile *loaded = NULL;
    if (profile_path && (s = pinstage_profile_load(&loaded, profile_path))) return driver_fail("--profile", s);
    bench_config.profile = loaded;
    ctx.sched = sched < 0 ? 0 : sched;
    snprintf(ctx.host_alloc, sizeof ctx.host_alloc, "%s", host_alloc_names[host_alloc]);
    snprintf(ctx.profile, sizeof ctx.profile, "%s", profile_path ? profile_path : getenv("PINSTAGE_PROFILE") ? getenv("PINSTAGE_PROFILE") : "built-in");
    snprintf(ctx.engine, sizeof ctx.engine, "chunk %zu, threads %u", bench_config.engine.chunk, bench_config.engine.threads);
    pinstage_pool_info pool;
    pinstage_pool_get_info(&pool);
    ctx.pool_workers = (int)pool.workers;
    describe_machine(&ctx, device);

    if (soak) {
        FILE *out = stdout, *json = NULL;
        if (output && !(out = fopen(output, "w"))) return fail("cannot open the -o file");
        if (json_output && !(json = fopen(json_output, "w"))) return fail("cannot open the --json file");
        int rc = bench_soak(soak, soak_threads, device, &ctx, format == BENCH_JSON ? NULL : out,
                            format == BENCH_JSON ? out : json);
        if (out != stdout && fclose(out)) rc = fail("writing the -o file failed");
        if (json && fclose(json)) rc = fail("writing the --json file failed");
        pinstage_profile_free(loaded);
        return rc;
    }
    if (pipeline_mode) {
        pipe.quiet = o.quiet;
        FILE *out = stdout, *json = NULL;
        if (output && !(out = fopen(output, "w"))) return fail("cannot open the -o file");
        if (json_output && !(json = fopen(json_output, "w"))) return fail("cannot open the --json file");
        int rc = bench_pipeline(&pipe, &ctx, format == BENCH_JSON ? NULL : out, format == BENCH_JSON ? out : json);
        if (out != stdout && fclose(out)) rc = fail("writing the -o file failed");
        if (json && fclose(json)) rc = fail("writing the --json file failed");
        pinstage_profile_free(loaded);
        return rc;
    }

    bench_driver drv;
    if ((s = pinstage_driver_get_proc("cuMemAllocHost", 3020, (void **)&drv.alloc_host)) ||
        (s = pinstage_driver_get_proc("cuMemFreeHost", 2000, (void **)&drv.free_host)) ||
        (s = pinstage_driver_get_proc("cuMemcpyHtoDAsync", 3020, (void **)&drv.htod_async)) ||
        (s = pinstage_driver_get_proc("cuMemcpyDtoHAsync", 3020, (void **)&drv.dtoh_async)) ||
        (s = pinstage_driver_get_proc("cuStreamSynchronize", 2000, (void **)&drv.stream_sync)))
        return driver_fail("driver entry points", s);

    CUstream stream;
    if ((s = pinstage_stream_create(&stream, PINSTAGE_STREAM_NON_BLOCKING))) return driver_fail("stream", s);

    size_t ndirs = directions == 3 ? 2 : 1, total = nsizes * ndirs * npaths, done = 0;
    bench_result *results = calloc(total, sizeof *results);
    if (!results) return fail("out of host memory");
    int rc = 0;
    for (size_t z = 0; z < nsizes && !rc; z++)
        for (int d = 0; d < 2 && !rc; d++) {
            if (!(directions & (1 << d))) continue;
            bench_cell cell = {.direction = d ? BENCH_D2H : BENCH_H2D, .bytes = sizes[z].bytes,
                               .stream = stream, .driver = &drv, .seed = (unsigned)(z * 16 + (size_t)d * 8)};
            if (!o.quiet)
                fprintf(stderr, "[%zu/%zu] %s %zu bytes\n", done / npaths + 1, total / npaths,
                        bench_direction_name(cell.direction), cell.bytes);
            cell.host = host_memory(cell.bytes);
            if (!cell.host) {
                rc = fail("out of host memory");
                break;
            }
            if ((s = pinstage_devbuf_alloc_u8(&cell.device, cell.bytes))) {
                free(cell.host);
                rc = driver_fail("device memory", s);
                break;
            }
            rc = measure_cell(&cell, paths, npaths, &o, sizes[z].label, results + done);
            done += npaths;
            pinstage_devbuf_free(cell.device);
            free(cell.host);
        }
    pinstage_stream_destroy(stream);
    if (rc) {
        free(results);
        return rc;
    }

    FILE *out = stdout;
    if (output && !(out = fopen(output, "w"))) {
        free(results);
        return fail("cannot open the -o file");
    }
    bench_report(out, format, &ctx, results, done);
    if (out != stdout && fclose(out)) rc = fail("writing the -o file failed");
    if (json_output) {
        FILE *j = fopen(json_output, "w");
        if (!j) {
            rc = fail("cannot open the --json file");
        } else {
            bench_report(j, BENCH_JSON, &ctx, results, done);
            if (fclose(j)) rc = fail("writing the --json file failed");
        }
    }
    free(results);
    pinstage_profile_free(loaded);
    return rc;
}
