/* SPDX-License-Identifier: MIT */
/* The emulator's own knobs: configuration, call counting, fault injection,
 * the inspection API tests use, and cuGetProcAddress, the one symbol a
 * driver loader looks up by name. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu.h"

emu_state emu = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .changed = PTHREAD_COND_INITIALIZER,
};

static const struct {
    const char *name;
    int version; /* the ABI provided: requests for older versions are refused */
    void *fn;
} entries[EMU_ENTRY_COUNT] = {
#define EMU_ENTRY(name, version, params) [EMU_ID_##name] = {#name, version, (void *)emu_##name},
    PS_DRIVER_ENTRY_POINTS(EMU_ENTRY) PS_EXTRA_ENTRY_POINTS(EMU_ENTRY)
#undef EMU_ENTRY
        [EMU_ID_cuGetProcAddress] = {"cuGetProcAddress", 11030, NULL},
};

static const char *names_of(int id) { return entries[id].name; }

static int entry_id(const char *name) {
    for (int i = 0; i < EMU_ENTRY_COUNT; i++)
        if (name && strcmp(entries[i].name, name) == 0) return i;
    return -1;
}

static double env_double(const char *name, double fallback) {
    const char *v = getenv(name);
    char *end;
    if (!v || !*v) return fallback;
    double d = strtod(v, &end);
    return *end ? fallback : d;
}

/* A comma-separated list of numbers into out[max]: how many were read
 * (0 for an unset or malformed variable). */
static int env_list(const char *name, double *out, int max) {
    const char *v = getenv(name);
    int n = 0;
    while (v && *v && n < max) {
        char *end;
        out[n] = strtod(v, &end);
        if (end == v || (*end && *end != ',')) return 0;
        n++;
        v = *end ? end + 1 : end;
    }
    return n;
}

static void set_fault_locked(int id, unsigned long nth, int result, int every_after) {
    emu.fail_at[id] = nth ? emu.calls[id] + nth : 0;
    emu.fail_result[id] = result;
    emu.fail_every[id] = every_after;
}

/* "entry:N:code" or "entry:N+:code", comma-separated. */
static void parse_faults(const char *spec) {
    char copy[1024];
    snprintf(copy, sizeof copy, "%s", spec);
    for (char *save = NULL, *item = strtok_r(copy, ",", &save); item;
         item = strtok_r(NULL, ",", &save)) {
        char name[128];
        unsigned long nth;
        char plus[2] = "";
        int code;
        if (sscanf(item, "%127[^:]:%lu%1[+]:%d", name, &nth, plus, &code) == 4 ||
            sscanf(item, "%127[^:]:%lu:%d", name, &nth, &code) == 3) {
            int id = entry_id(name);
            if (id >= 0) {
                set_fault_locked(id, nth, code, plus[0] == '+');
                continue;
            }
        }
        fprintf(stderr, "pinstage emulated driver: ignoring PINSTAGE_EMU_FAIL item '%s'\n", item);
    }
}

static void set_timing_locked(double latency_us, double bandwidth_gbps) {
    emu.latency_ns = latency_us > 0 ? latency_us * 1e3 : 0;
    emu.bytes_per_ns = bandwidth_gbps > 0 ? bandwidth_gbps : 1e9; /* GB/s == bytes/ns */
}

static void set_host_rates_locked(double pageable_gbps, double pinned_gbps) {
    emu.pageable_ns_per_byte = pageable_gbps > 0 ? 1 / pageable_gbps : 0;
    emu.pinned_bytes_per_ns = pinned_gbps > 0 ? pinned_gbps : 0;
}

static pthread_once_t configured = PTHREAD_ONCE_INIT;

