/* SPDX-License-Identifier: MIT */
/* pinstage-bench output: text (the seed's table plus every statistic, after
 * '#' context lines), CSV, or JSON with a context object. The schema is
 * documented in docs/benchmarks.md and checked by tests/check_bench_output.py. */
#include <string.h>

#include "bench.h"

const char *bench_direction_name(bench_direction d) { return d == BENCH_H2D ? "h2d" : "d2h"; }

static void json_string(FILE *out, const char *s) {
    fputc('"', out);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fprintf(out, "\\%c", *s);
        else if ((unsigned char)*s < 0x20) fprintf(out, "\\u%04x", *s);
        else fputc(*s, out);
    }
    fputc('"', out);
}

static void human_size(char *buf, size_t len, size_t bytes) {
    if (bytes >= (1u << 20)) snprintf(buf, len, "%.1f MiB", bytes / 1048576.0);
    else if (bytes >= 1024) snprintf(buf, len, "%.0f KiB", bytes / 1024.0);
    else snprintf(buf, len, "%zu B", bytes);
}

static const bench_result *find(const bench_result *r, size_t n, bench_direction d, size_t bytes, const char *path) {
    for (size_t i = 0; i < n; i++)
        if (r[i].direction == d && r[i].bytes == bytes && !strcmp(r[i].path->name, path)) return &r[i];
    return NULL;
}

static const char *sched_name(int sched) {
    return sched == 1 ? "spin" : sched == 2 ? "yield" : sched == 4 ? "blocking-sync" : "auto";
}

void bench_text_context(FILE *out, const bench_context *c) {
    fprintf(out, "# pinstage-bench %s\n", c->library_version);
    if (c->emulated)
        fprintf(out, "# EMULATED DRIVER: these figures come from pinstage's emulated driver, not a GPU\n");
    fprintf(out, "# device: %s, sm_%d%d, PCI %s, PCIe %s, %d copy engines\n", c->device_name, c->compute_major,
            c->compute_minor, c->pci_bus_id, c->pcie_link, c->copy_engines);
    fprintf(out, "# driver: CUDA %d.%d (%s)\n", c->driver_version / 1000, c->driver_version % 1000 / 10, c->driver_path);
    fprintf(out, "# host: %s, %d cores\n", c->host_cpu, c->host_cores);
    fprintf(out, "# date: %s\n", c->date);
    fprintf(out, "# command: %s\n", c->command);
    fprintf(out, "# setup: context scheduling %s, host memory %s, auto follows %s, engine path %s, pool %d workers\n",
            sched_name(c->sched), c->host_alloc, c->profile, c->engine, c->pool_workers);
}

static void text_method(FILE *out, const bench_context *c) {
    fprintf(out, "# method: median of up to %zu calls (fewer past a %.1f s budget per size) after %zu warm-up calls;\n"
                 "#   wall clock around each whole synchronous call; each path in blocks of consecutive calls,\n"
                 "#   the blocks of all paths alternating in 3 passes\n",
            c->reps, c->time_budget_s, c->warmup);
    if (c->paced_us > 0)
        fprintf(out, "# paced: each call after %.0f us of %s%s%s\n", c->paced_us, c->pace_spin ? "busy-waiting" : "sleep",
                c->pace_copy ? " and the driver's pageable copy of other memory" : ", no other copy",
                c->pace_touch ? ", then its host memory read once" : "");
    fprintf(out, "# ratio: pageable median / path median (above 1 = faster than the driver's pageable path)\n");
    fprintf(out, "# GB/s: 1e9 bytes per second at the median\n");
}

