/* SPDX-License-Identifier: MIT */
/* Status reporting: the thread-local message behind pinstage_last_error_message. */
#ifndef PINSTAGE_STATUS_H
#define PINSTAGE_STATUS_H

#include "pinstage.h"

/* Records a printf-style message for this thread and returns `status`, so a
 * check reads `return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "...", ...);`. */
pinstage_status ps_fail(pinstage_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* For a failed driver call: "<caller>: <entry> failed: <NAME> (<text>)". */
pinstage_status ps_fail_driver(pinstage_status status, const char *caller, const char *entry);

#endif