static void configure_once(void) {
    pthread_mutex_lock(&emu.lock);
    double rates[EMU_MAX_DEVICES], nodes[EMU_MAX_DEVICES];
    int nrates = env_list("PINSTAGE_EMU_BANDWIDTH_GBPS", rates, EMU_MAX_DEVICES);
    /* One rate: every device's. Several: one per device, the first also the default. */
    set_timing_locked(env_double("PINSTAGE_EMU_LATENCY_US", 20), nrates ? rates[0] : 4);
    for (int i = 0; nrates > 1 && i < nrates; i++) emu.device_bytes_per_ns[i] = rates[i] > 0 ? rates[i] : 0;
    int nnodes = env_list("PINSTAGE_EMU_NUMA", nodes, EMU_MAX_DEVICES);
    emu.have_numa = nnodes > 0;
    for (int i = 0; i < EMU_MAX_DEVICES; i++) emu.numa[i] = i < nnodes ? (int)nodes[i] : -1;
    set_host_rates_locked(env_double("PINSTAGE_EMU_PAGEABLE_GBPS", 0), env_double("PINSTAGE_EMU_PINNED_GBPS", 0));
    emu.devices = (int)env_double("PINSTAGE_EMU_DEVICES", 1);
    if (emu.devices < 0) emu.devices = 0;
    emu.device_limit = (size_t)env_double("PINSTAGE_EMU_DEVICE_BYTES", 8.0 * (1ull << 30));
    emu.pinned_limit = (size_t)env_double("PINSTAGE_EMU_PINNED_BYTES", 4.0 * (1ull << 30));
    emu.pinned_align = (size_t)env_double("PINSTAGE_EMU_PINNED_ALIGN", 0);
    emu.inline_ops = env_double("PINSTAGE_EMU_INLINE", 0) != 0;
    const char *faults = getenv("PINSTAGE_EMU_FAIL");
    if (faults) parse_faults(faults);
    pthread_mutex_unlock(&emu.lock);
}

void emu_configure(void) { pthread_once(&configured, configure_once); }

CUresult emu_enter(int id) {
    CUresult r = CUDA_SUCCESS;
    emu_configure();
    pthread_mutex_lock(&emu.lock);
    unsigned long n = ++emu.calls[id];
    if (emu.trace_len < EMU_TRACE_MAX) emu.trace[emu.trace_len] = (unsigned short)id;
    emu.trace_len++;
    if (emu.fail_at[id] && (n == emu.fail_at[id] || (emu.fail_every[id] && n > emu.fail_at[id])))
        r = (CUresult)emu.fail_result[id];
    pthread_mutex_unlock(&emu.lock);
    return r;
}

/* ---- cuGetProcAddress ---------------------------------------------------- */

static CUresult get_proc(const char *symbol, void **pfn, int version, cuuint64_t flags,
                         CUdriverProcAddressQueryResult *status) {
    CUresult r = emu_enter(EMU_ID_cuGetProcAddress);
    CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    if (r == CUDA_SUCCESS && (!symbol || !pfn || flags > 2)) r = CUDA_ERROR_INVALID_VALUE;
    if (pfn) *pfn = NULL;
    if (r == CUDA_SUCCESS) {
        int id = entry_id(symbol);
        if (id < 0 || !entries[id].fn) {
            r = CUDA_ERROR_NOT_FOUND;
        } else if (version < entries[id].version) {
            /* An older ABI (e.g. the 32-bit-size cuMemAllocHost) is not emulated. */
            found = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
            r = CUDA_ERROR_NOT_FOUND;
        } else {
            *pfn = entries[id].fn;
            found = CU_GET_PROC_ADDRESS_SUCCESS;
        }
    }
    if (status) *status = found;
    return r;
}

EMU_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
                                        cuuint64_t flags, CUdriverProcAddressQueryResult *status) {
    return get_proc(symbol, pfn, version, flags, status);
}

EMU_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags) {
    return get_proc(symbol, pfn, version, flags, NULL);
}

/* ---- Control API ---------------------------------------------------------- */

EMU_EXPORT int pinstage_emu_version(void) { return 1; }

EMU_EXPORT int pinstage_emu_fail(const char *entry, unsigned long nth, int result, int every_after) {
    int id = entry_id(entry);
    if (id < 0) return -1;
    emu_configure();
    pthread_mutex_lock(&emu.lock);
    set_fault_locked(id, nth, result, every_after);
    pthread_mutex_unlock(&emu.lock);
    return 0;
}

EMU_EXPORT void pinstage_emu_clear_faults(void) {
    emu_configure();
    pthread_mutex_lock(&emu.lock);
    memset(emu.fail_at, 0, sizeof emu.fail_at);
    pthread_mutex_unlock(&emu.lock);
}

EMU_EXPORT unsigned long pinstage_emu_calls(const char *entry) {
    unsigned long total = 0;
    int id = entry ? entry_id(entry) : -1;
    pthread_mutex_lock(&emu.lock);
    if (id >= 0)
        total = emu.calls[id];
    else if (!entry)
        for (int i = 0; i < EMU_ENTRY_COUNT; i++) total += emu.calls[i];
    pthread_mutex_unlock(&emu.lock);
    return total;
}

