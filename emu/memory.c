/* SPDX-License-Identifier: MIT */
/* Device memory, pinned memory and registered ranges.
 *
 * Device memory lives in host memory, but its addresses are non-canonical
 * x86-64 addresses (from 0xd000000000000000): code that dereferences a device
 * pointer faults instead of passing. Addresses are never reused, so a freed
 * pointer stays invalid. New device memory is filled with 0xa5, never zeroes,
 * so a test cannot pass by reading memory nothing wrote. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "emu.h"

#define DEVICE_BASE 0xd000000000000000ull
#define DEVICE_GAP (64u * 1024)

static size_t page_size(void) {
    long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? (size_t)p : 4096;
}

static int regions_add(emu_regions *r, emu_region item) {
    if (r->count == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 16;
        emu_region *items = realloc(r->items, cap * sizeof *items);
        if (!items) return -1;
        r->items = items;
        r->cap = cap;
    }
    r->items[r->count++] = item;
    return 0;
}

/* The region containing [p, p + bytes), or -1. */
static long regions_find(const emu_regions *r, uintptr_t p, size_t bytes) {
    for (size_t i = 0; i < r->count; i++) {
        const emu_region *g = &r->items[i];
        /* Strictly inside: a pointer just past one region may start the next. */
        if (p >= g->start && p - g->start < g->bytes && bytes <= g->bytes - (p - g->start))
            return (long)i;
    }
    return -1;
}

static long regions_overlap(const emu_regions *r, uintptr_t p, size_t bytes) {
    for (size_t i = 0; i < r->count; i++) {
        const emu_region *g = &r->items[i];
        if (p < g->start + g->bytes && g->start < p + bytes) return (long)i;
    }
    return -1;
}

static void regions_remove(emu_regions *r, long i) { r->items[i] = r->items[--r->count]; }

void emu_regions_free(emu_regions *r) {
    for (size_t i = 0; i < r->count; i++)
        if (!r->items[i].registered) free(r->items[i].backing);
    free(r->items);
    memset(r, 0, sizeof *r);
}

CUresult emu_device_range(CUdeviceptr ptr, size_t bytes, void **host) {
    long i = regions_find(&emu.device, (uintptr_t)ptr, bytes);
    if (i < 0) return CUDA_ERROR_INVALID_VALUE;
    const emu_region *g = &emu.device.items[i];
    *host = (char *)g->backing + ((uintptr_t)ptr - g->start);
    return CUDA_SUCCESS;
}

int emu_is_pinned(const void *p, size_t bytes) {
    return regions_find(&emu.pinned, (uintptr_t)p, bytes) >= 0;
}

int emu_is_partly_pinned(const void *p, size_t bytes) {
    return !emu_is_pinned(p, bytes) && regions_overlap(&emu.pinned, (uintptr_t)p, bytes) >= 0;
}

/* Real frees wait for the device; so do these, which also keeps queued
 * operations from touching freed backing memory. */
static void wait_all_streams(void) {
    for (emu_stream *s = emu.streams; s; s = s->next_all) emu_wait(s, s->enqueued);
}

void emu_free_context_memory(int device) {
    wait_all_streams();
    for (long i = (long)emu.device.count - 1; i >= 0; i--) {
        if (emu.device.items[i].device != device) continue;
        emu.device_bytes -= emu.device.items[i].bytes;
        free(emu.device.items[i].backing);
        regions_remove(&emu.device, i);
    }
    for (long i = (long)emu.pinned.count - 1; i >= 0; i--) {
        emu_region *g = &emu.pinned.items[i];
        if (g->device != device) continue;
        if (g->registered) {
            emu.registered_bytes -= g->bytes;
        } else {
            emu.pinned_bytes -= g->bytes;
            emu.pinned_allocations--;
            free(g->backing);
        }
        regions_remove(&emu.pinned, i);
    }
}

