/* SPDX-License-Identifier: MIT */
/* Machine profiles as values: fixed plans, lookups, and the text format they
 * are saved in, which is also their printable form:
 *
 *   pinstage-profile 1
 *   origin measured
 *   device NVIDIA H200
 *   pci 0000:1b:00.0
 *   driver 13000
 *   threads 16
 *   # dir     bytes  best      chunk thr  staging  chunk thr   best_us staging_us pageable_us
 *   h2d        4096  pageable      0   0  staged       0   1      6.10       7.90        6.10
 *   ... one row per direction and size class ...
 *   end
 *
 * The reader is strict: every row present once, in order, nothing after
 * `end`, so a truncated or edited-by-mistake file is refused, not guessed. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver.h"
#include "policy.h"
#include "status.h"

#define FORMAT_VERSION 1

static const char *const route_names[] = {"pageable", "staged", "engine"};
static const char *const origin_names[] = {"builtin", "measured", "fixed"};
static const char *const direction_names[] = {"h2d", "d2h"};

static int lookup(const char *const *names, int count, const char *word) {
    for (int i = 0; i < count; i++)
        if (!strcmp(names[i], word)) return i;
    return -1;
}

static int valid_route(int route) { return route >= PINSTAGE_ROUTE_PAGEABLE && route <= PINSTAGE_ROUTE_ENGINE; }

void pinstage_profile_free(pinstage_profile *profile) { free(profile); }

pinstage_status pinstage_profile_fixed(pinstage_profile **out, int route, size_t chunk, unsigned threads) {
    static const char caller[] = "pinstage_profile_fixed";
    if (!out) return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: out is NULL", caller);
    *out = NULL;
    if (!valid_route(route))
        return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: route=%d is not a PINSTAGE_ROUTE_* value", caller, route);
    pinstage_profile *p = calloc(1, sizeof *p);
    if (!p) return ps_fail(PINSTAGE_ERROR_OUT_OF_MEMORY, "%s: out of host memory", caller);
    snprintf(p->device_name, sizeof p->device_name, "any");
    snprintf(p->pci_bus_id, sizeof p->pci_bus_id, "any");
    p->origin = PINSTAGE_PROFILE_FIXED;
    ps_plan plan = {route, route == PINSTAGE_ROUTE_PAGEABLE ? 0 : chunk, route == PINSTAGE_ROUTE_PAGEABLE ? 0 : threads};
    /* A threshold keeps a staging route: the engine's defaults where the
     * fixed plan is the pageable path. */
    ps_plan staging = route == PINSTAGE_ROUTE_PAGEABLE ? (ps_plan){PINSTAGE_ROUTE_ENGINE, 0, 0} : plan;
    for (int d = 0; d < 2; d++)
        for (unsigned c = 0; c < PS_CLASSES; c++) {
            p->classes[d][c].best = plan;
            p->classes[d][c].staging = staging;
        }
    *out = p;
    return PINSTAGE_SUCCESS;
}

pinstage_status pinstage_profile_plan(const pinstage_profile *profile, pinstage_direction dir, size_t bytes,
                                      pinstage_plan *plan) {
    if (!profile || !plan)
        return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "pinstage_profile_plan: %s is NULL", profile ? "plan" : "profile");
    if (dir != PINSTAGE_H2D && dir != PINSTAGE_D2H)
        return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "pinstage_profile_plan: direction %d is neither H2D nor D2H", (int)dir);
    *plan = ps_choose_plan(profile, (ps_direction)dir, bytes, PINSTAGE_AUTO_STAGE_PROFILE);
    return PINSTAGE_SUCCESS;
}

/* ---- Text ----------------------------------------------------------------------------- */

/* Appends to a snprintf-style destination, counting the full length. */
typedef struct {
    char *text;
    size_t len, used;
} appender;

__attribute__((format(printf, 2, 3))) static void append(appender *a, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    size_t room = a->used < a->len ? a->len - a->used : 0;
    int n = vsnprintf(room ? a->text + a->used : NULL, room, fmt, ap);
    va_end(ap);
    if (n > 0) a->used += (size_t)n;
}

