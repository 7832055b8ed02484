/* SPDX-License-Identifier: MIT */
#include <time.h>

#include "pinned.h"
#include "status.h"

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

size_t ps_pinned_round(size_t bytes) {
    const size_t g = PINSTAGE_CAPACITY_GRANULARITY;
    if (bytes > SIZE_MAX - (g - 1)) return 0;
    return (bytes + g - 1) / g * g;
}

pinstage_status ps_pinned_grow(ps_pinned *pinned, const ps_driver *driver, size_t capacity,
                               uint64_t *elapsed_ns, const char *caller) {
    uint64_t start = now_ns();
    void *fresh = NULL;
    CUresult r = driver->cuMemAllocHost(&fresh, capacity);
    if (r == CUDA_ERROR_OUT_OF_MEMORY && pinned->ptr) {
        /* Holding both may be what exhausts the pinnable memory. */
        driver->cuMemFreeHost(pinned->ptr);
        pinned->ptr = NULL;
        pinned->capacity = 0;
        r = driver->cuMemAllocHost(&fresh, capacity);
    }
    if (r != CUDA_SUCCESS) {
        *elapsed_ns += now_ns() - start;
        return ps_fail_driver((pinstage_status)r, caller, "cuMemAllocHost_v2");
    }
    if (pinned->ptr) driver->cuMemFreeHost(pinned->ptr);
    pinned->ptr = fresh;
    pinned->capacity = capacity;
    *elapsed_ns += now_ns() - start;
    return PINSTAGE_SUCCESS;
}

void ps_pinned_release(ps_pinned *pinned, const ps_driver *driver, uint64_t *elapsed_ns) {
    if (!pinned->ptr) return;
    uint64_t start = now_ns();
    /* A failure here (a context already torn down) leaves nothing to retry. */
    driver->cuMemFreeHost(pinned->ptr);
    *elapsed_ns += now_ns() - start;
    pinned->ptr = NULL;
    pinned->capacity = 0;
}