CUresult emu_cuMemAlloc(CUdeviceptr *dptr, size_t bytes) {
    EMU_ENTER(cuMemAlloc);
    pthread_mutex_lock(&emu.lock);
    CUresult r = emu_need_context();
    if (!r && (!dptr || bytes == 0)) r = CUDA_ERROR_INVALID_VALUE;
    if (!r && (bytes > emu.device_limit - emu.device_bytes)) r = CUDA_ERROR_OUT_OF_MEMORY;
    void *backing = NULL;
    if (!r && !(backing = malloc(bytes))) r = CUDA_ERROR_OUT_OF_MEMORY;
    if (!r) {
        memset(backing, 0xa5, bytes);
        if (!emu.next_device_address) emu.next_device_address = DEVICE_BASE;
        emu_region g = {emu.next_device_address, bytes, backing, 0, emu_current_device()};
        if (regions_add(&emu.device, g)) {
            free(backing);
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            *dptr = g.start;
            emu.next_device_address += (bytes + 255) / 256 * 256 + DEVICE_GAP;
            emu.device_bytes += bytes;
        }
    }
    pthread_mutex_unlock(&emu.lock);
    return r;
}

CUresult emu_cuMemFree(CUdeviceptr dptr) {
    EMU_ENTER(cuMemFree);
    pthread_mutex_lock(&emu.lock);
    CUresult r = emu_need_context();
    long i = r ? -1 : regions_find(&emu.device, (uintptr_t)dptr, 0);
    if (!r && (i < 0 || emu.device.items[i].start != (uintptr_t)dptr)) r = CUDA_ERROR_INVALID_VALUE;
    if (!r) {
        wait_all_streams();
        i = regions_find(&emu.device, (uintptr_t)dptr, 0);
        emu.device_bytes -= emu.device.items[i].bytes;
        free(emu.device.items[i].backing);
        regions_remove(&emu.device, i);
    }
    pthread_mutex_unlock(&emu.lock);
    return r;
}

static CUresult pinned_alloc(void **pp, size_t bytes, unsigned flags) {
    pthread_mutex_lock(&emu.lock);
    CUresult r = emu_need_context();
    if (!r && (!pp || bytes == 0 || flags > 7)) r = CUDA_ERROR_INVALID_VALUE;
    if (!r && bytes > emu.pinned_limit - emu.pinned_bytes) r = CUDA_ERROR_OUT_OF_MEMORY;
    if (!r) {
        /* Zeroed like fresh pages. With an alignment set, the pointer is
         * aligned to exactly that much and no more, to expose code that
         * assumes page alignment. */
        size_t page = page_size(), align = emu.pinned_align;
        size_t offset = align && align < page ? align : 0;
        void *block = NULL;
        /* Exactly the bytes asked for (past the alignment offset), so a
         * sanitizer sees a write past the end. */
        if (bytes > SIZE_MAX - page || posix_memalign(&block, page, bytes + offset)) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            memset(block, 0, bytes + offset);
            emu_region g = {(uintptr_t)block + offset, bytes, block, 0, emu_current_device()};
            if (regions_add(&emu.pinned, g)) {
                free(block);
                r = CUDA_ERROR_OUT_OF_MEMORY;
            } else {
                *pp = (void *)g.start;
                emu.pinned_bytes += bytes;
                emu.pinned_allocations++;
            }
        }
    }
    pthread_mutex_unlock(&emu.lock);
    return r;
}

CUresult emu_cuMemAllocHost(void **pp, size_t bytes) {
    EMU_ENTER(cuMemAllocHost);
    return pinned_alloc(pp, bytes, 0);
}

CUresult emu_cuMemHostAlloc(void **pp, size_t bytes, unsigned int flags) {
    EMU_ENTER(cuMemHostAlloc);
    return pinned_alloc(pp, bytes, flags);
}

CUresult emu_cuMemFreeHost(void *p) {
    EMU_ENTER(cuMemFreeHost);
    pthread_mutex_lock(&emu.lock);
    /* No current context needed: the H200's driver frees pinned memory from
     * a thread that has none. */
    CUresult r = emu.initialized ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
    long i = r ? -1 : regions_find(&emu.pinned, (uintptr_t)p, 0);
    if (!r && (i < 0 || emu.pinned.items[i].registered || emu.pinned.items[i].start != (uintptr_t)p))
        r = CUDA_ERROR_INVALID_VALUE;
    if (!r) {
        wait_all_streams();
        i = regions_find(&emu.pinned, (uintptr_t)p, 0);
        emu.pinned_bytes -= emu.pinned.items[i].bytes;
        emu.pinned_allocations--;
        free(emu.pinned.items[i].backing);
        regions_remove(&emu.pinned, i);
    }
    pthread_mutex_unlock(&emu.lock);
    return r;
}

