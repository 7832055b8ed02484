/* SPDX-License-Identifier: MIT */
/* Binding buffers and rings to a device: its context around their calls,
 * its NUMA node for their pinned memory and copy threads, its profile. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "device.h"
#include "numa.h"
#include "policy.h"
#include "status.h"

pinstage_status ps_device_get(const char *caller, int ordinal, const ps_driver **d, CUdevice *dev) {
    if (ordinal < 0)
        return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: device=%d is negative", caller, ordinal);
    pinstage_status s = ps_driver_get(d);
    if (s) return s;
    CUresult r = (*d)->cuDeviceGet(dev, ordinal);
    if (r) {
        int count = 0;
        /* Only a device the driver does not see "does not exist"; any other
         * failure is the driver's, named as such. */
        if ((*d)->cuDeviceGetCount(&count) == CUDA_SUCCESS && ordinal >= count)
            return ps_fail((pinstage_status)r, "%s: device %d does not exist (the driver sees %d): %s",
                           caller, ordinal, count, pinstage_status_name((pinstage_status)r));
        return ps_fail_driver((pinstage_status)r, caller, "cuDeviceGet");
    }
    return PINSTAGE_SUCCESS;
}

pinstage_status pinstage_device_numa_node(int device, int *node) {
    static const char caller[] = "pinstage_device_numa_node";
    const ps_driver *d;
    CUdevice dev;
    if (!node) return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: node is NULL", caller);
    *node = -1;
    pinstage_status s = ps_device_get(caller, device, &d, &dev);
    if (s) return s;
    *node = ps_numa_device_node(d, dev);
    return PINSTAGE_SUCCESS;
}

int pinstage_numa_node_count(void) { return ps_numa_node_count(); }

/* The context of `ctx`'s device, asked with ctx current for a moment. */
static pinstage_status context_device(const ps_driver *d, CUcontext ctx, CUdevice *dev, const char *caller) {
    CUcontext saved = NULL;
    CUresult r = d->cuCtxGetCurrent(&saved);
    if (r) return ps_fail_driver((pinstage_status)r, caller, "cuCtxGetCurrent");
    if ((r = d->cuCtxSetCurrent(ctx))) return ps_fail_driver((pinstage_status)r, caller, "cuCtxSetCurrent");
    r = d->cuCtxGetDevice(dev);
    CUresult back = d->cuCtxSetCurrent(saved);
    if (r) return ps_fail_driver((pinstage_status)r, caller, "cuCtxGetDevice");
    if (back) return ps_fail_driver((pinstage_status)back, caller, "cuCtxSetCurrent");
    return PINSTAGE_SUCCESS;
}

pinstage_status ps_bind(ps_binding *b, const pinstage_binding *want, const char *caller) {
    if (!want) {
        const ps_driver *d = NULL;
        pinstage_status s = b->retained ? ps_driver_get(&d) : PINSTAGE_SUCCESS;
        return s ? s : ps_unbind(b, d, caller);
    }
    /* Everything that needs no driver first: bad input makes no driver call. */
    if (want->device < 0) return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: device=%d is negative", caller, want->device);
    int node = want->numa_node;
    if (node < PINSTAGE_NUMA_DEVICE || node >= PS_NUMA_MAX_NODES)
        return ps_fail(PINSTAGE_ERROR_INVALID_VALUE,
                       "%s: numa_node=%d; expected PINSTAGE_NUMA_DEVICE (-2), PINSTAGE_NUMA_NONE (-1) or a node "
                       "below %d", caller, node, PS_NUMA_MAX_NODES);
    if (node >= 0 && !ps_numa_node_online(node))
        return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: numa_node=%d is not an online node of this host (%d)",
                       caller, node, ps_numa_node_count());
    ps_binding made;
    memset(&made, 0, sizeof made);
    const ps_driver *d;
    pinstage_status s = ps_device_get(caller, want->device, &d, &made.dev);
    if (s) return s;
    CUresult r = d->cuDeviceGetName(made.model, (int)sizeof made.model, made.dev);
    if (r) return ps_fail_driver((pinstage_status)r, caller, "cuDeviceGetName");
    if (want->context) {
        CUdevice of;
        if ((s = context_device(d, want->context, &of, caller))) return s;
        if (of != made.dev)
            return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "%s: the context given is device %d's, not device %d's",
                           caller, (int)of, want->device);
        made.context = want->context;
    } else {
        if ((r = d->cuDevicePrimaryCtxRetain(&made.context, made.dev)))
            return ps_fail_driver((pinstage_status)r, caller, "cuDevicePrimaryCtxRetain");
        made.retained = 1;
    }
    made.bound = 1;
    made.device = want->device;
    made.device_node = ps_numa_device_node(d, made.dev);
    /* One node: nothing to place, and the process-wide pool is the node's. */
    int nodes = ps_numa_node_count();
    if (node == PINSTAGE_NUMA_DEVICE)
        node = nodes > 1 && made.device_node >= 0 && ps_numa_node_online(made.device_node) ? made.device_node : -1;
    made.memory_node = node;
    made.pool = node >= 0 && nodes > 1 ? ps_pool_for_node(node) : ps_pool_default();
    /* The old binding goes once the new one stands; its release failing
     * leaves one retain behind, which is reported. */
    s = b->retained ? ps_unbind(b, d, caller) : PINSTAGE_SUCCESS;
    *b = made;
    return s;
}