size_t pinstage_profile_describe(const pinstage_profile *p, char *text, size_t len) {
    appender a = {text, text ? len : 0, 0};
    if (a.len) text[0] = 0;
    if (!p) return 0;
    append(&a, "pinstage-profile %d\n", FORMAT_VERSION);
    append(&a, "origin %s\n", origin_names[p->origin >= 0 && p->origin <= 2 ? p->origin : 0]);
    append(&a, "device %s\n", p->device_name);
    append(&a, "pci %s\n", p->pci_bus_id);
    append(&a, "driver %d\n", p->driver_version);
    append(&a, "threads %u\n", p->host_threads);
    append(&a, "# dir      bytes  best      chunk    thr  staging   chunk    thr   best_us  staging_us  pageable_us\n");
    for (int d = 0; d < 2; d++)
        for (unsigned c = 0; c < PS_CLASSES; c++) {
            const ps_class_plan *k = &p->classes[d][c];
            append(&a, "%-4s %10zu  %-8s %8zu %4u  %-8s %8zu %4u  %9.2f  %10.2f  %11.2f\n", direction_names[d],
                   ps_class_bytes(c), route_names[valid_route(k->best.route) ? k->best.route : 0], k->best.chunk,
                   k->best.threads, route_names[valid_route(k->staging.route) ? k->staging.route : 0],
                   k->staging.chunk, k->staging.threads, k->us_best, k->us_staging, k->us_pageable);
        }
    append(&a, "end\n");
    return a.used;
}

pinstage_status pinstage_profile_save(const pinstage_profile *profile, const char *path) {
    static const char caller[] = "pinstage_profile_save";
    if (!profile || !path)
        return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: %s is NULL", caller, profile ? "path" : "profile");
    size_t len = pinstage_profile_describe(profile, NULL, 0);
    char *text = malloc(len + 1);
    if (!text) return ps_fail(PINSTAGE_ERROR_OUT_OF_MEMORY, "%s: out of host memory", caller);
    pinstage_profile_describe(profile, text, len + 1);
    FILE *f = fopen(path, "w");
    int ok = f && fwrite(text, 1, len, f) == len;
    int err = errno;
    if (f && fclose(f) != 0 && ok) ok = 0, err = errno;
    free(text);
    if (!ok)
        return ps_fail((pinstage_status)CUDA_ERROR_OPERATING_SYSTEM, "%s: cannot write '%s': %s", caller, path, strerror(err));
    return PINSTAGE_SUCCESS;
}

/* The current context's GPU and driver, to refuse a profile made for others. */
static pinstage_status this_machine(const ps_driver *d, char *name, size_t len, int *driver_version,
                                    const char *caller) {
    CUdevice dev;
    CUresult r = d->cuCtxGetDevice(&dev);
    if (r) return ps_fail_driver((pinstage_status)r, caller, "cuCtxGetDevice");
    if ((r = d->cuDeviceGetName(name, (int)len, dev))) return ps_fail_driver((pinstage_status)r, caller, "cuDeviceGetName");
    if ((r = d->cuDriverGetVersion(driver_version)))
        return ps_fail_driver((pinstage_status)r, caller, "cuDriverGetVersion");
    return PINSTAGE_SUCCESS;
}

static pinstage_status bad_line(const char *caller, const char *path, int line, const char *why) {
    return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: '%s' line %d: %s", caller, path, line, why);
}

/* Copies as much of `src` as fits (a device name longer than the driver's
 * 256 bytes cannot match anyway). */
static void copy_text(char *dst, size_t size, const char *src) {
    size_t n = strlen(src);
    if (n >= size) n = size - 1;
    memcpy(dst, src, n);
    dst[n] = 0;
}

/* Reads "<key> <rest of line>"; returns the rest or NULL. */
static const char *keyed(char *line, const char *key) {
    size_t n = strlen(key);
    if (strncmp(line, key, n) || line[n] != ' ') return NULL;
    line[strcspn(line, "\n")] = 0;
    return line + n + 1;
}

static int parse_plan(char *route, const char *chunk, const char *threads, ps_plan *plan) {
    char *end;
    int r = lookup(route_names, 3, route);
    if (r < 0) return -1;
    errno = 0;
    unsigned long long c = strtoull(chunk, &end, 10);
    if (errno || *end || *chunk == '-') return -1;
    unsigned long t = strtoul(threads, &end, 10);
    if (errno || *end || *threads == '-' || t > 4096) return -1;
    plan->route = r;
    plan->chunk = (size_t)c;
    plan->threads = (unsigned)t;
    return 0;
}

