/* SPDX-License-Identifier: MIT */
/* pinstage-bench: options and the modes. The measurement loop and the
 * correctness check are in bench_util.c, the paths in bench_paths.c.
 * Run `pinstage-bench --help` for usage. */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
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
    "  --conditions       no path table: pageable, auto and floor where programs run them: in\n"
    "                     fresh processes, paced by idle time and other copies, beside CPU load\n"
    "                     and memory load, several threads at once, with CPU time per GB (see\n"
    "                     docs/benchmarks.md); --sizes sets the sizes (default 147K,4.7M,64M),\n"
    "                     --sweep the CPU-load sweep (default 4K:256M)\n"
    "  --processes N      with --conditions: fresh processes (default 10)\n"
    "  --cold             with the path table: each call's host memory is the next of several\n"
    "                     written buffers (1 GiB in all, at most 16), so it is not in a cache,\n"
    "                     as a program's freshly produced frame often is not\n"
    "  --paced US         with the path table: each call, timed or not, after US microseconds\n"
    "                     of sleep and the driver's pageable copy of other memory of the same\n"
    "                     size and direction, as a frame loop calls it (--conditions uses 5000)\n"
    "  --pace-copy C      with --paced: yes (default) or no, the sleep alone: which of the two a\n"
    "                     paced call's time follows\n"
    "  --pace-wait W      with --paced: sleep (default) or spin, the calling thread busy-waits the\n"
    "                     gap on the clock and never gives its CPU up\n"
    "  --pace-touch T     with --paced: no (default) or yes, after the gap the calling thread reads\n"
    "                     the call's host memory once, as a frame loop's own work would have just\n"
    "                     written an upload's source\n"
    "  --load KIND        with the path table: cpu (arithmetic on all CPUs but 4) or memory (4\n"
    "                     threads streaming memcpy) in this process while it measures\n"
    "  --trace FILE       no benchmark: summarize the timeline a run with PINSTAGE_TRACE=FILE wrote\n"
    "  --devices LIST     no path table: all, or device numbers (0,1): each GPU alone, then all at\n"
    "                     once, one thread, bound buffer and stream each; floor and auto at --sizes\n"
    "                     (default 4.7M,64M), both directions; aggregate GB/s beside the sum of the\n"
    "                     single-GPU figures and the host's memcpy ceiling; NUMA nodes of each GPU,\n"
    "                     its pinned memory and its copy threads; remote placement where the host\n"
    "                     has several nodes; --budget S: seconds per run (default 1)\n"
    "  --soak N           no path table: N transfers of mixed shapes, directions and calls on\n"
    "                     several threads, every byte verified; errors, mismatches, RSS and\n"
    "                     pinned bytes at 10% and at the end (exit 1 on any error or mismatch)\n"
    "  --soak-threads T   with --soak: threads, each with its own buffer, ring and stream (default 4)\n"
    "  --pool-threads N   worker threads of the engine's pool (default: one per CPU the process\n"
    "                     may use, less one, and one more from 8 CPUs up)\n"
    "  --pool-spin US     how long a worker spins for more work before it sleeps\n"
    "                     (pinstage_pool_set_spin_us; default the library's)\n"
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
    "the driver's pageable path. Upload / download adapt their route to what recent\n"
    "transfers achieved (PINSTAGE_ADAPTIVE=0 turns that off).\n";

typedef struct {
    size_t bytes;
    const char *label;
} bench_size;

static const bench_size seed_sizes[] = {
    {112 * 112 * 3 * 4, "112x112x3 f32"},
    {128 * 128 * 3 * 4, "128x128x3 f32"},
    {640 * 640 * 3 * 4, "640x640x3 f32"},
};

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

/* Paths one run measures (a name may be given more than once). */
#define MAX_PATHS 32

