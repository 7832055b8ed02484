/* SPDX-License-Identifier: MIT */
/* The slice of the CUDA driver ABI that pinstage and its emulated driver use.
 *
 * Declared here, not taken from cuda.h, so that neither the library nor the
 * emulator needs the CUDA toolkit to build. Where cuda.h is found at build
 * time, src/cuda_abi_check.c compares every constant and every entry-point
 * signature below with the toolkit's (PS_CUDA_ABI_CHECK mode).
 *
 * Entry points are resolved with cuGetProcAddress at the lowest driver
 * version that has the ABI declared here (the `_v2` variants with 64-bit
 * sizes), never through the unversioned legacy symbols. */
#ifndef PINSTAGE_CUDA_ABI_H
#define PINSTAGE_CUDA_ABI_H

#include <stddef.h>

/* Constants: name and value. One list serves the declarations and the check. */
#define PS_CUDA_RESULTS(X)                                                   \
    X(CUDA_SUCCESS, 0)                                                       \
    X(CUDA_ERROR_INVALID_VALUE, 1)                                           \
    X(CUDA_ERROR_OUT_OF_MEMORY, 2)                                           \
    X(CUDA_ERROR_NOT_INITIALIZED, 3)                                         \
    X(CUDA_ERROR_DEINITIALIZED, 4)                                           \
    X(CUDA_ERROR_STUB_LIBRARY, 34)                                           \
    X(CUDA_ERROR_NO_DEVICE, 100)                                             \
    X(CUDA_ERROR_INVALID_DEVICE, 101)                                        \
    X(CUDA_ERROR_INVALID_CONTEXT, 201)                                       \
    X(CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND, 302)                        \
    X(CUDA_ERROR_SHARED_OBJECT_INIT_FAILED, 303)                             \
    X(CUDA_ERROR_OPERATING_SYSTEM, 304)                                      \
    X(CUDA_ERROR_INVALID_HANDLE, 400)                                        \
    X(CUDA_ERROR_NOT_FOUND, 500)                                             \
    X(CUDA_ERROR_NOT_READY, 600)                                             \
    X(CUDA_ERROR_ILLEGAL_ADDRESS, 700)                                       \
    X(CUDA_ERROR_LAUNCH_FAILED, 719)                                         \
    X(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, 712)                        \
    X(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, 713)                            \
    X(CUDA_ERROR_NOT_PERMITTED, 800)                                         \
    X(CUDA_ERROR_NOT_SUPPORTED, 801)                                         \
    X(CUDA_ERROR_UNKNOWN, 999)

#define PS_CUDA_CONSTANTS(X)                                                 \
    X(CU_GET_PROC_ADDRESS_LEGACY_STREAM, 1)                                  \
    X(CU_GET_PROC_ADDRESS_SUCCESS, 0)                                        \
    X(CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND, 1)                               \
    X(CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT, 2)                         \
    X(CU_STREAM_DEFAULT, 0)                                                  \
    X(CU_STREAM_NON_BLOCKING, 1)                                             \
    X(CU_EVENT_DEFAULT, 0)                                                   \
    X(CU_EVENT_DISABLE_TIMING, 2)                                            \
    X(CU_CTX_SCHED_SPIN, 1)                                                  \
    X(CU_CTX_SCHED_YIELD, 2)                                                 \
    X(CU_CTX_SCHED_BLOCKING_SYNC, 4)                                         \
    X(CU_MEMHOSTALLOC_PORTABLE, 1)                                           \
    X(CU_MEMHOSTALLOC_DEVICEMAP, 2)                                          \
    X(CU_MEMHOSTALLOC_WRITECOMBINED, 4)                                      \
    X(CU_MEMHOSTREGISTER_PORTABLE, 1)                                        \
    X(CU_MEMHOSTREGISTER_DEVICEMAP, 2)                                       \
    X(CU_POINTER_ATTRIBUTE_MEMORY_TYPE, 2)                                   \
    X(CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, 9)                                \
    X(CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, 11)                             \
    X(CU_POINTER_ATTRIBUTE_RANGE_SIZE, 12)                                   \
    X(CU_MEMORYTYPE_HOST, 1)                                                 \
    X(CU_MEMORYTYPE_DEVICE, 2)                                               \
    X(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 16)                          \
    X(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, 33)                                    \
    X(CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, 34)                                 \
    X(CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT, 40)                            \
    X(CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, 50)                                 \
    X(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 75)                      \
    X(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 76)                      \
    X(CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, 134)

/* The entry points the library itself calls: base name (as cuGetProcAddress
 * takes it), the driver version that introduced the ABI declared, and the
 * parameter list. */
