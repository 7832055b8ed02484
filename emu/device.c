/* SPDX-License-Identifier: MIT */
/* Initialization, devices, primary contexts and error names. Each emulated
 * device has one primary context; the current context is per thread. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu.h"

struct CUctx_st {
    int device;
};

static _Thread_local CUcontext current;

CUresult emu_need_context(void) {
    if (!emu.initialized) return CUDA_ERROR_NOT_INITIALIZED;
    if (!current || emu.primary_refs[current->device] <= 0) return CUDA_ERROR_INVALID_CONTEXT;
    /* A device that failed (pinstage_emu_fail_device) fails every call made
     * in its context, as a sticky error does; other devices carry on. */
    if (current->device < EMU_MAX_DEVICES && emu.device_failure[current->device])
        return (CUresult)emu.device_failure[current->device];
    return CUDA_SUCCESS;
}

int emu_current_device(void) { return current ? current->device : 0; }

CUresult emu_check_stream_context(const emu_stream *s) {
    /* The driver refuses a stream of another context than the current one;
     * this is what makes a missing context switch fail in tests. */
    return s->device >= 0 && current && s->device != current->device ? CUDA_ERROR_INVALID_CONTEXT : CUDA_SUCCESS;
}

static CUresult need_init(void) { return emu.initialized ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED; }

CUresult emu_cuInit(unsigned int flags) {
    EMU_ENTER(cuInit);
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&emu.lock);
    if (!emu.initialized) {
        emu.primary_refs = calloc((size_t)emu.devices + 1, sizeof *emu.primary_refs);
        emu.contexts = calloc((size_t)emu.devices + 1, sizeof *emu.contexts);
        emu.primary_flags = calloc((size_t)emu.devices + 1, sizeof *emu.primary_flags);
        for (int i = 0; i < emu.devices; i++) emu.contexts[i].device = i;
        emu_streams_init();
        emu.initialized = 1;
    }
    CUresult r = emu.devices > 0 ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
    pthread_mutex_unlock(&emu.lock);
    return r;
}

CUresult emu_cuDriverGetVersion(int *version) {
    EMU_ENTER(cuDriverGetVersion);
    if (!version) return CUDA_ERROR_INVALID_VALUE;
    *version = 13000;
    return CUDA_SUCCESS;
}

CUresult emu_cuDeviceGetCount(int *count) {
    EMU_ENTER(cuDeviceGetCount);
    if (need_init()) return CUDA_ERROR_NOT_INITIALIZED;
    if (!count) return CUDA_ERROR_INVALID_VALUE;
    *count = emu.devices;
    return CUDA_SUCCESS;
}