EMU_EXPORT void pinstage_emu_reset_calls(void) {
    pthread_mutex_lock(&emu.lock);
    /* Pending faults keep their distance from the current count. */
    for (int i = 0; i < EMU_ENTRY_COUNT; i++) {
        if (emu.fail_at[i]) emu.fail_at[i] = emu.fail_at[i] > emu.calls[i] ? emu.fail_at[i] - emu.calls[i] : 1;
        emu.calls[i] = 0;
    }
    emu.trace_len = 0;
    pthread_mutex_unlock(&emu.lock);
}

EMU_EXPORT size_t pinstage_emu_trace(const char **entries, size_t max) {
    pthread_mutex_lock(&emu.lock);
    size_t n = emu.trace_len;
    for (size_t i = 0; i < n && i < max && i < EMU_TRACE_MAX; i++) entries[i] = names_of(emu.trace[i]);
    pthread_mutex_unlock(&emu.lock);
    return n;
}

EMU_EXPORT void pinstage_emu_get_live(pinstage_emu_live *live) {
    if (!live) return;
    memset(live, 0, sizeof *live);
    pthread_mutex_lock(&emu.lock);
    live->pinned_allocations = emu.pinned_allocations;
    live->pinned_bytes = emu.pinned_bytes;
    live->registered_ranges = emu.pinned.count - emu.pinned_allocations;
    live->registered_bytes = emu.registered_bytes;
    live->device_allocations = emu.device.count;
    live->device_bytes = emu.device_bytes;
    for (emu_stream *s = emu.streams; s; s = s->next_all) live->streams += !s->legacy && !s->destroyed;
    for (emu_event *e = emu.events; e; e = e->next_all) live->events++;
    pthread_mutex_unlock(&emu.lock);
}

EMU_EXPORT void pinstage_emu_set_timing(double latency_us, double bandwidth_gbps) {
    emu_configure();
    pthread_mutex_lock(&emu.lock);
    set_timing_locked(latency_us, bandwidth_gbps);
    pthread_mutex_unlock(&emu.lock);
}

EMU_EXPORT void pinstage_emu_set_host_rates(double pageable_gbps, double pinned_gbps) {
    emu_configure();
    pthread_mutex_lock(&emu.lock);
    set_host_rates_locked(pageable_gbps, pinned_gbps);
    pthread_mutex_unlock(&emu.lock);
}

EMU_EXPORT void pinstage_emu_set_inline(int on) {
    emu_configure();
    pthread_mutex_lock(&emu.lock);
    emu.inline_ops = on != 0;
    pthread_mutex_unlock(&emu.lock);
}

EMU_EXPORT void pinstage_emu_set_pinned_alignment(size_t alignment) {
    emu_configure();
    pthread_mutex_lock(&emu.lock);
    emu.pinned_align = alignment;
    pthread_mutex_unlock(&emu.lock);
}

EMU_EXPORT int pinstage_emu_set_numa(const int *nodes, int count) {
    if (count < 0 || count > EMU_MAX_DEVICES || (count && !nodes)) return -1;
    emu_configure();
    pthread_mutex_lock(&emu.lock);
    emu.have_numa = count > 0;
    for (int i = 0; i < EMU_MAX_DEVICES; i++) emu.numa[i] = i < count ? nodes[i] : -1;
    pthread_mutex_unlock(&emu.lock);
    return 0;
}

EMU_EXPORT int pinstage_emu_set_device_bandwidth(int device, double gbps) {
    if (device < 0 || device >= EMU_MAX_DEVICES) return -1;
    emu_configure();
    pthread_mutex_lock(&emu.lock);
    emu.device_bytes_per_ns[device] = gbps > 0 ? gbps : 0;
    pthread_mutex_unlock(&emu.lock);
    return 0;
}

EMU_EXPORT int pinstage_emu_fail_device(int device, int result) {
    if (device < 0 || device >= EMU_MAX_DEVICES) return -1;
    emu_configure();
    pthread_mutex_lock(&emu.lock);
    emu.device_failure[device] = result;
    pthread_mutex_unlock(&emu.lock);
    return 0;
}
