/* SPDX-License-Identifier: MIT */
/* pinstage-bench: every transfer path measured with one method, side by side. */
#ifndef PINSTAGE_BENCH_H
#define PINSTAGE_BENCH_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "pinstage.h"

typedef enum { BENCH_H2D, BENCH_D2H } bench_direction;

/* Driver entry points the raw paths call directly, with no library code. */
typedef struct bench_driver {
    int (*alloc_host)(void **, size_t);
    int (*free_host)(void *);
    int (*htod_async)(CUdeviceptr, const void *, size_t, CUstream);
    int (*dtoh_async)(void *, CUdeviceptr, size_t, CUstream);
    int (*stream_sync)(CUstream);
} bench_driver;

/* Settings the paths take from the command line. */
typedef struct bench_settings {
    pinstage_plan engine;       /* the "engine" path's fixed plan */
    const pinstage_profile *profile; /* what "auto" follows: the default unless --profile */
} bench_settings;
extern bench_settings bench_config;

/* Everything one (size, direction) cell's paths share. */
typedef struct bench_cell {
    bench_direction direction;
    size_t bytes;
    CUstream stream;
    const bench_driver *driver;
    unsigned char *host;     /* pageable source (H2D) or destination (D2H) */
    pinstage_devbuf *device; /* bytes as u8 elements */
    unsigned seed;           /* the pattern the correctness check expects */
} bench_cell;

typedef struct bench_path {
    const char *name;
    const char *what;
    /* Prepares per-cell state; returns non-zero status on failure. */
    pinstage_status (*setup)(bench_cell *cell, void **state);
    /* One transfer, the timed unit. */
    pinstage_status (*run)(bench_cell *cell, void *state);
    void (*teardown)(bench_cell *cell, void *state);
    /* Paths of upload / download: the buffer a state holds (its stats say
     * which route each call took); NULL for the others. */
    pinstage_buffer *(*buffer)(void *state);
} bench_path;

extern const bench_path bench_paths[];
extern const size_t bench_path_count;

typedef struct bench_result {
    bench_direction direction;
    size_t bytes;
    const char *label; /* "112x112x3 f32" for the seed's shapes, else "" */
    const bench_path *path;
    size_t reps;
    double median_us, min_us, p10_us, p90_us;
    double mean_us; /* a slow call now and then (a probe of the other route) shows here, not in the median */
    double gbps;      /* 1e9 bytes per second at the median */
    double ratio;     /* pageable median / this median; 0 if pageable not measured */
    double cpu_us_per_gb; /* process CPU time during the timed calls per 1e9 bytes moved */
    /* With a call before each (--paced, the paced condition): the CPU the
     * process's other threads used meanwhile (the measuring thread's own
     * excluded), per 1e9 bytes moved: pool workers up ahead of the next
     * transfer, the driver's threads. -1 without. */
    double gap_cpu_us_per_gb;
    double pageable_share; /* paths with a buffer: timed calls that took the pageable route / reps; else -1 */
    unsigned engine_threads; /* paths with a buffer: the engine's thread count for the size after the
                                timed calls (pinstage_route_get_info); 0: not governed */
} bench_result;

typedef struct bench_context {
    char date[64];
    char device_name[256];
    char pci_bus_id[32];
    char pcie_link[64]; /* "Gen5 x16", or "unknown" */
    int compute_major, compute_minor, copy_engines;
    int driver_version;
    char driver_path[512];
    int emulated;
    char library_version[32];
    char host_cpu[256];
    int host_cores;
    size_t warmup, reps;
    double time_budget_s;
    char command[1024];
    int sched;           /* the context's scheduling flags (0: auto) */
    char host_alloc[16]; /* malloc, hugepages or small-pages */
    char profile[512];   /* the profile "auto" followed */
    char engine[64];     /* the engine path's settings */
    int pool_workers;
    double paced_us;     /* --paced: idle before each call, and another copy (0: none) */
    int pace_copy;       /* --pace-copy: the other copy too (1, the default) or the idle alone (0) */
    int pace_spin;       /* --pace-wait spin: the gap busy-waited on the clock, not slept */
    int pace_touch;      /* --pace-touch yes: after the gap, the call's host memory read once */
} bench_context;

typedef enum { BENCH_TEXT, BENCH_CSV, BENCH_JSON } bench_format;

void bench_report(FILE *out, bench_format format, const bench_context *ctx,
                  const bench_result *results, size_t count);

const char *bench_direction_name(bench_direction d);

/* ---- bench_util.c: what every mode shares --------------------------------------- */

/* The monotonic clock, this process's CPU time and the calling thread's, in
 * microseconds. */
double bench_now_us(void);
double bench_cpu_us(void);
double bench_thread_cpu_us(void);
void bench_sleep_us(double us);
/* Returns after `us` microseconds without giving the CPU up. */
void bench_spin_us(double us);
/* Reads every cache line of `bytes` at `p` once. */
void bench_touch(const unsigned char *p, size_t bytes);
/* The gap between a frame loop's transfers, as a bench_run_options
 * before_call hook (arg: a bench_pace): idle_us of sleep (of busy-waiting
 * with `spin`), then the driver's pageable copy of other memory in the same
 * direction (none without other_device). */
