/* SPDX-License-Identifier: MIT */
/* Names and descriptions of every CUresult, known without the driver (which
 * may be absent, or a stub that cannot name its own errors), and the
 * per-thread message of the last failure. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "status.h"

typedef struct {
    int code;
    const char *name;
    const char *text;
} status_entry;

static const status_entry status_table[] = {
    {0, "CUDA_SUCCESS", "no error"},
    {1, "CUDA_ERROR_INVALID_VALUE", "an argument is out of range or inconsistent with the others"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "host or device memory could not be allocated"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "the CUDA driver has not been initialized with cuInit"},
    {4, "CUDA_ERROR_DEINITIALIZED", "the CUDA driver is shutting down"},
    {5, "CUDA_ERROR_PROFILER_DISABLED", "the profiler is disabled for this run"},
    {6, "CUDA_ERROR_PROFILER_NOT_INITIALIZED", "the profiler is not initialized"},
    {7, "CUDA_ERROR_PROFILER_ALREADY_STARTED", "the profiler is already started"},
    {8, "CUDA_ERROR_PROFILER_ALREADY_STOPPED", "the profiler is already stopped"},
    {34, "CUDA_ERROR_STUB_LIBRARY", "the driver library loaded is a stub, not a real driver"},
    {36, "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER", "the call needs a newer driver"},
    {46, "CUDA_ERROR_DEVICE_UNAVAILABLE", "the device is busy or unavailable"},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device was found"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "the device ordinal does not name a CUDA device"},
    {102, "CUDA_ERROR_DEVICE_NOT_LICENSED", "the device lacks a license for this feature"},
    {200, "CUDA_ERROR_INVALID_IMAGE", "the kernel image is invalid"},
    {201, "CUDA_ERROR_INVALID_CONTEXT", "no CUDA context is current, or it is invalid"},
    {202, "CUDA_ERROR_CONTEXT_ALREADY_CURRENT", "the context is already current"},
    {205, "CUDA_ERROR_MAP_FAILED", "a map or register operation failed"},
    {206, "CUDA_ERROR_UNMAP_FAILED", "an unmap or unregister operation failed"},
    {207, "CUDA_ERROR_ARRAY_IS_MAPPED", "the array is mapped and cannot be destroyed"},
    {208, "CUDA_ERROR_ALREADY_MAPPED", "the resource is already mapped"},
    {209, "CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for this device"},
    {210, "CUDA_ERROR_ALREADY_ACQUIRED", "the resource has already been acquired"},
    {211, "CUDA_ERROR_NOT_MAPPED", "the resource is not mapped"},
    {212, "CUDA_ERROR_NOT_MAPPED_AS_ARRAY", "the resource is not mapped as an array"},
    {213, "CUDA_ERROR_NOT_MAPPED_AS_POINTER", "the resource is not mapped as a pointer"},
    {214, "CUDA_ERROR_ECC_UNCORRECTABLE", "an uncorrectable ECC error was detected"},
    {215, "CUDA_ERROR_UNSUPPORTED_LIMIT", "the resource limit is not supported by the device"},
    {216, "CUDA_ERROR_CONTEXT_ALREADY_IN_USE", "the context is already in use by another thread"},
    {217, "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED", "peer access is not supported between these devices"},
    {218, "CUDA_ERROR_INVALID_PTX", "PTX compilation failed"},
    {219, "CUDA_ERROR_INVALID_GRAPHICS_CONTEXT", "the graphics context is invalid"},
    {220, "CUDA_ERROR_NVLINK_UNCORRECTABLE", "an uncorrectable NVLink error was detected"},
    {221, "CUDA_ERROR_JIT_COMPILER_NOT_FOUND", "the PTX JIT compiler library was not found"},
    {222, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "the PTX was compiled for an unsupported toolchain"},
    {223, "CUDA_ERROR_JIT_COMPILATION_DISABLED", "PTX JIT compilation is disabled"},
    {224, "CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY", "the execution affinity type is not supported"},
    {225, "CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC", "device-side synchronization is not supported"},
    {226, "CUDA_ERROR_CONTAINED", "an error was contained to this context"},
    {300, "CUDA_ERROR_INVALID_SOURCE", "the device kernel source is invalid"},
    {301, "CUDA_ERROR_FILE_NOT_FOUND", "a file was not found"},
    {302, "CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND",
     "the driver library lacks an entry point that is needed"},
    {303, "CUDA_ERROR_SHARED_OBJECT_INIT_FAILED", "the driver library could not be loaded or initialized"},
    {304, "CUDA_ERROR_OPERATING_SYSTEM", "an operating system call failed"},
    {400, "CUDA_ERROR_INVALID_HANDLE", "a handle (stream, event, context) is invalid or destroyed"},
    {401, "CUDA_ERROR_ILLEGAL_STATE", "the resource is in a state that does not allow the call"},
    {402, "CUDA_ERROR_LOSSY_QUERY", "the query would lose information"},
    {500, "CUDA_ERROR_NOT_FOUND", "a named symbol was not found"},
    {600, "CUDA_ERROR_NOT_READY", "the queued work has not completed yet"},
    {700, "CUDA_ERROR_ILLEGAL_ADDRESS", "the device accessed an invalid address; the context is unusable"},
    {701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "a launch needed more resources than available"},
    {702, "CUDA_ERROR_LAUNCH_TIMEOUT", "a kernel ran past the time limit"},
    {703, "CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING", "a launch used an incompatible texturing mode"},
    {704, "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED", "peer access is already enabled"},
    {705, "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED", "peer access has not been enabled"},
    {708, "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE", "the primary context is already active"},
    {709, "CUDA_ERROR_CONTEXT_IS_DESTROYED", "the context has been destroyed"},
    {710, "CUDA_ERROR_ASSERT", "a device-side assertion failed"},
    {711, "CUDA_ERROR_TOO_MANY_PEERS", "too many peer mappings"},
    {712, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED", "the host memory is already registered"},
    {713, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED", "the host memory is not registered"},
    {714, "CUDA_ERROR_HARDWARE_STACK_ERROR", "a device stack error occurred"},
    {715, "CUDA_ERROR_ILLEGAL_INSTRUCTION", "the device executed an illegal instruction"},
    {716, "CUDA_ERROR_MISALIGNED_ADDRESS", "the device accessed a misaligned address"},
    {717, "CUDA_ERROR_INVALID_ADDRESS_SPACE", "the device used an invalid address space"},
    {718, "CUDA_ERROR_INVALID_PC", "the device program counter is invalid"},
    {719, "CUDA_ERROR_LAUNCH_FAILED", "a device operation failed; the context is unusable"},
    {720, "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE", "the cooperative launch is too large"},
    {721, "CUDA_ERROR_TENSOR_MEMORY_LEAK", "tensor memory was not freed before a kernel exited"},
    {800, "CUDA_ERROR_NOT_PERMITTED", "the operation is not permitted"},
    {801, "CUDA_ERROR_NOT_SUPPORTED", "the operation is not supported on this system or device"},
    {802, "CUDA_ERROR_SYSTEM_NOT_READY", "the system is not ready for CUDA"},
    {803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", "the driver and kernel module versions differ"},
    {804, "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE", "forward compatibility is not supported on this device"},
    {805, "CUDA_ERROR_MPS_CONNECTION_FAILED", "the MPS server could not be reached"},
    {806, "CUDA_ERROR_MPS_RPC_FAILURE", "an MPS remote call failed"},
    {807, "CUDA_ERROR_MPS_SERVER_NOT_READY", "the MPS server is not ready"},
    {808, "CUDA_ERROR_MPS_MAX_CLIENTS_REACHED", "the MPS server has reached its client limit"},
    {809, "CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED", "the MPS server has reached its connection limit"},
    {810, "CUDA_ERROR_MPS_CLIENT_TERMINATED", "the MPS client was terminated by the server"},
    {811, "CUDA_ERROR_CDP_NOT_SUPPORTED", "CUDA dynamic parallelism is not supported"},
    {812, "CUDA_ERROR_CDP_VERSION_MISMATCH", "CUDA dynamic parallelism versions differ"},
    {900, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", "the operation is not allowed while capturing"},
    {901, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED", "the stream capture was invalidated"},
    {902, "CUDA_ERROR_STREAM_CAPTURE_MERGE", "two independent captures would merge"},
    {903, "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED", "the capture was not started in this stream"},
    {904, "CUDA_ERROR_STREAM_CAPTURE_UNJOINED", "a forked capture was not joined"},
    {905, "CUDA_ERROR_STREAM_CAPTURE_ISOLATION", "a dependency would cross the capture boundary"},
    {906, "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT", "an implicit dependency on the legacy stream during capture"},
    {907, "CUDA_ERROR_CAPTURED_EVENT", "the event was recorded in a capture"},
    {908, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD", "the capture was ended from another thread"},
    {909, "CUDA_ERROR_TIMEOUT", "the wait timed out"},
    {910, "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE", "the graph update was not performed"},
    {911, "CUDA_ERROR_EXTERNAL_DEVICE", "an external device reported an error"},
    {912, "CUDA_ERROR_INVALID_CLUSTER_SIZE", "the cluster size is invalid"},
    {913, "CUDA_ERROR_FUNCTION_NOT_LOADED", "the function is not loaded"},
    {914, "CUDA_ERROR_INVALID_RESOURCE_TYPE", "the resource type is invalid"},
    {915, "CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION", "the resource configuration is invalid"},
    {916, "CUDA_ERROR_KEY_ROTATION", "an error occurred during key rotation"},
    {999, "CUDA_ERROR_UNKNOWN", "an unknown driver error"},
};

static const status_entry *find_status(pinstage_status status) {
    for (size_t i = 0; i < sizeof status_table / sizeof status_table[0]; i++)
        if (status_table[i].code == status) return &status_table[i];
    return NULL;
}

const char *pinstage_status_name(pinstage_status status) {
    /* Per thread: the name of an unknown code must not change under a
     * caller that is still printing it. */
    static _Thread_local char unknown[32];
    const status_entry *e = find_status(status);
    if (e) return e->name;
    snprintf(unknown, sizeof unknown, "CUDA_ERROR_%d", status);
    return unknown;
}

const char *pinstage_status_string(pinstage_status status) {
    const status_entry *e = find_status(status);
    return e ? e->text : "a status code this version of pinstage does not know";
}

static _Thread_local char last_message[PS_MESSAGE_MAX];

const char *pinstage_last_error_message(void) { return last_message; }

pinstage_status ps_fail(pinstage_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_message, sizeof last_message, fmt, ap);
    va_end(ap);
    return status;
}

void ps_message_save(ps_message *m) { memcpy(m->text, last_message, sizeof m->text); }

pinstage_status ps_message_restore(const ps_message *m, pinstage_status status) {
    memcpy(last_message, m->text, sizeof last_message);
    return status;
}

pinstage_status ps_fail_driver(pinstage_status status, const char *caller, const char *entry) {
    return ps_fail(status, "%s: %s failed: %s (%s)", caller, entry, pinstage_status_name(status),
                   pinstage_status_string(status));
}