/* Every option, long form; the short ones are in the getopt string. */
enum {
    OPT_SIZES = 256, OPT_SWEEP, OPT_DIRECTION, OPT_PATHS, OPT_ENGINE, OPT_PROFILE, OPT_CALIBRATE, OPT_THOROUGH,
    OPT_PIPELINE, OPT_FILL, OPT_FRAMES, OPT_RING_SLOTS, OPT_CONDITIONS, OPT_PROCESSES, OPT_CONDITIONS_CHILD,
    OPT_TRACE, OPT_SOAK, OPT_SOAK_THREADS, OPT_POOL_THREADS, OPT_POOL_SPIN, OPT_SCHED, OPT_HOST_ALLOC, OPT_REPS, OPT_WARMUP,
    OPT_BUDGET, OPT_DEVICE, OPT_FORMAT, OPT_JSON, OPT_EMULATE, OPT_DRIVER, OPT_QUIET, OPT_LOAD, OPT_COLD, OPT_PACED, OPT_PACE_COPY, OPT_PACE_WAIT, OPT_PACE_TOUCH,
    OPT_DEVICES
};

static const struct option options[] = {
    {"help", no_argument, NULL, 'h'},
    {"sizes", required_argument, NULL, OPT_SIZES},
    {"sweep", required_argument, NULL, OPT_SWEEP},
    {"direction", required_argument, NULL, OPT_DIRECTION},
    {"paths", required_argument, NULL, OPT_PATHS},
    {"engine", required_argument, NULL, OPT_ENGINE},
    {"profile", required_argument, NULL, OPT_PROFILE},
    {"calibrate", required_argument, NULL, OPT_CALIBRATE},
    {"thorough", no_argument, NULL, OPT_THOROUGH},
    {"pipeline", no_argument, NULL, OPT_PIPELINE},
    {"fill", required_argument, NULL, OPT_FILL},
    {"frames", required_argument, NULL, OPT_FRAMES},
    {"ring-slots", required_argument, NULL, OPT_RING_SLOTS},
    {"conditions", no_argument, NULL, OPT_CONDITIONS},
    {"processes", required_argument, NULL, OPT_PROCESSES},
    {"conditions-child", required_argument, NULL, OPT_CONDITIONS_CHILD},
    {"trace", required_argument, NULL, OPT_TRACE},
    {"soak", required_argument, NULL, OPT_SOAK},
    {"soak-threads", required_argument, NULL, OPT_SOAK_THREADS},
    {"pool-threads", required_argument, NULL, OPT_POOL_THREADS},
    {"pool-spin", required_argument, NULL, OPT_POOL_SPIN},
    {"sched", required_argument, NULL, OPT_SCHED},
    {"host-alloc", required_argument, NULL, OPT_HOST_ALLOC},
    {"reps", required_argument, NULL, OPT_REPS},
    {"warmup", required_argument, NULL, OPT_WARMUP},
    {"budget", required_argument, NULL, OPT_BUDGET},
    {"device", required_argument, NULL, OPT_DEVICE},
    {"format", required_argument, NULL, OPT_FORMAT},
    {"json", required_argument, NULL, OPT_JSON},
    {"emulate", no_argument, NULL, OPT_EMULATE},
    {"driver", required_argument, NULL, OPT_DRIVER},
    {"quiet", no_argument, NULL, OPT_QUIET},
    {"load", required_argument, NULL, OPT_LOAD},
    {"cold", no_argument, NULL, OPT_COLD},
    {"paced", required_argument, NULL, OPT_PACED},
    {"pace-copy", required_argument, NULL, OPT_PACE_COPY},
    {"pace-wait", required_argument, NULL, OPT_PACE_WAIT},
    {"pace-touch", required_argument, NULL, OPT_PACE_TOUCH},
    {"devices", required_argument, NULL, OPT_DEVICES},
    {NULL, 0, NULL, 0},
};

/* A value out of a list of names; -1 if it is none of them. */
static int pick(const char *v, const char *const *names, int n) {
    for (int i = 0; i < n; i++)
        if (!strcmp(v, names[i])) return i;
    return -1;
}

/* Opens the report files of a mode, runs it, closes them. */
typedef int (*mode_fn)(void *arg, const bench_context *ctx, FILE *text, FILE *json);

