/* SPDX-License-Identifier: MIT */
/* The copy engine's timeline, for finding out where a transfer's time goes.
 * With PINSTAGE_TRACE=FILE in the environment, the first transfers' chunks
 * (opened, copied, DMA enqueued, landed as the caller saw it) and blocks
 * (which thread, on which CPU, from when to when) are kept in memory and
 * written to FILE at exit; `pinstage-bench --trace FILE` summarizes them.
 * Without it, tracing costs one predictable branch per block. */
#ifndef PINSTAGE_TRACE_H
#define PINSTAGE_TRACE_H

#include <stddef.h>
#include <stdint.h>

enum { PS_TRACE_OPENED, PS_TRACE_COPIED, PS_TRACE_ENQUEUED, PS_TRACE_LANDED };

/* 0 when tracing is off or its memory is full; else the transfer's id. */
uint32_t ps_trace_begin(int dir, size_t bytes, unsigned chunks);
/* The workers the transfer's job may have. */
void ps_trace_seats(uint32_t id, unsigned seats);
void ps_trace_chunk(uint32_t id, unsigned chunk, int what);
/* A block's start and end (ps_trace_now) on the calling thread. */
void ps_trace_block(uint32_t id, unsigned chunk, uint64_t start, uint64_t end);
void ps_trace_end(uint32_t id);
uint64_t ps_trace_now(void);

#endif
