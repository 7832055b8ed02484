/* SPDX-License-Identifier: MIT */
/* NUMA topology from sysfs, placement by mbind or first touch, and where
 * pages landed by move_pages. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "numa.h"

/* From <linux/mempolicy.h>, which the library does not need to find. */
#define PS_MPOL_PREFERRED 1
#define PS_MPOL_F_NODE 1
#define PS_MPOL_F_ADDR 2

static _Atomic(const char *) sysfs_root;

void ps_numa_set_sysfs_root(const char *root) { atomic_store(&sysfs_root, root); }

static const char *root(void) {
    const char *r = atomic_load(&sysfs_root);
    return r ? r : "/sys";
}

/* The first line of <root>/<rel> into text; 0 on success. */
static int read_line(const char *rel, char *text, size_t len) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", root(), rel);
    FILE *f = fopen(path, "re");
    if (!f) return -1;
    int ok = fgets(text, (int)len, f) != NULL;
    fclose(f);
    return ok ? 0 : -1;
}

/* A sysfs list ("0-3,8,10-11") into a bitmap of `bits` entries (the
 * highest + 1 set, or -1 when the text is not such a list). */
static int parse_list(const char *text, unsigned char *bitmap, int bits) {
    int highest = -1;
    const char *p = text;
    memset(bitmap, 0, (size_t)(bits + 7) / 8);
    while (*p && *p != '\n') {
        char *end;
        long lo = strtol(p, &end, 10), hi = lo;
        if (end == p || lo < 0) return -1;
        p = end;
        if (*p == '-') {
            hi = strtol(p + 1, &end, 10);
            if (end == p + 1 || hi < lo) return -1;
            p = end;
        }
        for (long i = lo; i <= hi && i < bits; i++) bitmap[i / 8] |= (unsigned char)(1u << (i % 8));
        if (hi > highest) highest = (int)hi;
        if (*p == ',') p++;
        else if (*p && *p != '\n') return -1;
    }
    return highest + 1;
}

/* The online nodes (sysfs node/online) into a bitmap: the highest + 1, or
 * -1 where sysfs does not say. */
static int online_nodes(unsigned char nodes[PS_NUMA_MAX_NODES / 8]) {
    char text[256];
    if (read_line("devices/system/node/online", text, sizeof text)) return -1;
    return parse_list(text, nodes, PS_NUMA_MAX_NODES);
}

int ps_numa_node_count(void) {
    unsigned char nodes[PS_NUMA_MAX_NODES / 8];
    int n = online_nodes(nodes);
    return n < 1 ? 1 : n > PS_NUMA_MAX_NODES ? PS_NUMA_MAX_NODES : n;
}

int ps_numa_node_online(int node) {
    unsigned char nodes[PS_NUMA_MAX_NODES / 8];
    if (node < 0 || node >= PS_NUMA_MAX_NODES) return 0;
    if (online_nodes(nodes) < 1) return node == 0; /* not said: one node */
    return (nodes[node / 8] >> (node % 8)) & 1;
}

int ps_numa_node_cpus(int node, cpu_set_t *set) {
    char rel[128], text[4096];
    unsigned char cpus[CPU_SETSIZE / 8];
    cpu_set_t allowed;
    CPU_ZERO(set);
    if (node < 0 || node >= PS_NUMA_MAX_NODES) return 0;
    snprintf(rel, sizeof rel, "devices/system/node/node%d/cpulist", node);
    if (read_line(rel, text, sizeof text) || parse_list(text, cpus, CPU_SETSIZE) < 0) return 0;
    if (sched_getaffinity(0, sizeof allowed, &allowed)) CPU_ZERO(&allowed);
    for (int i = 0; i < CPU_SETSIZE; i++)
        if ((cpus[i / 8] >> (i % 8)) & 1 && CPU_ISSET(i, &allowed)) CPU_SET(i, set);
    return CPU_COUNT(set);
}

int ps_numa_device_node(const ps_driver *d, CUdevice dev) {
    int node = -1;
    if (d->cuDeviceGetAttribute(&node, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, dev) == CUDA_SUCCESS)
        return node >= 0 && node < PS_NUMA_MAX_NODES ? node : -1;
    /* Older drivers: the PCI function's node, as the kernel knows it. The
     * driver spells the bus id in capitals and sometimes with an 8-digit
     * domain; sysfs in lower case with four. */
    char bus_id[64], rel[128], text[32];
    unsigned domain, bus, device, function;
    if (d->cuDeviceGetPCIBusId(bus_id, (int)sizeof bus_id, dev) != CUDA_SUCCESS ||
        sscanf(bus_id, "%x:%x:%x.%x", &domain, &bus, &device, &function) != 4)
        return -1;
    snprintf(rel, sizeof rel, "bus/pci/devices/%04x:%02x:%02x.%x/numa_node", domain & 0xffff, bus, device, function);
    if (read_line(rel, text, sizeof text)) return -1;
    node = atoi(text);
    return node >= 0 && node < PS_NUMA_MAX_NODES ? node : -1;
}