static int run_mode(mode_fn fn, void *arg, const bench_context *ctx, bench_format format, const char *output,
                    const char *json_output) {
    FILE *out = stdout, *json = NULL;
    if (output && !(out = fopen(output, "w"))) return bench_fail("cannot open the -o file");
    if (json_output && !(json = fopen(json_output, "w"))) return bench_fail("cannot open the --json file");
    int rc = fn(arg, ctx, format == BENCH_JSON ? NULL : out, format == BENCH_JSON ? out : json);
    if (out != stdout && fclose(out)) rc = bench_fail("writing the -o file failed");
    if (json && fclose(json)) rc = bench_fail("writing the --json file failed");
    return rc;
}

typedef struct {
    unsigned long transfers;
    unsigned threads;
    int device;
} soak_args;

static int soak_mode(void *arg, const bench_context *ctx, FILE *text, FILE *json) {
    soak_args *a = arg;
    return bench_soak(a->transfers, a->threads, a->device, ctx, text, json);
}

static int pipeline_mode(void *arg, const bench_context *ctx, FILE *text, FILE *json) {
    return bench_pipeline(arg, ctx, text, json);
}

static int conditions_mode(void *arg, const bench_context *ctx, FILE *text, FILE *json) {
    return bench_conditions(arg, ctx, text, json);
}

static int devices_mode(void *arg, const bench_context *ctx, FILE *text, FILE *json) {
    return bench_devices(arg, ctx, text, json);
}

/* The path table: every chosen size, direction and path. */
/* --cold: the next of several host buffers before every call. */
#define COLD_BYTES ((size_t)1 << 30)
#define COLD_MAX 16
typedef struct {
    bench_cell *cell;
    unsigned char *hosts[COLD_MAX];
    size_t count, next;
} cold_hosts;

static void next_host(void *arg) {
    cold_hosts *c = arg;
    c->cell->host = c->hosts[c->next++ % c->count];
}

/* --paced: before every call, idle and another copy, as between a frame
 * loop's transfers (the same as --conditions' paced rows, for any path). */
typedef struct {
    bench_pace pace;
    cold_hosts *cold;  /* also --cold: the next host buffer, else NULL */
    bench_cell *touch; /* --pace-touch: the cell whose host memory is read, else NULL */
} paced_calls;

static void pace(void *arg) {
    paced_calls *p = arg;
    bench_pace_call(&p->pace);
    if (p->cold) next_host(p->cold);
    if (p->touch) bench_touch(p->touch->host, p->touch->bytes);
}

