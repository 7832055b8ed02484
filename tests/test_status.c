/* SPDX-License-Identifier: MIT */
/* Status names, descriptions and versions, known without any driver. */
#include <stdio.h>
#include <string.h>

#include "cuda_abi.h"
#include "pinstage.h"

static int failures;
#define CHECK(c) ((c) ? (void)0 : (void)(failures++, fprintf(stderr, "%s:%d: CHECK(%s)\n", __FILE__, __LINE__, #c)))

int main(void) {
    /* Our constants are the driver's values. */
    CHECK(PINSTAGE_SUCCESS == CUDA_SUCCESS);
    CHECK(PINSTAGE_ERROR_INVALID_VALUE == CUDA_ERROR_INVALID_VALUE);
    CHECK(PINSTAGE_ERROR_OUT_OF_MEMORY == CUDA_ERROR_OUT_OF_MEMORY);
    CHECK(PINSTAGE_ERROR_INVALID_CONTEXT == CUDA_ERROR_INVALID_CONTEXT);
    CHECK(PINSTAGE_ERROR_DRIVER_NOT_LOADED == CUDA_ERROR_SHARED_OBJECT_INIT_FAILED);
    CHECK(PINSTAGE_ERROR_DRIVER_SYMBOL_NOT_FOUND == CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND);
    CHECK(PINSTAGE_ERROR_NOT_PERMITTED == CUDA_ERROR_NOT_PERMITTED);

    /* Every code cuda_abi.h knows is named exactly as the driver names it. */
#define NAMED(name, value) CHECK(strcmp(pinstage_status_name(value), #name) == 0);
    PS_CUDA_RESULTS(NAMED)
#undef NAMED
    CHECK(strcmp(pinstage_status_name(709), "CUDA_ERROR_CONTEXT_IS_DESTROYED") == 0);
    CHECK(strcmp(pinstage_status_name(12345), "CUDA_ERROR_12345") == 0); /* names the code */
    CHECK(strcmp(pinstage_status_name(-7), "CUDA_ERROR_-7") == 0);
    CHECK(strcmp(pinstage_status_string(1), "an argument is out of range or inconsistent with the others") == 0);
    CHECK(strstr(pinstage_status_string(303), "could not be loaded") != NULL);
    CHECK(pinstage_status_string(-7) != NULL && *pinstage_status_string(-7));
    /* Every code has a non-empty description. */
    for (int code = 0; code < 1000; code++) {
        const char *name = pinstage_status_name(code);
        char unknown[32];
        snprintf(unknown, sizeof unknown, "CUDA_ERROR_%d", code);
        if (strcmp(name, unknown) != 0) CHECK(*pinstage_status_string(code));
    }
    CHECK(strcmp(pinstage_last_error_message(), "") == 0);

    CHECK(pinstage_version_number() == PINSTAGE_VERSION_NUMBER);
    CHECK(strcmp(pinstage_version_string(), PINSTAGE_VERSION_STRING) == 0);
    char expect[32];
    snprintf(expect, sizeof expect, "%d.%d.%d", PINSTAGE_VERSION_MAJOR, PINSTAGE_VERSION_MINOR,
             PINSTAGE_VERSION_PATCH);
    CHECK(strcmp(expect, PINSTAGE_VERSION_STRING) == 0);
    printf("%s\n", failures ? "FAIL" : "ok");
    return failures != 0;
}
