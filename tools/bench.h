/* SPDX-License-Identifier: MIT */
/* pinstage-bench: every transfer path measured with one method, side by side. */
#ifndef PINSTAGE_BENCH_H
#define PINSTAGE_BENCH_H

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
    double gbps;      /* 1e9 bytes per second at the median */
    double ratio;     /* pageable median / this median; 0 if pageable not measured */
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
} bench_context;

typedef enum { BENCH_TEXT, BENCH_CSV, BENCH_JSON } bench_format;

void bench_report(FILE *out, bench_format format, const bench_context *ctx,
                  const bench_result *results, size_t count);

const char *bench_direction_name(bench_direction d);

/* The monotonic clock in microseconds, and a qsort order for doubles. */
double bench_now_us(void);
int bench_compare_double(const void *a, const void *b);

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

/* --soak N: N verified transfers on `threads` threads (bench_soak.c). */
int bench_soak(unsigned long transfers, unsigned threads, int device, const bench_context *ctx, FILE *text,
               FILE *json);

#endif