static int table_mode(const bench_size *sizes, size_t nsizes, int directions, const bench_path **paths,
                      size_t npaths, const bench_run_options *run, int cold, double paced_us,
                      const bench_context *ctx,
                      bench_format format, const char *output, const char *json_output) {
    bench_run_options options = *run;
    const bench_run_options *o = &options;
    bench_driver drv;
    pinstage_status s;
    if ((s = pinstage_driver_get_proc("cuMemAllocHost", 3020, (void **)&drv.alloc_host)) ||
        (s = pinstage_driver_get_proc("cuMemFreeHost", 2000, (void **)&drv.free_host)) ||
        (s = pinstage_driver_get_proc("cuMemcpyHtoDAsync", 3020, (void **)&drv.htod_async)) ||
        (s = pinstage_driver_get_proc("cuMemcpyDtoHAsync", 3020, (void **)&drv.dtoh_async)) ||
        (s = pinstage_driver_get_proc("cuStreamSynchronize", 2000, (void **)&drv.stream_sync)))
        return bench_driver_fail("driver entry points", s);

    CUstream stream;
    if ((s = pinstage_stream_create(&stream, PINSTAGE_STREAM_NON_BLOCKING))) return bench_driver_fail("stream", s);

    size_t ndirs = directions == 3 ? 2 : 1, total = nsizes * ndirs * npaths, done = 0;
    bench_result *results = calloc(total, sizeof *results);
    if (!results) return bench_fail("out of host memory");
    int rc = 0;
    for (size_t z = 0; z < nsizes && !rc; z++)
        for (int d = 0; d < 2 && !rc; d++) {
            if (!(directions & (1 << d))) continue;
            bench_cell cell = {.direction = d ? BENCH_D2H : BENCH_H2D, .bytes = sizes[z].bytes,
                               .stream = stream, .driver = &drv, .seed = (unsigned)(z * 16 + (size_t)d * 8)};
            if (!o->quiet)
                fprintf(stderr, "[%zu/%zu] %s %zu bytes\n", done / npaths + 1, total / npaths,
                        bench_direction_name(cell.direction), cell.bytes);
            cell.host = bench_host_memory(cell.bytes);
            if (!cell.host) {
                rc = bench_fail("out of host memory");
                break;
            }
            if ((s = pinstage_devbuf_alloc_u8(&cell.device, cell.bytes))) {
                free(cell.host);
                rc = bench_driver_fail("device memory", s);
                break;
            }
            cold_hosts ch = {&cell, {cell.host}, 1, 0};
            if (cold) {
                size_t want = COLD_BYTES / cell.bytes;
                for (; ch.count < want && ch.count < COLD_MAX; ch.count++)
                    if (!(ch.hosts[ch.count] = bench_host_memory(cell.bytes))) break;
                options.before_call = next_host;
                options.before_arg = &ch;
            }
            paced_calls pc = {{paced_us, cell.direction, NULL, NULL, ctx->pace_spin}, cold ? &ch : NULL,
                              ctx->pace_touch ? &cell : NULL};
            if (paced_us > 0 && ctx->pace_copy) {
                if (!(pc.pace.other_host = bench_host_memory(cell.bytes)))
                    rc = bench_fail("out of host memory");
                else if ((s = pinstage_devbuf_alloc_u8(&pc.pace.other_device, cell.bytes)))
                    rc = bench_driver_fail("device memory", s);
            }
            if (paced_us > 0 && !rc) {
                options.before_call = pace;
                options.before_arg = &pc;
            }
            if (!rc) rc = bench_measure(&cell, paths, npaths, o, sizes[z].label, results + done);
            done += npaths;
            pinstage_devbuf_free(pc.pace.other_device);
            free(pc.pace.other_host);
            pinstage_devbuf_free(cell.device);
            for (size_t i = 0; i < ch.count; i++) free(ch.hosts[i]);
        }
    pinstage_stream_destroy(stream);
    if (rc) {
        free(results);
        return rc;
    }

    FILE *out = stdout;
    if (output && !(out = fopen(output, "w"))) {
        free(results);
        return bench_fail("cannot open the -o file");
    }
    bench_report(out, format, ctx, results, done);
    if (out != stdout && fclose(out)) rc = bench_fail("writing the -o file failed");
    if (json_output) {
        FILE *j = fopen(json_output, "w");
        if (!j) {
            rc = bench_fail("cannot open the --json file");
        } else {
            bench_report(j, BENCH_JSON, ctx, results, done);
            if (fclose(j)) rc = bench_fail("writing the --json file failed");
        }
    }
    free(results);
    return rc;
}

