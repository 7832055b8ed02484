/* SPDX-License-Identifier: MIT */
#include "pinstage.h"

unsigned pinstage_version_number(void) { return PINSTAGE_VERSION_NUMBER; }
const char *pinstage_version_string(void) { return PINSTAGE_VERSION_STRING; }