CUresult emu_cuMemHostRegister(void *p, size_t bytes, unsigned int flags) {
    EMU_ENTER(cuMemHostRegister);
    pthread_mutex_lock(&emu.lock);
    CUresult r = emu_need_context();
    if (!r && (!p || bytes == 0 || flags > 15)) r = CUDA_ERROR_INVALID_VALUE;
    if (!r && regions_overlap(&emu.pinned, (uintptr_t)p, bytes) >= 0)
        r = CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    if (!r) {
        emu_region g = {(uintptr_t)p, bytes, NULL, 1, emu_current_device()};
        if (regions_add(&emu.pinned, g))
            r = CUDA_ERROR_OUT_OF_MEMORY;
        else
            emu.registered_bytes += bytes;
    }
    pthread_mutex_unlock(&emu.lock);
    return r;
}

CUresult emu_cuMemHostUnregister(void *p) {
    EMU_ENTER(cuMemHostUnregister);
    pthread_mutex_lock(&emu.lock);
    CUresult r = emu_need_context();
    long i = r ? -1 : regions_find(&emu.pinned, (uintptr_t)p, 0);
    if (!r && (i < 0 || !emu.pinned.items[i].registered || emu.pinned.items[i].start != (uintptr_t)p))
        r = CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    if (!r) {
        wait_all_streams();
        i = regions_find(&emu.pinned, (uintptr_t)p, 0);
        emu.registered_bytes -= emu.pinned.items[i].bytes;
        regions_remove(&emu.pinned, i);
    }
    pthread_mutex_unlock(&emu.lock);
    return r;
}

/* One attribute of a pointer, as the driver answers it for the attributes
 * pinstage asks: pageable host memory is unknown to the driver. */
static CUresult pointer_attribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr) {
    const emu_region *g = NULL;
    unsigned type = 0;
    long i;
    if ((i = regions_find(&emu.device, (uintptr_t)ptr, 1)) >= 0) {
        g = &emu.device.items[i];
        type = CU_MEMORYTYPE_DEVICE;
    } else if ((i = regions_find(&emu.pinned, (uintptr_t)ptr, 1)) >= 0) {
        g = &emu.pinned.items[i];
        type = CU_MEMORYTYPE_HOST;
    }
    if (!data) return CUDA_ERROR_INVALID_VALUE;
    switch (attribute) {
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        if (!g) return CUDA_ERROR_INVALID_VALUE;
        *(unsigned *)data = type;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        if (!g) return CUDA_ERROR_INVALID_VALUE;
        *(CUdeviceptr *)data = g->start;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        if (!g) return CUDA_ERROR_INVALID_VALUE;
        *(size_t *)data = g->bytes;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        if (!g) return CUDA_ERROR_INVALID_VALUE;
        *(int *)data = g->device;
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

CUresult emu_cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr) {
    EMU_ENTER(cuPointerGetAttribute);
    pthread_mutex_lock(&emu.lock);
    CUresult r = emu_need_context();
    if (!r) r = pointer_attribute(data, attribute, ptr);
    pthread_mutex_unlock(&emu.lock);
    return r;
}

/* Like the driver, answers every attribute it can: for memory the driver
 * does not know, the memory type reads 0 and the call succeeds. */
CUresult emu_cuPointerGetAttributes(unsigned int count, CUpointer_attribute *attributes, void **data,
                                    CUdeviceptr ptr) {
    EMU_ENTER(cuPointerGetAttributes);
    pthread_mutex_lock(&emu.lock);
    CUresult r = emu_need_context();
    if (!r && (!count || !attributes || !data)) r = CUDA_ERROR_INVALID_VALUE;
    for (unsigned k = 0; !r && k < count; k++) {
        if (!data[k]) {
            r = CUDA_ERROR_INVALID_VALUE;
        } else if (pointer_attribute(data[k], attributes[k], ptr) != CUDA_SUCCESS) {
            if (attributes[k] == CU_POINTER_ATTRIBUTE_MEMORY_TYPE) *(unsigned *)data[k] = 0;
            else if (attributes[k] == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR) *(CUdeviceptr *)data[k] = 0;
            else if (attributes[k] == CU_POINTER_ATTRIBUTE_RANGE_SIZE) *(size_t *)data[k] = 0;
            else r = CUDA_ERROR_INVALID_VALUE;
        }
    }
    pthread_mutex_unlock(&emu.lock);
    return r;
}