/* ---- Placement ----------------------------------------------------------------- */

static size_t page_size(void) {
    long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? (size_t)p : 4096;
}

static void touch(unsigned char *p, size_t bytes) {
    size_t step = page_size();
    for (size_t at = 0; at < bytes; at += step) ((volatile unsigned char *)p)[at] = 0;
}

typedef struct {
    unsigned char *p;
    size_t bytes;
    cpu_set_t cpus;
} toucher;

static void *touch_on_node(void *arg) {
    toucher *t = arg;
    /* The thread was created on the node's CPUs; a later migration would
     * only put some pages elsewhere, which ps_numa_where reports. */
    touch(t->p, t->bytes);
    return NULL;
}

/* First touch from a thread on the node's CPUs: the default policy puts a
 * page on the node of the CPU that faults it in. */
static int touch_from_node(unsigned char *p, size_t bytes, int node) {
    toucher t = {p, bytes, {{0}}};
    if (!ps_numa_node_cpus(node, &t.cpus)) return -1;
    pthread_attr_t attr;
    pthread_t thread;
    if (pthread_attr_init(&attr)) return -1;
    int r = pthread_attr_setaffinity_np(&attr, sizeof t.cpus, &t.cpus);
    if (!r) r = pthread_create(&thread, &attr, touch_on_node, &t);
    pthread_attr_destroy(&attr);
    if (r) return -1;
    pthread_join(thread, NULL);
    return 0;
}

void *ps_numa_map(size_t bytes, int node) {
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    /* A child of fork() must not share these pages copy-on-write: a write
     * here afterwards could move the parent's page away from the one the
     * device DMAs to (kernels before 5.8). The child has no context anyway. */
    madvise(p, bytes, MADV_DONTFORK);
    int touched = 0;
    if (node >= 0 && node < PS_NUMA_MAX_NODES) {
        unsigned long mask[PS_NUMA_MAX_NODES / (8 * sizeof(unsigned long))] = {0};
        mask[node / (8 * sizeof(unsigned long))] = 1ul << (node % (8 * sizeof(unsigned long)));
        /* maxnode counts one more bit than the kernel reads. */
        if (syscall(SYS_mbind, p, bytes, PS_MPOL_PREFERRED, mask, (unsigned long)PS_NUMA_MAX_NODES + 1, 0ul) != 0)
            touched = touch_from_node(p, bytes, node) == 0;
    }
    /* Every page present before the driver pins the range, so pinning
     * faults nothing in on some other thread's node. */
    if (!touched) touch(p, bytes);
    return p;
}

void ps_numa_unmap(void *p, size_t bytes) {
    if (p) munmap(p, bytes);
}

#define WHERE_SAMPLES 64

int ps_numa_where(const void *p, size_t bytes) {
    if (!p || !bytes) return -1;
    size_t page = page_size(), pages = (bytes + page - 1) / page;
    size_t n = pages < WHERE_SAMPLES ? pages : WHERE_SAMPLES;
    void *addr[WHERE_SAMPLES];
    int status[WHERE_SAMPLES];
    uintptr_t base = (uintptr_t)p & ~(uintptr_t)(page - 1);
    for (size_t i = 0; i < n; i++) {
        addr[i] = (void *)(base + (n > 1 ? i * (pages - 1) / (n - 1) : 0) * page);
        status[i] = -1;
    }
    /* move_pages with no target nodes moves nothing: it reports. */
    if (syscall(SYS_move_pages, 0, (unsigned long)n, addr, NULL, status, 0) != 0) {
        for (size_t i = 0; i < n; i++) {
            int node = -1;
            if (syscall(SYS_get_mempolicy, &node, NULL, 0ul, addr[i], (unsigned long)(PS_MPOL_F_NODE | PS_MPOL_F_ADDR)))
                return -1;
            status[i] = node;
        }
    }
    int found = -1;
    for (size_t i = 0; i < n; i++) {
        if (status[i] < 0) return -1; /* not present, or not ours to ask about */
        if (found >= 0 && status[i] != found) return -2;
        found = status[i];
    }
    return found;
}
