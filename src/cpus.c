/* SPDX-License-Identifier: MIT */
/* The CPUs the engine may use, and how many other threads want them now. */
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cpus.h"

/* ---- CPUs this process may use ------------------------------------------------- */

/* A cgroup v2 cpu.max ("max 100000" or "200000 100000") as CPUs, 0: no quota. */
static unsigned v2_quota(const char *dir) {
    char path[4200], text[64];
    snprintf(path, sizeof path, "/sys/fs/cgroup%s/cpu.max", dir);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    long quota = 0, period = 0;
    int ok = fgets(text, sizeof text, f) && sscanf(text, "%ld %ld", &quota, &period) == 2;
    fclose(f);
    if (!ok || quota <= 0 || period <= 0) return 0; /* "max" reads as no number */
    return (unsigned)((quota + period - 1) / period);
}

static long read_long(const char *path) {
    FILE *f = fopen(path, "r");
    long v = -1;
    if (f) {
        if (fscanf(f, "%ld", &v) != 1) v = -1;
        fclose(f);
    }
    return v;
}

/* A cgroup v1 CFS quota as CPUs, 0: none. */
static unsigned v1_quota(const char *mount, const char *dir) {
    char path[4200];
    snprintf(path, sizeof path, "/sys/fs/cgroup/%s%s/cpu.cfs_quota_us", mount, dir);
    long quota = read_long(path);
    snprintf(path, sizeof path, "/sys/fs/cgroup/%s%s/cpu.cfs_period_us", mount, dir);
    long period = read_long(path);
    if (quota <= 0 || period <= 0) return 0;
    return (unsigned)((quota + period - 1) / period);
}

/* Whether a v1 controller list ("cpu,cpuacct") names the cpu controller. */
static int names_cpu(const char *controllers) {
    char copy[256];
    snprintf(copy, sizeof copy, "%s", controllers);
    for (char *save = NULL, *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save))
        if (!strcmp(t, "cpu")) return 1;
    return 0;
}

/* The tightest quota on the way from this process's cgroup up to the root. */
static unsigned cgroup_cpus(void) {
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f) return 0;
    char line[4096];
    unsigned best = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *controllers = strchr(line, ':'), *dir;
        if (!controllers || !(dir = strchr(controllers + 1, ':'))) continue;
        *dir++ = 0;
        controllers++;
        int v2 = *controllers == 0;
        if (!v2 && !names_cpu(controllers)) continue;
        for (;;) {
            unsigned q = v2 ? v2_quota(dir) : v1_quota("cpu,cpuacct", dir);
            if (!v2 && !q) q = v1_quota("cpu", dir);
            if (q && (!best || q < best)) best = q;
            char *slash = strrchr(dir, '/');
            if (!*dir || !slash) break;
            *slash = 0; /* "/a/b" -> "/a" -> "" (the root) */
        }
    }
    fclose(f);
    return best;
}

static _Atomic unsigned usable_override;
static unsigned usable_cached;
static pthread_once_t usable_once = PTHREAD_ONCE_INIT;

static void find_usable(void) {
    /* PINSTAGE_CPUS=N: what detection cannot see (a quota set elsewhere). */
    const char *forced = getenv("PINSTAGE_CPUS");
    if (forced && atoi(forced) > 0) {
        usable_cached = (unsigned)atoi(forced);
        return;
    }
    long cpus = 0;
#ifdef CPU_COUNT
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) cpus = CPU_COUNT(&set);
#endif
    if (cpus <= 0) cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (cpus <= 0) cpus = 1;
    unsigned quota = cgroup_cpus();
    if (quota && quota < (unsigned long)cpus) cpus = quota;
    usable_cached = (unsigned)cpus;
}

unsigned ps_cpus_usable(void) {
    unsigned forced = atomic_load_explicit(&usable_override, memory_order_relaxed);
    if (forced) return forced;
    pthread_once(&usable_once, find_usable);
    return usable_cached;
}

void ps_cpus_set_usable(unsigned cpus) { atomic_store_explicit(&usable_override, cpus, memory_order_relaxed); }

/* ---- Threads runnable elsewhere ----------------------------------------------------- */

/* /proc/loadavg: "0.10 0.20 0.30 R/T last_pid", R the threads runnable now,
 * the reader included. About a microsecond to read with pread. */
static unsigned machine_runnable(void) {
    static _Atomic int fd = -2;
    int f = atomic_load_explicit(&fd, memory_order_acquire);
    if (f == -2) {
        int opened = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
        int expected = -2;
        if (!atomic_compare_exchange_strong(&fd, &expected, opened)) {
            if (opened >= 0) close(opened);
        }
        f = atomic_load_explicit(&fd, memory_order_acquire);
    }
    if (f < 0) return 0;
    char text[128];
    ssize_t n = pread(f, text, sizeof text - 1, 0);
    if (n <= 0) return 0;
    text[n] = 0;
    unsigned running = 0, total = 0;
    double a, b, c;
    if (sscanf(text, "%lf %lf %lf %u/%u", &a, &b, &c, &running, &total) != 5) return 0;
    return running;
}

static _Atomic(unsigned (*)(void)) probe;
static _Atomic uint64_t sampled_at; /* ns; 0: never */
static _Atomic unsigned sampled_elsewhere;

void ps_cpus_set_probe(unsigned (*runnable)(void)) {
    atomic_store(&probe, runnable);
    atomic_store(&sampled_at, 0);
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#define SAMPLE_NS 2000000u

unsigned ps_cpus_busy_elsewhere(unsigned ours) {
    unsigned (*p)(void) = atomic_load_explicit(&probe, memory_order_acquire);
    uint64_t now = now_ns(), at = atomic_load_explicit(&sampled_at, memory_order_acquire);
    /* What is cached is the others' count, not the raw one: our own threads
     * come and go between samples. */
    if (!p && at && now - at < SAMPLE_NS) return atomic_load_explicit(&sampled_elsewhere, memory_order_relaxed);
    unsigned runnable = p ? p() : machine_runnable();
    unsigned elsewhere = runnable > ours ? runnable - ours : 0;
    atomic_store_explicit(&sampled_elsewhere, elsewhere, memory_order_relaxed);
    atomic_store_explicit(&sampled_at, now ? now : 1, memory_order_release);
    return elsewhere;
}
