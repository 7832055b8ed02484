/* SPDX-License-Identifier: MIT */
/* pinstage-bench --devices all|LIST: every GPU alone, then all at once.
 *
 * One thread per device, each with its own buffer bound to its device
 * (pinned memory and copy threads on the GPU's NUMA node), its own stream,
 * device memory and pageable host memory, written by that thread. For each
 * size and direction two paths run: "floor", the buffer's pinned memory
 * straight to or from the device (upload_with with nothing to fill /
 * download_into), and "auto", upload / download of the pageable memory by
 * the route the profile picks. Each device's threads run for a fixed time
 * back to back; throughput is bytes moved over the time from the start to
 * the end of each thread's last call. Alone: one device at a time. Together:
 * all threads released at once, aggregate bytes over the longest thread's
 * time. The host's memory-bandwidth ceiling (memcpy on as many threads as
 * the pool would use, summed over the run) is measured the same way, since
 * "auto" costs one host copy per byte. Each device alone is measured once
 * more with another placement ("other"): where the host has several nodes,
 * memory and copy threads on the next node after the GPU's (remote); on a
 * host of one node, node 0 asked for explicitly, which maps and registers
 * the memory instead of taking cuMemAllocHost's (what placement costs). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define MAX_DEVICES 16

enum { PATH_FLOOR, PATH_AUTO, PATHS };
static const char *const path_names[PATHS] = {"floor", "auto"};

typedef struct {
    int device;
    int numa_node; /* the binding's: PINSTAGE_NUMA_DEVICE, or a node for "remote" */
    size_t bytes;
    bench_direction direction;
    int path;
    double seconds;              /* how long to run */
    pthread_barrier_t *start;    /* NULL: alone */
    /* results */
    double start_us, end_us;
    unsigned long calls;
    double median_us;
    pinstage_placement placement;
    pinstage_status status;
    char error[256];
} runner;

static runner make_runner(int device, int numa_node, size_t bytes, bench_direction dir, int path, double seconds) {
    runner r;
    memset(&r, 0, sizeof r);
    r.device = device;
    r.numa_node = numa_node;
    r.bytes = bytes;
    r.direction = dir;
    r.path = path;
    r.seconds = seconds;
    return r;
}

static void nothing_to_fill(void *dst, size_t n, void *user) {
    (void)dst;
    (void)n;
    (void)user;
}

static pinstage_status one_call(pinstage_buffer *buf, pinstage_devbuf *dev, unsigned char *host, size_t bytes,
                                bench_direction dir, int path, CUstream stream) {
    const void *view;
    if (path == PATH_FLOOR)
        return dir == BENCH_H2D ? pinstage_buffer_upload_with(buf, dev, bytes, stream, nothing_to_fill, NULL)
                                : pinstage_buffer_download_into(buf, dev, bytes, stream, &view);
    return dir == BENCH_H2D ? pinstage_buffer_upload_u8(buf, dev, host, bytes, stream)
                            : pinstage_buffer_download_u8(buf, host, bytes, dev, stream);
}

#define MAX_SAMPLES 100000