static CUresult check_device(CUdevice dev) {
    if (need_init()) return CUDA_ERROR_NOT_INITIALIZED;
    return dev >= 0 && dev < emu.devices ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

CUresult emu_cuDeviceGet(CUdevice *device, int ordinal) {
    EMU_ENTER(cuDeviceGet);
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = check_device(ordinal);
    if (!r) *device = ordinal;
    return r;
}

CUresult emu_cuDeviceGetName(char *name, int len, CUdevice dev) {
    EMU_ENTER(cuDeviceGetName);
    CUresult r = check_device(dev);
    if (r) return r;
    if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    snprintf(name, (size_t)len, "pinstage emulated device %d", dev);
    return CUDA_SUCCESS;
}

CUresult emu_cuDeviceGetAttribute(int *value, CUdevice_attribute attrib, CUdevice dev) {
    EMU_ENTER(cuDeviceGetAttribute);
    CUresult r = check_device(dev);
    if (r) return r;
    if (!value) return CUDA_ERROR_INVALID_VALUE;
    switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *value = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *value = 0; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *value = 4; break;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: *value = 2; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: *value = 0; break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: *value = 0xe0 + dev; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: *value = 0; break;
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID:
        /* Unset, the attribute is unknown, as it is to drivers before 12.2. */
        if (!emu.have_numa) return CUDA_ERROR_INVALID_VALUE;
        *value = dev < EMU_MAX_DEVICES ? emu.numa[dev] : -1;
        break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

CUresult emu_cuDeviceGetPCIBusId(char *bus_id, int len, CUdevice dev) {
    EMU_ENTER(cuDeviceGetPCIBusId);
    CUresult r = check_device(dev);
    if (r) return r;
    if (!bus_id || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    snprintf(bus_id, (size_t)len, "0000:%02x:00.0", 0xe0 + dev);
    return CUDA_SUCCESS;
}

CUresult emu_cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev) {
    EMU_ENTER(cuDevicePrimaryCtxRetain);
    CUresult r = check_device(dev);
    if (r) return r;
    if (!ctx) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&emu.lock);
    emu.primary_refs[dev]++;
    *ctx = &emu.contexts[dev];
    pthread_mutex_unlock(&emu.lock);
    return CUDA_SUCCESS;
}

CUresult emu_cuDevicePrimaryCtxRelease(CUdevice dev) {
    EMU_ENTER(cuDevicePrimaryCtxRelease);
    CUresult r = check_device(dev);
    if (r) return r;
    pthread_mutex_lock(&emu.lock);
    if (emu.primary_refs[dev] > 0) {
        /* The last release destroys the context and what was allocated in it,
         * so a use afterwards fails as it does on a real driver. */
        if (--emu.primary_refs[dev] == 0) emu_free_context_memory(dev);
    } else {
        r = CUDA_ERROR_INVALID_CONTEXT;
    }
    pthread_mutex_unlock(&emu.lock);
    return r;
}

CUresult emu_cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active) {
    EMU_ENTER(cuDevicePrimaryCtxGetState);
    CUresult r = check_device(dev);
    if (r) return r;
    if (!flags || !active) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&emu.lock);
    *flags = emu.primary_flags ? emu.primary_flags[dev] : 0;
    *active = emu.primary_refs[dev] > 0;
    pthread_mutex_unlock(&emu.lock);
    return CUDA_SUCCESS;
}

/* Scheduling flags are recorded and reported; the emulator's waits behave
 * the same in every mode. */
CUresult emu_cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags) {
    EMU_ENTER(cuDevicePrimaryCtxSetFlags);
    CUresult r = check_device(dev);
    if (r) return r;
    if (flags & ~0x1fu) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&emu.lock);
    emu.primary_flags[dev] = flags;
    pthread_mutex_unlock(&emu.lock);
    return CUDA_SUCCESS;
}

CUresult emu_cuCtxGetDevice(CUdevice *device) {
    EMU_ENTER(cuCtxGetDevice);
    pthread_mutex_lock(&emu.lock);
    CUresult r = emu_need_context();
    if (!r && !device) r = CUDA_ERROR_INVALID_VALUE;
    if (!r) *device = current->device;
    pthread_mutex_unlock(&emu.lock);
    return r;
}

CUresult emu_cuCtxSetCurrent(CUcontext ctx) {
    EMU_ENTER(cuCtxSetCurrent);
    if (need_init()) return CUDA_ERROR_NOT_INITIALIZED;
    if (ctx && (ctx < emu.contexts || ctx >= emu.contexts + emu.devices)) return CUDA_ERROR_INVALID_CONTEXT;
    current = ctx;
    return CUDA_SUCCESS;
}

CUresult emu_cuCtxGetCurrent(CUcontext *ctx) {
    EMU_ENTER(cuCtxGetCurrent);
    if (need_init()) return CUDA_ERROR_NOT_INITIALIZED;
    if (!ctx) return CUDA_ERROR_INVALID_VALUE;
    *ctx = current;
    return CUDA_SUCCESS;
}

static const char *result_name(CUresult error) {
    switch (error) {
#define EMU_NAME(name, value) \
    case name: return #name;
        PS_CUDA_RESULTS(EMU_NAME)
#undef EMU_NAME
    default: return NULL;
    }
}

CUresult emu_cuGetErrorName(CUresult error, const char **name) {
    EMU_ENTER(cuGetErrorName);
    if (!name) return CUDA_ERROR_INVALID_VALUE;
    *name = result_name(error);
    return *name ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult emu_cuGetErrorString(CUresult error, const char **text) {
    EMU_ENTER(cuGetErrorString);
    if (!text) return CUDA_ERROR_INVALID_VALUE;
    *text = result_name(error); /* the emulator names its errors; no prose */
    return *text ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