#define PS_DRIVER_ENTRY_POINTS(X)                                                        \
    X(cuInit, 2000, (unsigned int flags))                                                \
    X(cuDriverGetVersion, 2020, (int *version))                                          \
    X(cuDeviceGetCount, 2000, (int *count))                                              \
    X(cuDeviceGet, 2000, (CUdevice * device, int ordinal))                               \
    X(cuDeviceGetName, 2000, (char *name, int len, CUdevice dev))                        \
    X(cuDeviceGetAttribute, 2000, (int *value, CUdevice_attribute attrib, CUdevice dev)) \
    X(cuDeviceGetPCIBusId, 4010, (char *bus_id, int len, CUdevice dev))                  \
    X(cuDevicePrimaryCtxRetain, 7000, (CUcontext * ctx, CUdevice dev))                   \
    X(cuDevicePrimaryCtxRelease, 11000, (CUdevice dev))                                  \
    X(cuDevicePrimaryCtxGetState, 7000, (CUdevice dev, unsigned int *flags, int *active))  \
    X(cuCtxSetCurrent, 4000, (CUcontext ctx))                                            \
    X(cuCtxGetCurrent, 4000, (CUcontext * ctx))                                          \
    X(cuMemAlloc, 3020, (CUdeviceptr * dptr, size_t bytes))                              \
    X(cuMemFree, 3020, (CUdeviceptr dptr))                                               \
    X(cuMemAllocHost, 3020, (void **pp, size_t bytes))                                   \
    X(cuMemFreeHost, 2000, (void *p))                                                    \
    X(cuMemcpyHtoD, 3020, (CUdeviceptr dst, const void *src, size_t bytes))              \
    X(cuMemcpyDtoH, 3020, (void *dst, CUdeviceptr src, size_t bytes))                    \
    X(cuMemcpyHtoDAsync, 3020,                                                           \
      (CUdeviceptr dst, const void *src, size_t bytes, CUstream stream))                 \
    X(cuMemcpyDtoHAsync, 3020, (void *dst, CUdeviceptr src, size_t bytes, CUstream stream)) \
    X(cuStreamCreate, 2000, (CUstream * stream, unsigned int flags))                     \
    X(cuStreamDestroy, 4000, (CUstream stream))                                          \
    X(cuStreamSynchronize, 2000, (CUstream stream))                                      \
    X(cuStreamQuery, 2000, (CUstream stream))                                            \
    X(cuEventCreate, 2000, (CUevent * event, unsigned int flags))                         \
    X(cuEventRecord, 2000, (CUevent event, CUstream stream))                              \
    X(cuEventQuery, 2000, (CUevent event))                                                \
    X(cuEventDestroy, 4000, (CUevent event))                                              \
    X(cuCtxGetDevice, 2000, (CUdevice * device))                                          \
    X(cuStreamWaitEvent, 3020, (CUstream stream, CUevent event, unsigned int flags))      \
    X(cuPointerGetAttributes, 7000,                                                       \
      (unsigned int count, CUpointer_attribute *attributes, void **data, CUdeviceptr ptr)) \
    X(cuMemHostRegister, 6050, (void *p, size_t bytes, unsigned int flags))               \
    X(cuMemHostUnregister, 4000, (void *p))

/* Entry points the emulated driver provides beyond the library's own, for
 * tests, the benchmark and examples (reached through pinstage_driver_get_proc). */
#define PS_EXTRA_ENTRY_POINTS(X)                                                          \
    X(cuCtxSynchronize, 2000, (void))                                                     \
    X(cuMemHostAlloc, 2020, (void **pp, size_t bytes, unsigned int flags))                \
    X(cuMemcpyDtoD, 3020, (CUdeviceptr dst, CUdeviceptr src, size_t bytes))               \
    X(cuMemcpyDtoDAsync, 3020, (CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream)) \
    X(cuMemsetD8, 3020, (CUdeviceptr dst, unsigned char value, size_t count))             \
    X(cuMemsetD8Async, 3020, (CUdeviceptr dst, unsigned char value, size_t count, CUstream stream)) \
    X(cuEventSynchronize, 2000, (CUevent event))                                          \
    X(cuLaunchHostFunc, 10000, (CUstream stream, CUhostFn fn, void *user_data))           \
    X(cuPointerGetAttribute, 4000, (void *data, CUpointer_attribute attribute, CUdeviceptr ptr)) \
    X(cuGetErrorName, 6000, (CUresult error, const char **name))                          \
    X(cuGetErrorString, 6000, (CUresult error, const char **text))                        \
    X(cuDevicePrimaryCtxSetFlags, 11000, (CUdevice dev, unsigned int flags))

/* The default streams, by their documented handle values, spelled token for
 * token as cuda.h spells them: where both are seen (cuda_abi_check.c), a
 * different definition is a macro-redefinition error. */
#define CU_STREAM_LEGACY ((CUstream)0x1)
#define CU_STREAM_PER_THREAD ((CUstream)0x2)

#ifndef PS_CUDA_ABI_CHECK
/* The driver's own types, spelled as cuda.h spells them so that code reads
 * like driver code; identical typedefs in pinstage.h are allowed by C11. */
#define PS_ENUMERATOR(name, value) name = value,
typedef enum cudaError_enum { PS_CUDA_RESULTS(PS_ENUMERATOR) } CUresult;
enum { PS_CUDA_CONSTANTS(PS_ENUMERATOR) };
#undef PS_ENUMERATOR

typedef int CUdevice;
typedef int CUdevice_attribute;
typedef int CUpointer_attribute;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long cuuint64_t;
typedef int CUdriverProcAddressQueryResult;
typedef void (*CUhostFn)(void *user_data);

/* cuGetProcAddress (CUDA 12+, exported as cuGetProcAddress_v2) and its
 * 11.3-era form without the status argument (exported as cuGetProcAddress). */
typedef CUresult (*ps_get_proc_address_v2_fn)(const char *symbol, void **pfn, int cuda_version,
                                               cuuint64_t flags,
                                               CUdriverProcAddressQueryResult *status);
typedef CUresult (*ps_get_proc_address_v1_fn)(const char *symbol, void **pfn, int cuda_version,
                                               cuuint64_t flags);
#endif /* PS_CUDA_ABI_CHECK */

#endif /* PINSTAGE_CUDA_ABI_H */