static pinstage_status parse(FILE *f, const char *path, pinstage_profile *p, const char *caller) {
    char line[512];
    int n = 0;
    const char *v;
#define NEXT_LINE() (++n, fgets(line, sizeof line, f) != NULL)
    int version;
    if (!NEXT_LINE() || sscanf(line, "pinstage-profile %d", &version) != 1)
        return bad_line(caller, path, n, "not a pinstage profile (expected 'pinstage-profile 1')");
    if (version != FORMAT_VERSION)
        return bad_line(caller, path, n, "a profile format this version of pinstage does not read");
    if (!NEXT_LINE() || !(v = keyed(line, "origin")) || (p->origin = lookup(origin_names, 3, v)) < 0)
        return bad_line(caller, path, n, "expected 'origin builtin|measured|fixed'");
    if (!NEXT_LINE() || !(v = keyed(line, "device"))) return bad_line(caller, path, n, "expected 'device NAME'");
    copy_text(p->device_name, sizeof p->device_name, v);
    if (!NEXT_LINE() || !(v = keyed(line, "pci"))) return bad_line(caller, path, n, "expected 'pci BUS-ID'");
    copy_text(p->pci_bus_id, sizeof p->pci_bus_id, v);
    if (!NEXT_LINE() || sscanf(line, "driver %d", &p->driver_version) != 1)
        return bad_line(caller, path, n, "expected 'driver VERSION'");
    if (!NEXT_LINE() || sscanf(line, "threads %u", &p->host_threads) != 1)
        return bad_line(caller, path, n, "expected 'threads N'");
    for (int d = 0; d < 2; d++)
        for (unsigned c = 0; c < PS_CLASSES; c++) {
            do {
                if (!NEXT_LINE()) return bad_line(caller, path, n, "the file ends before every size class is listed");
            } while (line[0] == '#');
            char dir[8], best[16], bchunk[24], bthr[16], staging[16], schunk[24], sthr[16], extra[2];
            size_t bytes;
            ps_class_plan *k = &p->classes[d][c];
            int fields = sscanf(line, "%7s %zu %15s %23s %15s %15s %23s %15s %lf %lf %lf %1s", dir, &bytes, best,
                                bchunk, bthr, staging, schunk, sthr, &k->us_best, &k->us_staging, &k->us_pageable, extra);
            if (fields != 11) return bad_line(caller, path, n, "expected 11 columns");
            if (strcmp(dir, direction_names[d]) || bytes != ps_class_bytes(c)) {
                char why[128];
                snprintf(why, sizeof why, "expected the row '%s %zu'", direction_names[d], ps_class_bytes(c));
                return bad_line(caller, path, n, why);
            }
            if (parse_plan(best, bchunk, bthr, &k->best) || parse_plan(staging, schunk, sthr, &k->staging))
                return bad_line(caller, path, n, "a route is not pageable|staged|engine, or a number is malformed");
            if (k->staging.route == PINSTAGE_ROUTE_PAGEABLE)
                return bad_line(caller, path, n, "the staging column names the pageable path");
        }
    if (!NEXT_LINE() || strcmp(line, "end\n")) return bad_line(caller, path, n, "expected 'end'");
    if (NEXT_LINE()) return bad_line(caller, path, n, "text after 'end'");
#undef NEXT_LINE
    return PINSTAGE_SUCCESS;
}

pinstage_status pinstage_profile_load(pinstage_profile **out, const char *path) {
    static const char caller[] = "pinstage_profile_load";
    if (!out || !path) return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: %s is NULL", caller, out ? "path" : "out");
    *out = NULL;
    pinstage_profile *p = calloc(1, sizeof *p);
    if (!p) return ps_fail(PINSTAGE_ERROR_OUT_OF_MEMORY, "%s: out of host memory", caller);
    FILE *f = fopen(path, "r");
    if (!f) {
        int err = errno;
        free(p);
        return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: cannot read '%s': %s", caller, path, strerror(err));
    }
    pinstage_status s = parse(f, path, p, caller);
    fclose(f);
    if (!s && p->origin == PINSTAGE_PROFILE_MEASURED) {
        const ps_driver *d;
        char name[256];
        int version = 0;
        if (!(s = ps_driver_get(&d)) && !(s = this_machine(d, name, sizeof name, &version, caller))) {
            if (strcmp(name, p->device_name))
                s = ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: '%s' was measured on a %s, not on this %s", caller,
                            path, p->device_name, name);
            else if (version != p->driver_version)
                s = ps_fail(PINSTAGE_ERROR_INVALID_VALUE,
                            "%s: '%s' was measured with driver version %d, this driver is version %d", caller, path,
                            p->driver_version, version);
        }
    }
    if (s) {
        free(p);
        return s;
    }
    *out = p;
    return PINSTAGE_SUCCESS;
}

/* For calibrate.c: the machine a measured profile describes. */
pinstage_status ps_profile_stamp(pinstage_profile *p, const ps_driver *d, const char *caller) {
    pinstage_status s = this_machine(d, p->device_name, sizeof p->device_name, &p->driver_version, caller);
    if (s) return s;
    CUdevice dev;
    CUresult r = d->cuCtxGetDevice(&dev);
    if (r) return ps_fail_driver((pinstage_status)r, caller, "cuCtxGetDevice");
    if ((r = d->cuDeviceGetPCIBusId(p->pci_bus_id, (int)sizeof p->pci_bus_id, dev)))
        return ps_fail_driver((pinstage_status)r, caller, "cuDeviceGetPCIBusId");
    return PINSTAGE_SUCCESS;
}
