/* SPDX-License-Identifier: MIT */
/* The device buffer's layout, shared with the staging code. */
#ifndef PINSTAGE_DEVBUF_H
#define PINSTAGE_DEVBUF_H

#include "pinstage.h"

struct pinstage_devbuf {
    CUdeviceptr ptr;
    size_t len;        /* elements */
    size_t elem_size;  /* bytes */
    size_t elem_align; /* power of two, at most 256 */
    int owned;         /* 1: allocated here, freed by pinstage_devbuf_free */
};

/* Device allocations are at least 256-byte aligned; an element may not ask
 * for more than the driver guarantees. */
#define PS_MAX_ELEM_ALIGN 256

#endif