pinstage_status ps_unbind(ps_binding *b, const ps_driver *d, const char *caller) {
    int retained = b->retained;
    CUdevice dev = b->dev;
    memset(b, 0, sizeof *b);
    if (!retained) return PINSTAGE_SUCCESS;
    CUresult r = d->cuDevicePrimaryCtxRelease(dev);
    return r ? ps_fail_driver((pinstage_status)r, caller, "cuDevicePrimaryCtxRelease_v2") : PINSTAGE_SUCCESS;
}

pinstage_status ps_bind_enter(ps_binding *b, const ps_driver *d, const char *caller) {
    b->switched = 0;
    if (!b->bound) return PINSTAGE_SUCCESS;
    b->driver = d;
    b->caller = caller;
    CUresult r = d->cuCtxGetCurrent(&b->saved);
    if (r) return ps_fail_driver((pinstage_status)r, caller, "cuCtxGetCurrent");
    if (b->saved == b->context) return PINSTAGE_SUCCESS;
    if ((r = d->cuCtxSetCurrent(b->context))) return ps_fail_driver((pinstage_status)r, caller, "cuCtxSetCurrent");
    b->switched = 1;
    return PINSTAGE_SUCCESS;
}

pinstage_status ps_bind_leave(ps_binding *b, pinstage_status s) {
    if (!b->switched) return s;
    b->switched = 0;
    CUresult r = b->driver->cuCtxSetCurrent(b->saved);
    if (r && !s)
        return ps_fail((pinstage_status)r,
                       "%s: the call was done, but the calling thread's context could not be made current again: "
                       "cuCtxSetCurrent failed: %s (%s)", b->caller, pinstage_status_name((pinstage_status)r),
                       pinstage_status_string((pinstage_status)r));
    return s;
}

static pinstage_profile builtin;
static pthread_once_t builtin_once = PTHREAD_ONCE_INIT;
static void make_builtin(void) { ps_profile_builtin(&builtin); }

const pinstage_profile *ps_binding_profile(const ps_binding *b) {
    const pinstage_profile *p = ps_profile_default();
    if (!b->bound || p->origin != PINSTAGE_PROFILE_MEASURED || !strcmp(p->device_name, b->model)) return p;
    pthread_once(&builtin_once, make_builtin);
    return &builtin;
}

void ps_binding_placement(const ps_binding *b, pinstage_placement *out) {
    memset(out, 0, sizeof *out);
    out->device = b->bound ? b->device : -1;
    out->device_node = b->bound ? b->device_node : -1;
    out->memory_node = ps_binding_node(b);
    out->memory_found = -1;
    out->worker_node = ps_pool_node(ps_binding_pool(b));
}