static void *run_device(void *arg) {
    runner *r = arg;
    pinstage_buffer *buf = NULL;
    pinstage_devbuf *dev = NULL;
    CUstream stream = NULL;
    unsigned char *host = NULL;
    double *samples = malloc(MAX_SAMPLES * sizeof *samples);
    pinstage_binding binding = {r->device, NULL, r->numa_node};
    pinstage_status s;
    /* The device's context for the stream and device memory; the buffer
     * switches to it by itself. */
    if ((s = pinstage_context_init(r->device)) || (s = pinstage_stream_create(&stream, PINSTAGE_STREAM_NON_BLOCKING)) ||
        (s = pinstage_devbuf_alloc_u8(&dev, r->bytes)) || (s = pinstage_buffer_create(&buf)) ||
        (s = pinstage_buffer_bind(buf, &binding)) || (s = pinstage_buffer_reserve(buf, r->bytes)))
        goto out;
    host = bench_host_memory(r->bytes);
    if (!host || !samples) {
        s = PINSTAGE_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    for (int i = 0; i < 5 && !s; i++) s = one_call(buf, dev, host, r->bytes, r->direction, r->path, stream);
    if (s) goto out;
    if (r->start) pthread_barrier_wait(r->start);
    r->start_us = bench_now_us();
    double stop = r->start_us + r->seconds * 1e6, t = r->start_us;
    while (t < stop && !s) {
        s = one_call(buf, dev, host, r->bytes, r->direction, r->path, stream);
        double now = bench_now_us();
        if (r->calls < MAX_SAMPLES) samples[r->calls] = now - t;
        r->calls++;
        t = now;
    }
    r->end_us = t;
    r->median_us = r->calls ? bench_median(samples, r->calls < MAX_SAMPLES ? r->calls : MAX_SAMPLES) : 0;
    pinstage_buffer_get_placement(buf, &r->placement);
out:
    r->status = s;
    if (s) snprintf(r->error, sizeof r->error, "%s", pinstage_last_error_message());
    if (s && r->start) pthread_barrier_wait(r->start); /* the others are waiting */
    pinstage_buffer_free(buf);
    pinstage_devbuf_free(dev);
    pinstage_stream_destroy(stream);
    pinstage_context_release(r->device);
    free(host);
    free(samples);
    return NULL;
}

static double gbps(const runner *r) {
    double us = r->end_us - r->start_us;
    return us > 0 ? (double)r->bytes * (double)r->calls / us / 1e3 : 0;
}

/* Runs `n` runners, alone (one after the other) or together. */
static int run_all(runner *r, int n, int together) {
    pthread_t t[MAX_DEVICES];
    pthread_barrier_t start;
    if (together) pthread_barrier_init(&start, NULL, (unsigned)n);
    for (int i = 0; i < n; i++) {
        r[i].start = together ? &start : NULL;
        if (pthread_create(&t[i], NULL, run_device, &r[i])) return bench_fail("cannot start a thread");
        if (!together) pthread_join(t[i], NULL);
    }
    if (together)
        for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
    if (together) pthread_barrier_destroy(&start);
    for (int i = 0; i < n; i++)
        if (r[i].status) {
            fprintf(stderr, "pinstage-bench: device %d: %s\n", r[i].device, r[i].error);
            return 1;
        }
    return 0;
}

/* ---- The host's memory-bandwidth ceiling ---------------------------------------- */

typedef struct {
    size_t bytes;
    double seconds;
    pthread_barrier_t *start;
    double start_us, end_us;
    unsigned long copies;
} copier;

static void *copy_loop(void *arg) {
    copier *c = arg;
    unsigned char *a = bench_host_memory(c->bytes), *b = bench_host_memory(c->bytes);
    pthread_barrier_wait(c->start);
    if (a && b) {
        c->start_us = bench_now_us();
        double stop = c->start_us + c->seconds * 1e6, t = c->start_us;
        while (t < stop) {
            memcpy(c->copies & 1 ? a : b, c->copies & 1 ? b : a, c->bytes);
            c->copies++;
            t = bench_now_us();
        }
        c->end_us = t;
    }
    free(a);
    free(b);
    return NULL;
}

/* GB/s copied by `threads` threads at once (bytes copied, not read + written). */
static double host_copy_gbps(unsigned threads, double seconds) {
    pthread_t t[256];
    copier c[256];
    pthread_barrier_t start;
    if (threads > 256) threads = 256;
    pthread_barrier_init(&start, NULL, threads);
    for (unsigned i = 0; i < threads; i++) {
        c[i] = (copier){(size_t)64 << 20, seconds, &start, 0, 0, 0};
        pthread_create(&t[i], NULL, copy_loop, &c[i]);
    }
    double first = 1e300, last = 0, bytes = 0;
    for (unsigned i = 0; i < threads; i++) {
        pthread_join(t[i], NULL);
        if (c[i].start_us < first) first = c[i].start_us;
        if (c[i].end_us > last) last = c[i].end_us;
        bytes += (double)c[i].bytes * (double)c[i].copies;
    }
    pthread_barrier_destroy(&start);
    return last > first ? bytes / (last - first) / 1e3 : 0;
}

/* The "other" placement of a GPU on `gpu_node`: -1 for none. */
static int other_node(int host_nodes, int gpu_node) {
    if (host_nodes < 2) return 0;
    return gpu_node >= 0 ? (gpu_node + 1) % host_nodes : -1;
}

/* ---- The run ---------------------------------------------------------------------- */

typedef struct {
    bench_direction direction;
    size_t bytes;
    int path;
    double alone[MAX_DEVICES], together[MAX_DEVICES], other[MAX_DEVICES];
    double alone_us[MAX_DEVICES];
    double sum_alone, aggregate, bound;
    const char *bound_name;
} devices_row;

int bench_devices(const devices_options *o, const bench_context *ctx, FILE *text, FILE *json) {
    int n = (int)o->ndevices;
    int nodes[MAX_DEVICES];
    pinstage_device_info info[MAX_DEVICES];
    for (int i = 0; i < n; i++) {
        pinstage_status s = pinstage_device_get_info(o->devices[i], &info[i]);
        if (s) return bench_driver_fail("device info", s);
        nodes[i] = info[i].numa_node;
    }
    /* Remote placement needs a second node: the next one after the GPU's. */
    int host_nodes = pinstage_numa_node_count();
    pinstage_pool_info pool;
    pinstage_pool_get_info(&pool);
    unsigned copy_threads = pool.workers + 1;
    if (!o->quiet) fprintf(stderr, "pinstage-bench: host memcpy ceiling on %u threads...\n", copy_threads);
    double ceiling = host_copy_gbps(copy_threads, o->seconds);

    size_t nrows = o->nsizes * 2 * PATHS;
    devices_row *rows = calloc(nrows, sizeof *rows);
    pinstage_placement placement[MAX_DEVICES];
    if (!rows) return bench_fail("out of host memory");
    size_t k = 0;
    for (size_t si = 0; si < o->nsizes; si++)
        for (int dir = 0; dir < 2; dir++)
            for (int path = 0; path < PATHS; path++, k++) {
                devices_row *row = &rows[k];
                row->direction = (bench_direction)dir;
                row->bytes = o->sizes[si];
                row->path = path;
                runner r[MAX_DEVICES];
                for (int i = 0; i < n; i++)
                    r[i] = make_runner(o->devices[i], PINSTAGE_NUMA_DEVICE, row->bytes, row->direction, path, o->seconds);
                if (!o->quiet)
                    fprintf(stderr, "pinstage-bench: %s %zu bytes %s: alone, together%s\n", bench_direction_name(row->direction),
                            row->bytes, path_names[path], ", other placement");
                if (run_all(r, n, 0)) return 1;
                for (int i = 0; i < n; i++) {
                    row->alone[i] = gbps(&r[i]);
                    row->alone_us[i] = r[i].median_us;
                    row->sum_alone += row->alone[i];
                    placement[i] = r[i].placement;
                }
                for (int i = 0; i < n; i++) r[i].calls = 0;
                if (run_all(r, n, 1)) return 1;
                double first = 1e300, last = 0, bytes = 0;
                for (int i = 0; i < n; i++) {
                    row->together[i] = gbps(&r[i]);
                    if (r[i].start_us < first) first = r[i].start_us;
                    if (r[i].end_us > last) last = r[i].end_us;
                    bytes += (double)r[i].bytes * (double)r[i].calls;
                }
                row->aggregate = last > first ? bytes / (last - first) / 1e3 : 0;
                /* "auto" copies every byte on the host once: the ceiling applies. */
                row->bound = row->sum_alone;
                row->bound_name = "sum of each device alone";
                if (path == PATH_AUTO && ceiling > 0 && ceiling < row->bound) {
                    row->bound = ceiling;
                    row->bound_name = "host memcpy ceiling";
                }
                for (int i = 0; i < n; i++) {
                    row->other[i] = -1; /* not measured */
                    if (other_node(host_nodes, nodes[i]) < 0) continue;
                    runner far = make_runner(o->devices[i], other_node(host_nodes, nodes[i]), row->bytes, row->direction,
                                             path, o->seconds);
                    if (run_all(&far, 1, 0)) return 1;
                    row->other[i] = gbps(&far);
                }
            }

    if (text) {
        bench_text_context(text, ctx);
        fprintf(text, "# devices: every GPU alone, then all at once (one thread, bound buffer, stream and pageable\n"
                      "# memory each), %.1f s per run; GB/s = bytes moved / time from first call to last return\n",
                o->seconds);
        fprintf(text, "# host memcpy ceiling: %.1f GB/s on %u threads; host NUMA nodes: %d\n", ceiling, copy_threads,
                host_nodes);
        fprintf(text, "# other: %s\n", host_nodes > 1 ? "memory and copy threads on the next node after the GPU's (remote)"
                                                       : "node 0 asked for: memory mapped and registered, not cuMemAllocHost's");
        for (int i = 0; i < n; i++)
            fprintf(text, "# device %d: %s, %s, GPU on NUMA node %d, pinned memory placed on %d, found on %d, "
                          "copy threads on node %d\n",
                    o->devices[i], info[i].name, info[i].pci_bus_id, nodes[i], placement[i].memory_node,
                    placement[i].memory_found, placement[i].worker_node);
        fprintf(text, "%-4s %12s %-6s %9s %10s %10s %12s %s\n", "dir", "bytes", "path", "device", "alone GB/s",
                "together", "other GB/s", "alone median us");
        for (size_t j = 0; j < nrows; j++) {
            const devices_row *row = &rows[j];
            for (int i = 0; i < n; i++)
                if (row->other[i] < 0)
                    fprintf(text, "%-4s %12zu %-6s %9d %10.2f %10.2f %12s %.1f\n", bench_direction_name(row->direction),
                            row->bytes, path_names[row->path], o->devices[i], row->alone[i], row->together[i], "-",
                            row->alone_us[i]);
                else
                    fprintf(text, "%-4s %12zu %-6s %9d %10.2f %10.2f %12.2f %.1f\n", bench_direction_name(row->direction),
                            row->bytes, path_names[row->path], o->devices[i], row->alone[i], row->together[i],
                            row->other[i], row->alone_us[i]);
            fprintf(text, "%-4s %12zu %-6s %9s %10.2f %10.2f %12s aggregate / %s = %.2f\n",
                    bench_direction_name(row->direction), row->bytes, path_names[row->path], "all", row->sum_alone,
                    row->aggregate, "", row->bound_name, row->bound > 0 ? row->aggregate / row->bound : 0);
        }
    }
    if (json) {
        fprintf(json, "{\n  \"schema\": \"pinstage-bench-devices/1\",\n");
        bench_json_context(json, ctx, "one thread per device, bound buffer, back-to-back calls for a fixed time; "
                                      "GB/s = bytes / (last return - first call)");
        fprintf(json, ",\n  \"host_numa_nodes\": %d,\n  \"seconds_per_run\": %.3f,\n", host_nodes, o->seconds);
        fprintf(json, "  \"other_placement\": \"%s\",\n", host_nodes > 1 ? "remote node" : "node 0, registered");
        fprintf(json, "  \"host_copy_gbps\": %.3f,\n  \"host_copy_threads\": %u,\n", ceiling, copy_threads);
        fprintf(json, "  \"devices\": [");
        for (int i = 0; i < n; i++) {
            fprintf(json, "%s\n    {\"device\": %d, \"name\": ", i ? "," : "", o->devices[i]);
            bench_json_string(json, info[i].name);
            fprintf(json, ", \"pci_bus_id\": ");
            bench_json_string(json, info[i].pci_bus_id);
            fprintf(json, ", \"gpu_node\": %d, \"memory_node\": %d, \"memory_found\": %d, \"worker_node\": %d}", nodes[i],
                    placement[i].memory_node, placement[i].memory_found, placement[i].worker_node);
        }
        fprintf(json, "\n  ],\n  \"results\": [");
        for (size_t j = 0; j < nrows; j++) {
            const devices_row *row = &rows[j];
            fprintf(json, "%s\n    {\"direction\": \"%s\", \"bytes\": %zu, \"path\": \"%s\", \"alone_gbps\": [",
                    j ? "," : "", bench_direction_name(row->direction), row->bytes, path_names[row->path]);
            for (int i = 0; i < n; i++) fprintf(json, "%s%.3f", i ? ", " : "", row->alone[i]);
            fprintf(json, "], \"alone_median_us\": [");
            for (int i = 0; i < n; i++) fprintf(json, "%s%.2f", i ? ", " : "", row->alone_us[i]);
            fprintf(json, "], \"together_gbps\": [");
            for (int i = 0; i < n; i++) fprintf(json, "%s%.3f", i ? ", " : "", row->together[i]);
            fprintf(json, "], \"other_gbps\": [");
            for (int i = 0; i < n; i++)
                if (row->other[i] < 0) fprintf(json, "%snull", i ? ", " : "");
                else fprintf(json, "%s%.3f", i ? ", " : "", row->other[i]);
            fprintf(json, "], \"sum_alone_gbps\": %.3f, \"aggregate_gbps\": %.3f, \"bound_gbps\": %.3f, \"bound\": ",
                    row->sum_alone, row->aggregate, row->bound);
            bench_json_string(json, row->bound_name);
            fprintf(json, ", \"aggregate_over_bound\": %.4f}", row->bound > 0 ? row->aggregate / row->bound : 0);
        }
        fprintf(json, "\n  ]\n}\n");
    }
    free(rows);
    return 0;
}
