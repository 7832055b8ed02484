/* SPDX-License-Identifier: MIT */
/* Loading the driver: by environment variable or API call, failures that say
 * what was tried and how to fix it, and a process that keeps working once a
 * driver loads. Modes (argv[1]) set up by ctest:
 *   (none)         PINSTAGE_DRIVER names a working driver
 *   no-driver      PINSTAGE_DRIVER names a library that does not exist
 *   no-device      the emulated driver with no devices: cuInit fails
 *   missing-entry  the emulated driver failing one cuGetProcAddress lookup: not found
 *   failed-lookup  the same lookup failing with out-of-memory
 *   failed-version the emulated driver failing cuDriverGetVersion once */
#include "check.h"

static void a_bad_path_fails_then_a_good_one_loads(void) {
    const char *env = getenv("PINSTAGE_DRIVER");
    CHECK_STATUS(pinstage_driver_load("libm.so.6"), PINSTAGE_ERROR_DRIVER_SYMBOL_NOT_FOUND);
    CHECK_MESSAGE("'libm.so.6' (given to pinstage_driver_load) is not a CUDA driver library");
    CHECK_STATUS(pinstage_driver_load("/nonexistent/libcuda-missing.so"), PINSTAGE_ERROR_DRIVER_NOT_LOADED);
    CHECK_MESSAGE("/nonexistent/libcuda-missing.so");
    CHECK_MESSAGE("given to pinstage_driver_load");
    CHECK_MESSAGE("PINSTAGE_DRIVER");
    CHECK_STATUS(pinstage_driver_load(NULL), PINSTAGE_SUCCESS);
    CHECK_STATUS(pinstage_driver_load(NULL), PINSTAGE_SUCCESS);
    pinstage_driver_info info;
    CHECK_OK(pinstage_driver_get_info(&info));
    if (env) CHECK(strcmp(info.path, env) == 0);
    CHECK(info.driver_version >= 11030);
    CHECK_STATUS(pinstage_driver_load(info.path), PINSTAGE_SUCCESS); /* the same one again */
    /* ... by another spelling of its path. */
    char other[4200];
    const char *slash = strrchr(info.path, '/');
    if (slash) {
        snprintf(other, sizeof other, "%.*s/./%s", (int)(slash - info.path), info.path, slash + 1);
        CHECK_STATUS(pinstage_driver_load(other), PINSTAGE_SUCCESS);
    }
    CHECK_STATUS(pinstage_driver_load("/some/other/libcuda.so"), PINSTAGE_ERROR_NOT_PERMITTED);
    CHECK_MESSAGE("is already loaded");
    void *fn = NULL;
    CHECK_OK(pinstage_driver_get_proc("cuMemsetD8Async", 3020, &fn));
    CHECK(fn != NULL);
}

static void every_call_reports_the_missing_driver(void) {
    pinstage_buffer *buf = NULL;
    pinstage_devbuf *d = NULL;
    CUstream s;
    int count;
    pinstage_device_info dinfo;
    pinstage_driver_info info;
    float host[4];
    /* Creating an empty buffer needs no driver. */
    CHECK_OK(pinstage_buffer_create(&buf));
    CHECK_STATUS(pinstage_buffer_reserve(buf, 100), PINSTAGE_ERROR_DRIVER_NOT_LOADED);
    CHECK_MESSAGE("could not load the CUDA driver library '/nonexistent/libcuda.so.1' (from PINSTAGE_DRIVER)");
    CHECK_MESSAGE("libpinstage_emu.so");
    pinstage_buffer *b3 = NULL;
    CHECK_STATUS(pinstage_buffer_create_with_capacity(&b3, 100), PINSTAGE_ERROR_DRIVER_NOT_LOADED);
    CHECK(b3 == NULL);
    CHECK_STATUS(pinstage_devbuf_alloc_f32(&d, 4), PINSTAGE_ERROR_DRIVER_NOT_LOADED);
    CHECK(d == NULL);
    CHECK_STATUS(pinstage_context_init(0), PINSTAGE_ERROR_DRIVER_NOT_LOADED);
    CHECK_STATUS(pinstage_stream_create(&s, 0), PINSTAGE_ERROR_DRIVER_NOT_LOADED);
    CHECK_STATUS(pinstage_stream_synchronize(NULL), PINSTAGE_ERROR_DRIVER_NOT_LOADED);
    CHECK_STATUS(pinstage_device_count(&count), PINSTAGE_ERROR_DRIVER_NOT_LOADED);
    CHECK_STATUS(pinstage_device_get_info(0, &dinfo), PINSTAGE_ERROR_DRIVER_NOT_LOADED);
    CHECK_STATUS(pinstage_driver_get_info(&info), PINSTAGE_ERROR_DRIVER_NOT_LOADED);
    pinstage_devbuf *w;
    CHECK_OK(pinstage_devbuf_wrap_f32(&w, 0x10000, 4)); /* wrapping needs no driver either */
    pinstage_buffer *b2;
    CHECK_OK(pinstage_buffer_create(&b2));
    CHECK_STATUS(pinstage_buffer_upload_f32(b2, w, host, 4, NULL), PINSTAGE_ERROR_DRIVER_NOT_LOADED);
    CHECK_STATUS(pinstage_devbuf_copy_from_host(w, host, 4), PINSTAGE_ERROR_DRIVER_NOT_LOADED);
    pinstage_devbuf_free(w);
    pinstage_buffer_free(b2);
    pinstage_buffer_free(buf);

    /* Naming a working driver afterwards recovers the process. */
    const char *emu_path = getenv("PINSTAGE_TEST_EMU");
    if (emu_path) {
        CHECK_OK(pinstage_driver_load(emu_path));
        CHECK_OK(pinstage_context_init(0));
        CHECK_OK(pinstage_devbuf_alloc_f32(&d, 4));
        pinstage_devbuf_free(d);
    }
}