int main(int argc, char **argv) {
    bench_size sizes[64];
    size_t nsizes = 0, sweep_lo = 0, sweep_hi = 0;
    int directions = 3, device = 0, emulate = 0, sweep_given = 0;
    const char *paths_arg = NULL, *output = NULL, *json_output = NULL, *driver = NULL, *trace_path = NULL;
    const char *profile_path = NULL, *calibrate_path = NULL;
    int thorough = 0, sched = -1, pipeline = 0, conditions = 0, load_kind = BENCH_LOAD_NONE, cold = 0;
    double paced_us = 0;
    int pace_copy = -1; /* -1: not given (yes) */
    int pace_spin = -1, pace_touch = -1; /* -1: not given (sleep, no) */
    int budget_given = 0;
    const char *devices_arg = NULL;
    long child = -1;
    unsigned long soak = 0, processes = 10, n;
    unsigned soak_threads = 4;
    pipeline_options pipe = {300, 5, 4, {0, 1, 3}, 3, 0};
    long pool_threads = -1, pool_spin = -1;
    bench_format format = BENCH_TEXT;
    bench_run_options o = {300, 30, 3.0, 0, NULL, NULL};
    bench_context ctx;
    memset(&ctx, 0, sizeof ctx);

    size_t pos = 0;
    for (int i = 0; i < argc && pos < sizeof ctx.command - 1; i++)
        pos += (size_t)snprintf(ctx.command + pos, sizeof ctx.command - pos, "%s%s", i ? " " : "",
                                i ? argv[i] : "pinstage-bench");

    static const char *const directions_names[] = {"", "h2d", "d2h", "both"};
    static const char *const sched_names[] = {"auto", "spin", "yield", "", "blocking"};
    static const char *const format_names[] = {"text", "csv", "json"};
    static const char *const load_names[] = {"none", "cpu", "memory"};
    static const char *const no_yes[] = {"no", "yes"};
    static const char *const sleep_spin[] = {"sleep", "spin"};
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "ho:", options, NULL)) != -1) {
        const char *v = optarg;
        switch (c) {
        case 'h':
            fputs(usage, stdout);
            return 0;
        case OPT_SIZES: {
            char copy[1024];
            snprintf(copy, sizeof copy, "%s", v);
            for (char *save = NULL, *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                if (nsizes == 64) return bench_fail("at most 64 sizes");
                if (parse_size(t, &sizes[nsizes].bytes)) return bench_fail("bad size in --sizes (e.g. 4K,1.5M,150528)");
                sizes[nsizes++].label = "";
            }
            break;
        }
        case OPT_SWEEP: {
            char lo[64], hi[64];
            if (sscanf(v, "%63[^:]:%63s", lo, hi) != 2 || parse_size(lo, &sweep_lo) || parse_size(hi, &sweep_hi) ||
                sweep_lo > sweep_hi)
                return bench_fail("bad --sweep, expected A:B such as 4K:256M");
            sweep_given = 1;
            break;
        }
        case OPT_DIRECTION:
            if ((directions = pick(v, directions_names, 4)) <= 0) return bench_fail("--direction takes h2d, d2h or both");
            break;
        case OPT_PATHS:
            paths_arg = v;
            break;
        case OPT_REPS:
            if (parse_count(v, &n) || n < 1) return bench_fail("--reps takes a whole number of at least 1");
            o.reps = n;
            break;
        case OPT_WARMUP:
            if (parse_count(v, &n)) return bench_fail("--warmup takes a whole number");
            o.warmup = n;
            break;
        case OPT_BUDGET:
            if (parse_seconds(v, &o.budget_s)) return bench_fail("--budget takes seconds, e.g. 2 or 0.5");
            budget_given = 1;
            break;
        case OPT_DEVICE:
            if (parse_count(v, &n) || n > 1024) return bench_fail("--device takes a device number");
            device = (int)n;
            break;
        case OPT_ENGINE: {
            char chunk[64];
            unsigned long threads;
            size_t bytes = 0;
            if (sscanf(v, "%63[^:]:", chunk) != 1 || !strchr(v, ':') ||
                (strcmp(chunk, "0") && parse_size(chunk, &bytes)) || parse_count(strchr(v, ':') + 1, &threads) ||
                threads > 4096)
                return bench_fail("--engine takes CHUNK:THREADS, e.g. 1M:0 or 256K:8");
            bench_config.engine.chunk = bytes;
            bench_config.engine.threads = (unsigned)threads;
            break;
        }
        case OPT_PROFILE:
            profile_path = v;
            break;
        case OPT_CALIBRATE:
            calibrate_path = v;
            break;
        case OPT_THOROUGH:
            thorough = 1;
            break;
        case OPT_SOAK:
            if (parse_count(v, &soak) || soak < 2) return bench_fail("--soak takes a number of transfers, at least 2");
            break;
        case OPT_SOAK_THREADS:
            if (parse_count(v, &n) || n < 1 || n > 256) return bench_fail("--soak-threads takes 1 to 256");
            soak_threads = (unsigned)n;
            break;
        case OPT_PIPELINE:
            pipeline = 1;
            break;
        case OPT_CONDITIONS:
            conditions = 1;
            break;
        case OPT_PROCESSES:
            if (parse_count(v, &processes) || processes < 1 || processes > 1000)
                return bench_fail("--processes takes 1 to 1000");
            break;
        case OPT_CONDITIONS_CHILD:
            if (parse_count(v, &n) || n > 100000) return bench_fail("--conditions-child takes a process number");
            child = (long)n;
            break;
        case OPT_TRACE:
            trace_path = v;
            break;
        case OPT_FILL: {
            char copy[256];
            snprintf(copy, sizeof copy, "%s", v);
            pipe.nfills = 0;
            for (char *save = NULL, *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                if (pipe.nfills == 8) return bench_fail("at most 8 values in --fill");
                if (parse_seconds(t, &pipe.fills[pipe.nfills]) || pipe.fills[pipe.nfills] > 100)
                    return bench_fail("--fill takes multiples such as 0,1,3 (at most 100)");
                pipe.nfills++;
            }
            if (!pipe.nfills) return bench_fail("--fill takes multiples such as 0,1,3");
            break;
        }
        case OPT_FRAMES:
            if (parse_count(v, &n) || n < 1 || n > 1000000) return bench_fail("--frames takes 1 to 1000000");
            pipe.frames = (unsigned)n;
            break;
        case OPT_RING_SLOTS:
            if (parse_count(v, &n) || n < 1 || n > PINSTAGE_RING_MAX_SLOTS) return bench_fail("--ring-slots takes 1 to 64");
            pipe.slots = (unsigned)n;
            break;
        case OPT_POOL_THREADS:
            if (parse_count(v, &n) || n > 255) return bench_fail("--pool-threads takes 0-255");
            pool_threads = (long)n;
            break;
        case OPT_POOL_SPIN:
            if (parse_count(v, &n) || n > 1000000) return bench_fail("--pool-spin takes 0-1000000 (microseconds)");
            pool_spin = (long)n;
            break;
        case OPT_SCHED:
            if ((sched = pick(v, sched_names, 5)) < 0 || sched == 3)
                return bench_fail("--sched takes auto, spin, yield or blocking");
            break;
        case OPT_HOST_ALLOC:
            if ((bench_host_alloc = pick(v, bench_host_alloc_names, 3)) < 0)
                return bench_fail("--host-alloc takes malloc, hugepages or small-pages");
            break;
        case OPT_FORMAT: {
            int f = pick(v, format_names, 3);
            if (f < 0) return bench_fail("--format takes text, csv or json");
            format = (bench_format)f;
            break;
        }
        case 'o':
            output = v;
            break;
        case OPT_JSON:
            json_output = v;
            break;
        case OPT_EMULATE:
            emulate = 1;
            break;
        case OPT_DRIVER:
            driver = v;
            break;
        case OPT_QUIET:
            o.quiet = 1;
            break;
        case OPT_COLD:
            cold = 1;
            break;
        case OPT_PACED:
            if (parse_seconds(v, &paced_us) || !(paced_us <= 1e6))
                return bench_fail("--paced takes 0-1000000 (microseconds of idle before each call)");
            break;
        case OPT_PACE_COPY:
            if ((pace_copy = pick(v, no_yes, 2)) < 0) return bench_fail("--pace-copy takes yes or no");
            break;
        case OPT_PACE_WAIT:
            if ((pace_spin = pick(v, sleep_spin, 2)) < 0) return bench_fail("--pace-wait takes sleep or spin");
            break;
        case OPT_PACE_TOUCH:
            if ((pace_touch = pick(v, no_yes, 2)) < 0) return bench_fail("--pace-touch takes yes or no");
            break;
        case OPT_DEVICES:
            devices_arg = v;
            break;
        case OPT_LOAD:
            if ((load_kind = pick(v, load_names, 3)) < 0) return bench_fail("--load takes cpu or memory");
            break;
        default:
            if (optopt && optopt < 256 && optopt != '?')
                fprintf(stderr, "pinstage-bench: option -%c needs a value (see --help)\n", optopt);
            else if (optopt)
                fprintf(stderr, "pinstage-bench: option '%s' needs a value (see --help)\n", argv[optind - 1]);
            else
                fprintf(stderr, "pinstage-bench: unknown option '%s'\n\n%s", argv[optind - 1], usage);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "pinstage-bench: unexpected argument '%s'\n\n%s", argv[optind], usage);
        return 2;
    }
    if (trace_path) return bench_trace_summary(trace_path, stdout);
    if (sweep_given && !conditions)
        for (size_t b = sweep_lo; b <= sweep_hi && nsizes < 64; b *= 2) sizes[nsizes++] = (bench_size){b, ""};

    if ((pace_copy >= 0 || pace_spin >= 0 || pace_touch >= 0) && !(paced_us > 0))
        return bench_fail("--pace-copy, --pace-wait and --pace-touch go with --paced");

    const bench_path *paths[BENCH_MAX_PATHS];
    size_t npaths = 0;
    if (paths_arg) {
        char copy[512];
        snprintf(copy, sizeof copy, "%s", paths_arg);
        for (char *save = NULL, *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            const bench_path *p = bench_find_path(t);
            if (!p) {
                fprintf(stderr, "pinstage-bench: unknown path '%s'\n", t);
                return 2;
            }
            if (npaths == BENCH_MAX_PATHS) return bench_fail("at most 32 paths in --paths");
            paths[npaths++] = p;
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
    if ((s = pinstage_driver_get_info(&dinfo))) return bench_driver_fail("driver", s);
    if (dinfo.emulated && !emulate && child < 0)
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
            return bench_driver_fail("--sched", s);
    }
    if ((s = pinstage_context_init(device))) return bench_driver_fail("device", s);
    if (pool_threads >= 0 && (s = pinstage_pool_set_threads((unsigned)pool_threads)))
        return bench_driver_fail("--pool-threads", s);
    if (pool_spin >= 0) pinstage_pool_set_spin_us((unsigned)pool_spin);
    if (calibrate_path) {
        pinstage_profile *measured;
        double start = bench_now_us();
        if ((s = pinstage_profile_calibrate(&measured, thorough))) return bench_driver_fail("calibration", s);
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
        if (s) return bench_driver_fail("saving the profile", s);
        return 0;
    }
    pinstage_profile *loaded = NULL;
    if (profile_path && (s = pinstage_profile_load(&loaded, profile_path))) return bench_driver_fail("--profile", s);
    bench_config.profile = loaded;
    ctx.sched = sched < 0 ? 0 : sched;
    snprintf(ctx.host_alloc, sizeof ctx.host_alloc, "%s", bench_host_alloc_names[bench_host_alloc]);
    snprintf(ctx.profile, sizeof ctx.profile, "%s",
             profile_path ? profile_path : getenv("PINSTAGE_PROFILE") ? getenv("PINSTAGE_PROFILE") : "built-in");
    snprintf(ctx.engine, sizeof ctx.engine, "chunk %zu, threads %u", bench_config.engine.chunk,
             bench_config.engine.threads);
    pinstage_pool_info pool;
    pinstage_pool_get_info(&pool);
    ctx.pool_workers = (int)pool.workers;
    ctx.paced_us = paced_us;
    ctx.pace_copy = pace_copy != 0;
    ctx.pace_spin = pace_spin > 0;
    ctx.pace_touch = pace_touch > 0;
    describe_machine(&ctx, device);

    int rc;
    if (conditions || child >= 0) {
        conditions_options co;
        memset(&co, 0, sizeof co);
        co.processes = (unsigned)processes;
        co.quiet = o.quiet;
        co.device = device;
        co.sweep_lo = sweep_given ? sweep_lo : 4096;
        co.sweep_hi = sweep_given ? sweep_hi : (size_t)256 << 20;
        for (size_t i = 0; i < nsizes && i < 8; i++) co.sizes[co.nsizes++] = sizes[i].bytes;
        if (!co.nsizes) {
            co.sizes[co.nsizes++] = 112 * 112 * 3 * 4;
            co.sizes[co.nsizes++] = 640 * 640 * 3 * 4;
            co.sizes[co.nsizes++] = (size_t)64 << 20;
        }
        /* A fresh process gets what this one was given: driver, device,
         * profile, pool, host memory; --sizes it is told. */
        static char exe[4096];
        ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
        exe[len > 0 ? len : 0] = 0;
        co.exe = exe;
        static char *args[32];
        static char device_arg[24], pool_arg[24], spin_arg[24];
        size_t k = 0;
        args[k++] = "--driver";
        args[k++] = ctx.driver_path;
        snprintf(device_arg, sizeof device_arg, "%d", device);
        args[k++] = "--device";
        args[k++] = device_arg;
        args[k++] = "--host-alloc";
        args[k++] = (char *)bench_host_alloc_names[bench_host_alloc];
        if (profile_path) {
            args[k++] = "--profile";
            args[k++] = (char *)profile_path;
        }
        if (pool_threads >= 0) {
            snprintf(pool_arg, sizeof pool_arg, "%ld", pool_threads);
            args[k++] = "--pool-threads";
            args[k++] = pool_arg;
        }
        if (pool_spin >= 0) {
            snprintf(spin_arg, sizeof spin_arg, "%ld", pool_spin);
            args[k++] = "--pool-spin";
            args[k++] = spin_arg;
        }
        co.child_args = args;
        co.nchild_args = k;
        rc = child >= 0 ? bench_conditions_child(&co, (unsigned)child)
                        : run_mode(conditions_mode, &co, &ctx, format, output, json_output);
    } else if (devices_arg) {
        devices_options d;
        memset(&d, 0, sizeof d);
        d.seconds = budget_given ? o.budget_s : 1.0;
        d.quiet = o.quiet;
        int count = 0;
        if ((s = pinstage_device_count(&count))) return bench_driver_fail("device count", s);
        if (!strcmp(devices_arg, "all")) {
            for (int i = 0; i < count && d.ndevices < 16; i++) d.devices[d.ndevices++] = i;
        } else {
            char copy[256];
            snprintf(copy, sizeof copy, "%s", devices_arg);
            for (char *save = NULL, *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                if (parse_count(t, &n) || (long)n >= count || d.ndevices == 16)
                    return bench_fail("--devices takes all, or up to 16 device numbers the driver has (0,1)");
                d.devices[d.ndevices++] = (int)n;
            }
        }
        if (!d.ndevices) return bench_fail("--devices: no device");
        for (size_t i = 0; i < nsizes && i < 8; i++) d.sizes[d.nsizes++] = sizes[i].bytes;
        if (!d.nsizes) {
            d.sizes[d.nsizes++] = 640 * 640 * 3 * 4;
            d.sizes[d.nsizes++] = (size_t)64 << 20;
        }
        rc = run_mode(devices_mode, &d, &ctx, format, output, json_output);
    } else if (soak) {
        soak_args a = {soak, soak_threads, device};
        rc = run_mode(soak_mode, &a, &ctx, format, output, json_output);
    } else if (pipeline) {
        pipe.quiet = o.quiet;
        rc = run_mode(pipeline_mode, &pipe, &ctx, format, output, json_output);
    } else {
        if (!nsizes) {
            memcpy(sizes, seed_sizes, sizeof seed_sizes);
            nsizes = 3;
        }
        bench_load l;
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        if (load_kind == BENCH_LOAD_CPU) bench_load_start(&l, cpus > 4 ? (unsigned)(cpus - 4) : 0, BENCH_LOAD_CPU);
        if (load_kind == BENCH_LOAD_MEMORY) bench_load_start(&l, 4, BENCH_LOAD_MEMORY);
        rc = table_mode(sizes, nsizes, directions, paths, npaths, &o, cold, paced_us, &ctx, format, output,
                        json_output);
        if (load_kind != BENCH_LOAD_NONE) bench_load_stop(&l);
    }
    pinstage_profile_free(loaded);
    return rc;
}
