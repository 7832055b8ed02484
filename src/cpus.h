/* SPDX-License-Identifier: MIT */
/* How many CPUs the engine may use: the ones this process may run on
 * (affinity mask, cgroup CPU quota), less the ones other threads keep busy
 * right now. A pipeline's process decodes, preprocesses and runs models on
 * other threads; copy threads beyond the free CPUs only take turns with
 * them, and a copy thread that loses its CPU mid-block holds its chunk for
 * a scheduler time slice (milliseconds). */
#ifndef PINSTAGE_CPUS_H
#define PINSTAGE_CPUS_H

/* CPUs this process may use: the affinity mask's count, lowered to the
 * cgroup's CPU quota (cgroup v2 cpu.max, v1 cpu.cfs_quota_us) rounded up.
 * Read once. At least 1. PINSTAGE_CPUS=N in the environment sets it. */
unsigned ps_cpus_usable(void);

/* Threads runnable now that are not ours (the whole machine's runnable
 * count from /proc/loadavg less `ours`, the threads of this library that
 * are running, the caller included). Sampled at most every 2 ms; 0 where
 * the count cannot be read. */
unsigned ps_cpus_busy_elsewhere(unsigned ours);

/* For tests: replaces the machine's runnable count (NULL restores it) and
 * the usable CPUs (0 restores them). */
void ps_cpus_set_probe(unsigned (*runnable)(void));
void ps_cpus_set_usable(unsigned cpus);

#endif