static void text_report(FILE *out, const bench_context *c, const bench_result *r, size_t n) {
    const char *mark = c->emulated ? "  [emulated]" : "";
    bench_text_context(out, c);
    text_method(out, c);
    fprintf(out, "# paths:\n");
    for (size_t i = 0; i < bench_path_count; i++)
        fprintf(out, "#   %-14s %s\n", bench_paths[i].name, bench_paths[i].what);

    /* The seed's table, where its paths were measured. */
    int seed_table = 0;
    for (size_t i = 0; i < n; i++) seed_table |= !strcmp(r[i].path->name, "pageable");
    if (seed_table) {
        const char *cols[] = {"auto", "engine", "resident", "floor"};
        fprintf(out, "\n%-24s %10s %10s", "transfer", "size", "pageable");
        for (size_t k = 0; k < 4; k++) fprintf(out, " %18s", cols[k]);
        fprintf(out, "\n");
        for (size_t i = 0; i < n; i++) {
            if (strcmp(r[i].path->name, "pageable")) continue;
            char name[64], size[32], cell[64];
            snprintf(name, sizeof name, "%s %s", r[i].direction == BENCH_H2D ? "H2D" : "D2H",
                     r[i].label[0] ? r[i].label : "");
            human_size(size, sizeof size, r[i].bytes);
            fprintf(out, "%-24s %10s %7.1f us", name, size, r[i].median_us);
            for (size_t k = 0; k < 4; k++) {
                const bench_result *x = find(r, n, r[i].direction, r[i].bytes, cols[k]);
                if (x) snprintf(cell, sizeof cell, "%.1f us %.2fx", x->median_us, x->ratio);
                else snprintf(cell, sizeof cell, "-");
                fprintf(out, " %18s", cell);
            }
            fprintf(out, "%s\n", mark);
        }
    }

    fprintf(out, "\n%-4s %11s %-14s %-14s %5s %11s %10s %10s %10s %8s %7s %10s\n", "dir", "bytes", "shape", "path",
            "reps", "median_us", "min_us", "p10_us", "p90_us", "GB/s", "ratio", "cpu_us/GB");
    for (size_t i = 0; i < n; i++)
        fprintf(out, "%-4s %11zu %-14s %-14s %5zu %11.2f %10.2f %10.2f %10.2f %8.2f %6.2fx %10.0f%s\n",
                bench_direction_name(r[i].direction), r[i].bytes, r[i].label[0] ? r[i].label : "-",
                r[i].path->name, r[i].reps, r[i].median_us, r[i].min_us, r[i].p10_us, r[i].p90_us, r[i].gbps,
                r[i].ratio, r[i].cpu_us_per_gb, mark);
}

static void csv_report(FILE *out, const bench_context *c, const bench_result *r, size_t n) {
    fprintf(out, "direction,bytes,label,path,reps,median_us,min_us,p10_us,p90_us,gbps,ratio_vs_pageable,emulated\n");
    for (size_t i = 0; i < n; i++)
        fprintf(out, "%s,%zu,%s,%s,%zu,%.3f,%.3f,%.3f,%.3f,%.3f,%.4f,%d\n", bench_direction_name(r[i].direction),
                r[i].bytes, r[i].label, r[i].path->name, r[i].reps, r[i].median_us, r[i].min_us, r[i].p10_us,
                r[i].p90_us, r[i].gbps, r[i].ratio, c->emulated);
}

void bench_json_string(FILE *out, const char *s) { json_string(out, s); }