typedef struct bench_pace {
    double idle_us;
    bench_direction dir;
    unsigned char *other_host;
    pinstage_devbuf *other_device;
    int spin;
} bench_pace;
void bench_pace_call(void *pace);
/* A qsort order for doubles; quantiles of sorted values; the median (sorts). */
int bench_compare_double(const void *a, const void *b);
int bench_compare_size(const void *a, const void *b);
double bench_quantile(const double *sorted, size_t n, double q);
double bench_median(double *v, size_t n);
void bench_fill_pattern(unsigned char *p, size_t n, unsigned seed);
/* Print "pinstage-bench: ..." and return the exit code (2: usage, 1: driver). */
int bench_fail(const char *what);
int bench_driver_fail(const char *what, pinstage_status s);
const bench_path *bench_find_path(const char *name);

/* Pageable host memory as a program has it: written before use. */
enum { BENCH_HOST_MALLOC, BENCH_HOST_HUGEPAGES, BENCH_HOST_SMALL_PAGES };
extern int bench_host_alloc;
extern const char *const bench_host_alloc_names[];
unsigned char *bench_host_memory(size_t bytes);

/* Load in this process beside the transfers: threads busy with arithmetic
 * (CPU load) or streaming memcpy of 64 MiB buffers (memory load). */
enum { BENCH_LOAD_NONE, BENCH_LOAD_CPU, BENCH_LOAD_MEMORY };
#define BENCH_LOAD_MAX 256
typedef struct bench_load {
    _Atomic int stop;
    pthread_t threads[BENCH_LOAD_MAX];
    unsigned count;
} bench_load;
void bench_load_start(bench_load *l, unsigned threads, int kind);
void bench_load_stop(bench_load *l);

/* Paths one run measures (a name may be given more than once). */
#define BENCH_MAX_PATHS 32

typedef struct bench_run_options {
    size_t reps, warmup;
    double budget_s;
    int quiet;
    /* Called before every call, timed or not, outside the timing (paced runs). */
    void (*before_call)(void *arg);
    void *before_arg;
} bench_run_options;

/* Checks each path's bytes once, then measures them side by side: warm-up,
 * then blocks of consecutive calls, the paths alternating in 3 passes. */
int bench_measure(bench_cell *c, const bench_path **paths, size_t npaths, const bench_run_options *o,
                  const char *label, bench_result *out);

/* Pieces of the reports the pipeline mode shares. */
void bench_json_string(FILE *out, const char *s);
/* The "context" member of a JSON report, `method` saying how it measured. */
void bench_json_context(FILE *out, const bench_context *ctx, const char *method);
/* The header lines of a text report. */
void bench_text_context(FILE *out, const bench_context *ctx);

/* --pipeline: a frame pipeline run with the synchronous buffer and with the
 * ring, side by side (bench_pipeline.c). */
typedef struct pipeline_options {
    unsigned frames;   /* timed frames per round and pipeline */
    unsigned rounds;   /* rounds, the two pipelines alternating */
    unsigned slots;    /* the ring's slots */
    double fills[8];   /* host fill times, as multiples of one frame's transfer time */
    size_t nfills;
    int quiet;
} pipeline_options;
int bench_pipeline(const pipeline_options *o, const bench_context *ctx, FILE *text, FILE *json);

/* --conditions: the paths where programs run them (bench_conditions.c). */
typedef struct conditions_options {
    unsigned processes;  /* fresh processes */
    size_t sizes[8];     /* transfer sizes of the conditions (the cpu-load sweep adds its own) */
    size_t nsizes;
    size_t sweep_lo, sweep_hi; /* the cpu-load sweep */
    int quiet;
    int device;
    const char *exe;     /* this program, re-executed for each fresh process */
    char **child_args;   /* options a fresh process is given */
    size_t nchild_args;
} conditions_options;
int bench_conditions(const conditions_options *o, const bench_context *ctx, FILE *text, FILE *json);
/* One fresh process's part (--conditions-child N): rows on stdout. */
int bench_conditions_child(const conditions_options *o, unsigned process);

/* --devices LIST: every GPU alone, then all at once (bench_devices.c). */
typedef struct devices_options {
    int devices[16];
    size_t ndevices;
    size_t sizes[8];
    size_t nsizes;
    double seconds; /* each run */
    int quiet;
} devices_options;
int bench_devices(const devices_options *o, const bench_context *ctx, FILE *text, FILE *json);

/* --trace FILE: summarizes a PINSTAGE_TRACE file (bench_trace.c). */
int bench_trace_summary(const char *path, FILE *out);

/* --soak N: N verified transfers on `threads` threads (bench_soak.c). */
int bench_soak(unsigned long transfers, unsigned threads, int device, const bench_context *ctx, FILE *text,
               FILE *json);

#endif
