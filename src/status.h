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

/* This thread's message, kept aside. Cleanup after a failure may fail too
 * and write its own message, but the caller should read the failure that
 * ended its call: save first, restore after (or re-prefix the saved text
 * with the public call that was running). */
#define PS_MESSAGE_MAX 512
typedef struct {
    char text[PS_MESSAGE_MAX];
} ps_message;

void ps_message_save(ps_message *m);

/* Makes the saved text this thread's message again; returns `status`. */
pinstage_status ps_message_restore(const ps_message *m, pinstage_status status);

#endif