static void json_report(FILE *out, const bench_context *c, const bench_result *r, size_t n) {
    fprintf(out, "{\n  \"schema\": \"pinstage-bench/1\",\n");
    bench_json_context(out, c, "wall clock around each whole synchronous call; median; paths in alternating blocks");
    fprintf(out, ",\n  \"results\": [\n");
    for (size_t i = 0; i < n; i++) {
        fprintf(out, "    {\"direction\": \"%s\", \"bytes\": %zu, \"label\": ", bench_direction_name(r[i].direction),
                r[i].bytes);
        json_string(out, r[i].label);
        fprintf(out,
                ", \"path\": \"%s\", \"reps\": %zu, \"median_us\": %.3f, \"min_us\": %.3f, \"p10_us\": %.3f, "
                "\"p90_us\": %.3f, \"mean_us\": %.3f, \"gbps\": %.3f, \"ratio_vs_pageable\": %.4f, "
                "\"cpu_us_per_gb\": %.1f, ",
                r[i].path->name, r[i].reps, r[i].median_us, r[i].min_us, r[i].p10_us, r[i].p90_us, r[i].mean_us,
                r[i].gbps, r[i].ratio, r[i].cpu_us_per_gb);
        if (r[i].pageable_share >= 0) fprintf(out, "\"pageable_share\": %.4f, ", r[i].pageable_share);
        if (r[i].engine_threads) fprintf(out, "\"engine_threads\": %u, ", r[i].engine_threads);
        if (r[i].gap_cpu_us_per_gb >= 0) fprintf(out, "\"gap_cpu_us_per_gb\": %.1f, ", r[i].gap_cpu_us_per_gb);
        fprintf(out, "\"emulated\": %s}%s\n", c->emulated ? "true" : "false", i + 1 < n ? "," : "");
    }
    fprintf(out, "  ]\n}\n");
}

void bench_json_context(FILE *out, const bench_context *c, const char *method) {
    fprintf(out, "  \"context\": {\n");
    fprintf(out, "    \"tool\": \"pinstage-bench\",\n    \"library_version\": ");
    json_string(out, c->library_version);
    fprintf(out, ",\n    \"date\": ");
    json_string(out, c->date);
    fprintf(out, ",\n    \"device\": ");
    json_string(out, c->device_name);
    fprintf(out, ",\n    \"compute_capability\": \"%d.%d\",\n    \"pci_bus_id\": ", c->compute_major, c->compute_minor);
    json_string(out, c->pci_bus_id);
    fprintf(out, ",\n    \"pcie_link\": ");
    json_string(out, c->pcie_link);
    fprintf(out, ",\n    \"copy_engines\": %d,\n    \"driver_version\": %d,\n    \"driver_path\": ", c->copy_engines,
            c->driver_version);
    json_string(out, c->driver_path);
    fprintf(out, ",\n    \"emulated\": %s,\n    \"host_cpu\": ", c->emulated ? "true" : "false");
    json_string(out, c->host_cpu);
    fprintf(out, ",\n    \"host_cores\": %d,\n    \"reps\": %zu,\n    \"warmup\": %zu,\n    \"budget_s\": %.3f,\n",
            c->host_cores, c->reps, c->warmup, c->time_budget_s);
    fprintf(out, "    \"method\": ");
    json_string(out, method);
    fprintf(out, ",\n");
    fprintf(out, "    \"command\": ");
    json_string(out, c->command);
    fprintf(out, ",\n    \"sched\": \"%s\",\n    \"host_alloc\": ", sched_name(c->sched));
    json_string(out, c->host_alloc);
    fprintf(out, ",\n    \"profile\": ");
    json_string(out, c->profile);
    fprintf(out, ",\n    \"engine\": ");
    json_string(out, c->engine);
    fprintf(out, ",\n    \"pool_workers\": %d,\n    \"paced_us\": %.1f", c->pool_workers, c->paced_us);
    if (c->paced_us > 0)
        fprintf(out, ",\n    \"pace_copy\": %s,\n    \"pace_wait\": \"%s\",\n    \"pace_touch\": %s",
                c->pace_copy ? "true" : "false", c->pace_spin ? "spin" : "sleep", c->pace_touch ? "true" : "false");
    fprintf(out, "\n  }");
}

void bench_report(FILE *out, bench_format format, const bench_context *ctx, const bench_result *results,
                  size_t count) {
    if (format == BENCH_CSV) csv_report(out, ctx, results, count);
    else if (format == BENCH_JSON) json_report(out, ctx, results, count);
    else text_report(out, ctx, results, count);
}
