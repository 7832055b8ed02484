/* SPDX-License-Identifier: MIT */
/* Compiled only where cuda.h is found at build time: proves that every
 * constant and entry-point signature in cuda_abi.h matches the toolkit's.
 * It produces no code; a mismatch is a compile error. */
#include <cuda.h>

#define PS_CUDA_ABI_CHECK
#include "cuda_abi.h"

#define PS_CHECK_CONSTANT(name, value) _Static_assert((name) == (value), #name " differs from cuda.h");
PS_CUDA_RESULTS(PS_CHECK_CONSTANT)
PS_CUDA_CONSTANTS(PS_CHECK_CONSTANT)

#define PS_CHECK_SIGNATURE(name, version, params)                                    \
    _Static_assert(__builtin_types_compatible_p(__typeof__(name), CUresult params), \
                   #name " signature differs from cuda.h");
PS_DRIVER_ENTRY_POINTS(PS_CHECK_SIGNATURE)
PS_EXTRA_ENTRY_POINTS(PS_CHECK_SIGNATURE)

_Static_assert(sizeof(CUdeviceptr) == sizeof(unsigned long long), "CUdeviceptr width");
/* CU_STREAM_LEGACY and CU_STREAM_PER_THREAD are checked by their
 * redefinition in cuda_abi.h: a pointer cast is no integer constant
 * expression for clang. */

/* ISO C forbids an empty translation unit. */
typedef int ps_cuda_abi_check_done;
