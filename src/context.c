/* SPDX-License-Identifier: MIT */
/* Helpers for programs that have no CUDA context or stream of their own
 * (the CLI, the examples, tests): primary contexts, device facts, streams. */
#include <stdio.h>
#include <string.h>

#include "device.h"
#include "driver.h"
#include "numa.h"
#include "status.h"

pinstage_status pinstage_context_init(int device) {
    static const char caller[] = "pinstage_context_init";
    const ps_driver *d;
    CUdevice dev;
    CUcontext ctx;
    pinstage_status s = ps_device_get(caller, device, &d, &dev);
    if (s) return s;
    CUresult r = d->cuDevicePrimaryCtxRetain(&ctx, dev);
    if (r) return ps_fail_driver((pinstage_status)r, caller, "cuDevicePrimaryCtxRetain");
    r = d->cuCtxSetCurrent(ctx);
    if (r) {
        d->cuDevicePrimaryCtxRelease(dev);
        return ps_fail_driver((pinstage_status)r, caller, "cuCtxSetCurrent");
    }
    return PINSTAGE_SUCCESS;
}

pinstage_status pinstage_context_release(int device) {
    static const char caller[] = "pinstage_context_release";
    const ps_driver *d;
    CUdevice dev;
    CUcontext primary, current = NULL;
    unsigned flags;
    int active = 1;
    pinstage_status s = ps_device_get(caller, device, &d, &dev);
    if (s) return s;
    /* Retaining is the only way to learn the primary context's handle. */
    CUresult r = d->cuDevicePrimaryCtxRetain(&primary, dev);
    if (r) return ps_fail_driver((pinstage_status)r, caller, "cuDevicePrimaryCtxRetain");
    /* That retain is balanced first: if it cannot be, the caller's own
     * reference is left alone and the count is where the call found it. */
    if ((r = d->cuDevicePrimaryCtxRelease(dev)))
        return ps_fail_driver((pinstage_status)r, caller, "cuDevicePrimaryCtxRelease_v2");
    if ((r = d->cuDevicePrimaryCtxRelease(dev)))
        return ps_fail_driver((pinstage_status)r, caller, "cuDevicePrimaryCtxRelease_v2");
    /* The last release destroys the context: leave no dangling current one. */
    if ((r = d->cuDevicePrimaryCtxGetState(dev, &flags, &active)))
        return ps_fail_driver((pinstage_status)r, caller, "cuDevicePrimaryCtxGetState");
    if (active) return PINSTAGE_SUCCESS;
    if ((r = d->cuCtxGetCurrent(&current))) return ps_fail_driver((pinstage_status)r, caller, "cuCtxGetCurrent");
    if (current == primary && (r = d->cuCtxSetCurrent(NULL)))
        return ps_fail_driver((pinstage_status)r, caller, "cuCtxSetCurrent");
    return PINSTAGE_SUCCESS;
}

pinstage_status pinstage_device_count(int *count) {
    const ps_driver *d;
    if (!count) return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "pinstage_device_count: count is NULL");
    *count = 0;
    pinstage_status s = ps_driver_get(&d);
    if (s) return s;
    CUresult r = d->cuDeviceGetCount(count);
    return r ? ps_fail_driver((pinstage_status)r, "pinstage_device_count", "cuDeviceGetCount")
             : PINSTAGE_SUCCESS;
}

pinstage_status pinstage_device_get_info(int device, pinstage_device_info *info) {
    static const char caller[] = "pinstage_device_get_info";
    const ps_driver *d;
    CUdevice dev;
    if (!info) return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: info is NULL", caller);
    pinstage_status s = ps_device_get(caller, device, &d, &dev);
    if (s) return s;
    memset(info, 0, sizeof *info);
    CUresult r = d->cuDeviceGetName(info->name, (int)sizeof info->name, dev);
    if (r) return ps_fail_driver((pinstage_status)r, caller, "cuDeviceGetName");
    r = d->cuDeviceGetPCIBusId(info->pci_bus_id, (int)sizeof info->pci_bus_id, dev);
    if (r) return ps_fail_driver((pinstage_status)r, caller, "cuDeviceGetPCIBusId");
    struct {
        int *value;
        CUdevice_attribute attribute;
    } attrs[] = {
        {&info->compute_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR},
        {&info->compute_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR},
        {&info->multiprocessors, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT},
        {&info->copy_engines, CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT},
    };
    for (size_t i = 0; i < sizeof attrs / sizeof attrs[0]; i++) {
        r = d->cuDeviceGetAttribute(attrs[i].value, attrs[i].attribute, dev);
        if (r) return ps_fail_driver((pinstage_status)r, caller, "cuDeviceGetAttribute");
    }
    info->numa_node = ps_numa_device_node(d, dev);
    return PINSTAGE_SUCCESS;
}

pinstage_status pinstage_stream_create(CUstream *stream, unsigned flags) {
    static const char caller[] = "pinstage_stream_create";
    const ps_driver *d;
    if (!stream) return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: stream is NULL", caller);
    *stream = NULL;
    if (flags & ~(unsigned)PINSTAGE_STREAM_NON_BLOCKING)
        return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: unknown flags 0x%x", caller, flags);
    pinstage_status s = ps_driver_get(&d);
    if (s) return s;
    CUresult r = d->cuStreamCreate(stream, flags);
    return r ? ps_fail_driver((pinstage_status)r, caller, "cuStreamCreate") : PINSTAGE_SUCCESS;
}

pinstage_status pinstage_stream_destroy(CUstream stream) {
    const ps_driver *d;
    if (!stream) return PINSTAGE_SUCCESS;
    pinstage_status s = ps_driver_get(&d);
    if (s) return s;
    CUresult r = d->cuStreamDestroy(stream);
    return r ? ps_fail_driver((pinstage_status)r, "pinstage_stream_destroy", "cuStreamDestroy_v2")
             : PINSTAGE_SUCCESS;
}

pinstage_status pinstage_stream_synchronize(CUstream stream) {
    const ps_driver *d;
    pinstage_status s = ps_driver_get(&d);
    if (s) return s;
    CUresult r = d->cuStreamSynchronize(stream);
    return r ? ps_fail_driver((pinstage_status)r, "pinstage_stream_synchronize", "cuStreamSynchronize")
             : PINSTAGE_SUCCESS;
}