static void no_device_fails_at_init(void) {
    CHECK_STATUS(pinstage_driver_load(NULL), 100 /* CUDA_ERROR_NO_DEVICE */);
    CHECK_MESSAGE("cuInit failed: CUDA_ERROR_NO_DEVICE");
    CHECK_STATUS(pinstage_context_init(0), 100);
}

/* A failing lookup is the driver's error, not a missing symbol; the next
 * load, whose lookups succeed, works. */
static void a_failed_lookup_is_reported_as_such(void) {
    CHECK_STATUS(pinstage_driver_load(NULL), PINSTAGE_ERROR_OUT_OF_MEMORY);
    CHECK_MESSAGE("cuGetProcAddress failed for cuDeviceGetName: CUDA_ERROR_OUT_OF_MEMORY");
    /* The failed load unloaded the library; loaded again it reads the
     * environment again, now without the fault. */
    unsetenv("PINSTAGE_EMU_FAIL");
    CHECK_OK(pinstage_driver_load(NULL));
    void *fn;
    test_setup();
    if (emu) {
        emu->fail("cuGetProcAddress", 1, 2, 0);
        CHECK_STATUS(pinstage_driver_get_proc("cuMemsetD8Async", 3020, &fn), PINSTAGE_ERROR_OUT_OF_MEMORY);
        CHECK_MESSAGE("pinstage_driver_get_proc: cuGetProcAddress failed");
    }
    CHECK_STATUS(pinstage_driver_get_proc("cuNoSuchCall", 3020, &fn), 500);
    CHECK_MESSAGE("cuGetProcAddress found no cuNoSuchCall");
}

static void a_failed_version_query_fails_the_load(void) {
    CHECK_STATUS(pinstage_driver_load(NULL), 999);
    CHECK_MESSAGE("cuDriverGetVersion failed");
    unsetenv("PINSTAGE_EMU_FAIL");
    pinstage_driver_info info;
    CHECK_OK(pinstage_driver_get_info(&info)); /* a retry loads */
    CHECK(info.driver_version >= 11030);
}

static void a_missing_entry_point_is_named(void) {
    CHECK_STATUS(pinstage_driver_load(NULL), PINSTAGE_ERROR_DRIVER_SYMBOL_NOT_FOUND);
    CHECK_MESSAGE("does not provide cuDeviceGetName at ABI version 2000");
    /* The failed load left nothing loaded: later calls report it again. */
    CHECK_STATUS(pinstage_context_init(0), PINSTAGE_ERROR_DRIVER_SYMBOL_NOT_FOUND);
    CHECK_MESSAGE("cuDeviceGetName");
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "no-driver"))
        RUN(every_call_reports_the_missing_driver);
    else if (!strcmp(mode, "no-device"))
        RUN(no_device_fails_at_init);
    else if (!strcmp(mode, "missing-entry"))
        RUN(a_missing_entry_point_is_named);
    else if (!strcmp(mode, "failed-lookup"))
        RUN(a_failed_lookup_is_reported_as_such);
    else if (!strcmp(mode, "failed-version"))
        RUN(a_failed_version_query_fails_the_load);
    else
        RUN(a_bad_path_fails_then_a_good_one_loads);
    return test_finish();
}
