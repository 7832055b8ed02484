/* Which path a slice-taking upload / download takes for a transfer size.
 * Kept apart so a calibrated, per-machine choice can replace the threshold
 * without touching the transfer code. */
#ifndef PINSTAGE_PATH_H
#define PINSTAGE_PATH_H

#include <stddef.h>

typedef enum ps_path {
    PS_PATH_STAGED,  /* memcpy through the pinned buffer, async copy, sync */
    PS_PATH_PAGEABLE /* the driver's pageable copy, ordered against the stream */
} ps_path;

static inline ps_path ps_choose_path(size_t bytes, size_t auto_stage_max_bytes) {
    return bytes <= auto_stage_max_bytes ? PS_PATH_STAGED : PS_PATH_PAGEABLE;
}

#endif
