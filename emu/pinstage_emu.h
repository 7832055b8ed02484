/* SPDX-License-Identifier: MIT */
/* Control and inspection of pinstage's emulated CUDA driver (libpinstage_emu.so).
 *
 * The emulated driver implements the driver ABI pinstage uses, loaded like
 * the real one (PINSTAGE_DRIVER=/path/libpinstage_emu.so). Tests reach these
 * functions with dlsym on the same library handle; each also has an
 * environment variable, read at cuInit:
 *
 *   PINSTAGE_EMU_LATENCY_US     fixed cost of every queued operation (default 20)
 *   PINSTAGE_EMU_BANDWIDTH_GBPS copy and memset rate, 1e9 bytes/s (default 4); a
 *                               list ("4,8") gives each device its own
 *   PINSTAGE_EMU_NUMA           the host NUMA node of each device ("0,0,1,1"),
 *                               answered as CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID
 *                               (unset: the attribute is unknown, as to
 *                               drivers before CUDA 12.2)
 *   PINSTAGE_EMU_PINNED_GBPS    the rate of copies to or from page-locked host
 *                               memory (default: the rate above)
 *   PINSTAGE_EMU_PAGEABLE_GBPS  the rate at which the driver stages pageable host
 *                               memory, spent on the calling thread (default:
 *                               no cost); with the one above, either route of
 *                               an upload or download can be made the slow one
 *   PINSTAGE_EMU_DEVICES        number of devices (default 1)
 *   PINSTAGE_EMU_DEVICE_BYTES   device memory per process (default 8 GiB)
 *   PINSTAGE_EMU_PINNED_BYTES   pinnable host memory (default 4 GiB)
 *   PINSTAGE_EMU_PINNED_ALIGN   alignment of pinned allocations (default: a page)
 *   PINSTAGE_EMU_FAIL           faults: "entry:N:code[,entry:N+:code...]"; N+ fails
 *                               the Nth call and every one after it
 *   PINSTAGE_EMU_INLINE         1: every queued operation runs at once, on the
 *                               calling thread, when nothing is queued before it
 *                               (deterministic and fast, for fuzzing and fault
 *                               sweeps; ordering bugs then pass, so the suite
 *                               runs without it)
 *
 * Streams and events belong to the context they were made in: a copy, a
 * memset or cuStreamWaitEvent on a stream of another context than the
 * current one fails with CUDA_ERROR_INVALID_CONTEXT, and recording an event
 * on a stream of another context with CUDA_ERROR_INVALID_HANDLE, so a
 * missing context switch fails in tests. The legacy default stream serves
 * every context.
 *
 * The last release of a device's primary context destroys it with everything
 * allocated or registered in it: later uses of that memory fail, as on a real
 * driver. A destroyed stream's worker thread is joined by a later
 * cuStreamCreate.
 */
#ifndef PINSTAGE_EMU_H
#define PINSTAGE_EMU_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Present only in the emulated driver: its presence is how pinstage tells. */
int pinstage_emu_version(void);

/* Makes the Nth call (1 = the next one) of the entry point named by its base
 * name ("cuMemAllocHost", "cuStreamSynchronize", ...) return `result` without
 * doing anything; with `every_after` set, that call and all later ones fail.
 * nth == 0 clears the entry's fault. Returns 0, or -1 for an unknown name. */
int pinstage_emu_fail(const char *entry, unsigned long nth, int result, int every_after);
void pinstage_emu_clear_faults(void);

/* Calls made to an entry point since the last reset; NULL: to all of them. */
unsigned long pinstage_emu_calls(const char *entry);
void pinstage_emu_reset_calls(void);
/* The calls made since the last reset, in order, by base name: fills up to
 * `max` entries and returns how many calls there were (a fault sweep fails
 * each of them in turn). */
size_t pinstage_emu_trace(const char **entries, size_t max);

typedef struct pinstage_emu_live {
    size_t pinned_allocations, pinned_bytes; /* cuMemAllocHost / cuMemHostAlloc */
    size_t registered_ranges, registered_bytes;
    size_t device_allocations, device_bytes;
    size_t streams, events; /* created and not destroyed */
} pinstage_emu_live;

/* What is allocated now: a leak check compares two snapshots. */
void pinstage_emu_get_live(pinstage_emu_live *live);

/* Timing of queued operations: latency per operation plus bytes over bandwidth. */
void pinstage_emu_set_timing(double latency_us, double bandwidth_gbps);
/* PINSTAGE_EMU_PAGEABLE_GBPS and PINSTAGE_EMU_PINNED_GBPS at run time (0: the defaults). */
void pinstage_emu_set_host_rates(double pageable_gbps, double pinned_gbps);
/* PINSTAGE_EMU_INLINE, switched at run time. */
void pinstage_emu_set_inline(int on);
/* Alignment of later pinned allocations; 0 restores page alignment. */
void pinstage_emu_set_pinned_alignment(size_t alignment);

/* PINSTAGE_EMU_NUMA at run time: nodes[i] for device i (count 0: unknown).
 * Returns 0, or -1 for a count above 64. */
int pinstage_emu_set_numa(const int *nodes, int count);
/* One device's copy rate (0: the common one). Returns 0, or -1 for a bad device. */
int pinstage_emu_set_device_bandwidth(int device, double gbps);
/* Every later call made in `device`'s context fails with `result`, as after
 * a sticky error (0 heals it); other devices carry on. Returns 0 or -1. */
int pinstage_emu_fail_device(int device, int result);

#ifdef __cplusplus
}
#endif

#endif
