/* SPDX-License-Identifier: MIT */
/* NUMA: which host node a GPU hangs off, putting pinned memory on a node,
 * and checking where its pages are.
 *
 * On a two-socket host each GPU sits behind one socket's PCIe root; a DMA
 * from memory on the other socket crosses the socket link, and so does a
 * copy thread of the other socket writing into pinned memory. Nothing here
 * needs libnuma: the topology comes from sysfs, placement from the mbind
 * system call (or, where a container forbids it, from touching the pages on
 * one of the node's CPUs, which the kernel's default policy honours), and
 * the check from move_pages (or get_mempolicy). */
#ifndef PINSTAGE_NUMA_H
#define PINSTAGE_NUMA_H

#include <sched.h> /* cpu_set_t: the library builds with _GNU_SOURCE */
#include <stddef.h>

#include "driver.h"

/* Nodes pinstage can name: 0 .. PS_NUMA_MAX_NODES - 1. */
#define PS_NUMA_MAX_NODES 64

/* Online nodes of this host (sysfs node/online): the highest node + 1; 1
 * where sysfs does not say. */
int ps_numa_node_count(void);

/* Whether `node` is online. */
int ps_numa_node_online(int node);

/* The CPUs of `node` that this process may run on, into *set; their count
 * (0 for a node without such CPUs or an unknown one). */
int ps_numa_node_cpus(int node, cpu_set_t *set);

/* The host node closest to device `dev`: the driver's
 * CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID (CUDA 12.2+), else the numa_node file of
 * the device's PCI function in sysfs. -1: not known, or a host of one node. */
int ps_numa_device_node(const ps_driver *d, CUdevice dev);

/* `bytes` (a multiple of the page size) of anonymous memory with every
 * page present, placed on `node` as well as the host allows: an mbind
 * policy, else first touch from one of the node's CPUs, else wherever the
 * kernel puts it. NULL when the mapping fails. The policy is "preferred":
 * memory short on the node comes from another rather than failing, and
 * ps_numa_where says where it went. */
void *ps_numa_map(size_t bytes, int node);
void ps_numa_unmap(void *p, size_t bytes);

/* The node the pages of [p, p + bytes) are on, from a sample of up to 64
 * pages spread over the range: the node, -1 when the kernel will not say,
 * -2 when they are on several nodes. */
int ps_numa_where(const void *p, size_t bytes);

/* For tests: read the topology below `root` instead of /sys (NULL: /sys). */
void ps_numa_set_sysfs_root(const char *root);

#endif
