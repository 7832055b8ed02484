/* SPDX-License-Identifier: MIT */
/* Bad input: a clear status and message, no driver call, nothing changed. */
#include "check.h"

static pinstage_buffer *buf;
static pinstage_devbuf *d12; /* 12 floats */
static pinstage_stats stats_before;
static size_t capacity_before;
static unsigned long calls_before;

static void fill_unreachable(void *dst, size_t n, void *user) {
    (void)dst, (void)n;
    (*(int *)user)++;
}

static void snapshot(void) {
    pinstage_buffer_stats(buf, &stats_before);
    capacity_before = pinstage_buffer_capacity(buf);
    calls_before = driver_calls();
}

/* Nothing changed and no driver call was made since snapshot(). */
#define CHECK_UNCHANGED()                                                 \
    do {                                                                  \
        pinstage_stats now_;                                              \
        pinstage_buffer_stats(buf, &now_);                                \
        CHECK(memcmp(&now_, &stats_before, sizeof now_) == 0);            \
        CHECK_EQ(pinstage_buffer_capacity(buf), capacity_before);         \
        CHECK_EQ(driver_calls(), calls_before);                           \
    } while (0)

static void upload_with_rejects_bad_input(void) {
    int fills = 0;
    snapshot();
    CHECK_STATUS(pinstage_buffer_upload_with(NULL, d12, 12, NULL, fill_unreachable, &fills),
                 PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_MESSAGE("pinstage_buffer_upload_with: buf is NULL");
    CHECK_STATUS(pinstage_buffer_upload_with(buf, NULL, 12, NULL, fill_unreachable, &fills),
                 PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_MESSAGE("dst is NULL");
    CHECK_STATUS(pinstage_buffer_upload_with(buf, d12, 12, NULL, NULL, &fills), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_MESSAGE("fill is NULL");
    CHECK_STATUS(pinstage_buffer_upload_with(buf, d12, 0, NULL, fill_unreachable, &fills),
                 PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_MESSAGE("n is 0");
    CHECK_STATUS(pinstage_buffer_upload_with(buf, d12, 10, NULL, fill_unreachable, &fills),
                 PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_MESSAGE("pinstage_buffer_upload_with: n=10 but dst holds 12 elements");
    CHECK_EQ(fills, 0);
    CHECK_UNCHANGED();
}

static void download_into_rejects_bad_input(void) {
    const void *view = (const void *)0x1;
    snapshot();
    CHECK_STATUS(pinstage_buffer_download_into(buf, d12, 13, NULL, &view), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_MESSAGE("n=13 but src holds 12 elements");
    CHECK(view == NULL);
    CHECK_STATUS(pinstage_buffer_download_into(buf, d12, 12, NULL, NULL), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_MESSAGE("view is NULL");
    CHECK_STATUS(pinstage_buffer_download_into(buf, NULL, 12, NULL, &view), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_STATUS(pinstage_buffer_download_into(NULL, d12, 12, NULL, &view), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_STATUS(pinstage_buffer_download_into(buf, d12, 0, NULL, &view), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_UNCHANGED();
}

static void upload_and_download_reject_bad_input(void) {
    float host[12] = {0};
    snapshot();
    CHECK_STATUS(pinstage_buffer_upload(buf, d12, host, 10, NULL), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_MESSAGE("pinstage_buffer_upload: n=10 but dst holds 12 elements");
    CHECK_STATUS(pinstage_buffer_upload(buf, d12, NULL, 12, NULL), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_MESSAGE("src is NULL");
    CHECK_STATUS(pinstage_buffer_upload(buf, d12, host, 0, NULL), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_STATUS(pinstage_buffer_upload(buf, NULL, host, 12, NULL), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_STATUS(pinstage_buffer_upload(NULL, d12, host, 12, NULL), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_STATUS(pinstage_buffer_download(buf, host, 11, d12, NULL), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_MESSAGE("pinstage_buffer_download: n=11 but src holds 12 elements");
    CHECK_STATUS(pinstage_buffer_download(buf, NULL, 12, d12, NULL), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_MESSAGE("dst is NULL");
    CHECK_STATUS(pinstage_buffer_download(buf, host, 0, d12, NULL), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_STATUS(pinstage_buffer_download(buf, host, 12, NULL, NULL), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_STATUS(pinstage_buffer_download(NULL, host, 12, d12, NULL), PINSTAGE_ERROR_INVALID_VALUE);
    /* Same rules on the direct path. */
    pinstage_buffer_set_auto_stage_max_bytes(buf, 0);
    snapshot();
    CHECK_STATUS(pinstage_buffer_upload(buf, d12, host, 10, NULL), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_STATUS(pinstage_buffer_download(buf, host, 10, d12, NULL), PINSTAGE_ERROR_INVALID_VALUE);
    pinstage_buffer_set_auto_stage_max_bytes(buf, PINSTAGE_DEFAULT_AUTO_STAGE_MAX_BYTES);
    CHECK_UNCHANGED();
}

static void devbuf_rejects_bad_layouts(void) {
    pinstage_devbuf *d = (pinstage_devbuf *)0x1;
    calls_before = driver_calls();
    CHECK_STATUS(pinstage_devbuf_alloc(&d, 0, 4, 4), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_MESSAGE("len is 0");
    CHECK(d == NULL);
    CHECK_STATUS(pinstage_devbuf_alloc(&d, 4, 0, 1), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_MESSAGE("elem_size is 0");
    CHECK_STATUS(pinstage_devbuf_alloc(&d, 4, 6, 3), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_MESSAGE("elem_align=3 is not a power of two");
    CHECK_STATUS(pinstage_devbuf_alloc(&d, 4, 512, 512), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_STATUS(pinstage_devbuf_alloc(&d, 4, 6, 4), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_MESSAGE("elem_size=6 is not a multiple of elem_align=4");
    CHECK_STATUS(pinstage_devbuf_alloc(&d, SIZE_MAX / 2, 4, 4), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_MESSAGE("overflows");
    CHECK_STATUS(pinstage_devbuf_alloc(NULL, 4, 4, 4), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_STATUS(pinstage_devbuf_wrap(&d, 0, 4, 4, 4), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_MESSAGE("ptr is 0");
    CHECK_STATUS(pinstage_devbuf_wrap(&d, pinstage_devbuf_ptr(d12) + 2, 4, 4, 4), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_MESSAGE("not aligned");
    CHECK_STATUS(pinstage_devbuf_wrap(&d, pinstage_devbuf_ptr(d12), SIZE_MAX, 8, 8), PINSTAGE_ERROR_INVALID_VALUE);
    float host[12];
    CHECK_STATUS(pinstage_devbuf_copy_from_host(d12, host, 11), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_MESSAGE("n=11 but the device buffer holds 12 elements");
    CHECK_STATUS(pinstage_devbuf_copy_from_host(d12, NULL, 12), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_STATUS(pinstage_devbuf_copy_from_host(NULL, host, 12), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_STATUS(pinstage_devbuf_copy_to_host(d12, host, 13), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_STATUS(pinstage_devbuf_copy_to_host(d12, NULL, 12), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_STATUS(pinstage_devbuf_check_elem(d12, 8, 8, NULL), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_MESSAGE("holds 4-byte elements aligned to 4, not 8-byte elements aligned to 8");
    CHECK_EQ(driver_calls(), calls_before);
    CHECK_EQ(pinstage_devbuf_len(NULL), 0);
    CHECK_EQ(pinstage_devbuf_ptr(NULL), 0);
    CHECK_OK(pinstage_devbuf_free(NULL));
}

static void helpers_reject_bad_input(void) {
    calls_before = driver_calls();
    CUstream s = (CUstream)0x1;
    CHECK_STATUS(pinstage_stream_create(NULL, 0), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_STATUS(pinstage_stream_create(&s, 0x10), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_MESSAGE("unknown flags 0x10");
    CHECK(s == NULL);
    CHECK_STATUS(pinstage_context_init(-1), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_MESSAGE("device=-1 is negative");
    CHECK_STATUS(pinstage_context_release(-3), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_STATUS(pinstage_device_get_info(0, NULL), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_STATUS(pinstage_device_count(NULL), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_STATUS(pinstage_driver_get_info(NULL), PINSTAGE_ERROR_INVALID_VALUE);
    void *fn = (void *)0x1;
    CHECK_STATUS(pinstage_driver_get_proc(NULL, 2000, &fn), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_STATUS(pinstage_driver_get_proc("cuInit", 2000, NULL), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_EQ(driver_calls(), calls_before);
    CHECK_OK(pinstage_stream_destroy(NULL));
}

/* Failures the driver reports come back unchanged, with the call named. */
static void driver_errors_pass_through(void) {
    int count = 0;
    CHECK_OK(pinstage_device_count(&count));
    CHECK_STATUS(pinstage_context_init(count), 101 /* CUDA_ERROR_INVALID_DEVICE */);
    CHECK_MESSAGE("does not exist");
    pinstage_device_info info;
    CHECK_STATUS(pinstage_device_get_info(count + 5, &info), 101);
    void *fn;
    CHECK_STATUS(pinstage_driver_get_proc("cuNoSuchEntryPoint", 12000, &fn), 500 /* NOT_FOUND */);
    CHECK_MESSAGE("cuNoSuchEntryPoint");
}

static void no_current_context_is_reported(void) {
    /* A thread with no context: the driver's INVALID_CONTEXT, nothing changed. */
    CUresult (*get_current)(CUcontext *);
    CUresult (*set_current)(CUcontext);
    CUcontext ctx;
    REQUIRE_OK(pinstage_driver_get_proc("cuCtxGetCurrent", 4000, (void **)&get_current));
    REQUIRE_OK(pinstage_driver_get_proc("cuCtxSetCurrent", 4000, (void **)&set_current));
    REQUIRE_OK((pinstage_status)get_current(&ctx));
    REQUIRE_OK((pinstage_status)set_current(NULL));
    float host[12];
    snapshot();
    CHECK_STATUS(pinstage_buffer_upload(buf, d12, host, 12, NULL), PINSTAGE_ERROR_INVALID_CONTEXT);
    CHECK_MESSAGE("CUDA_ERROR_INVALID_CONTEXT");
    pinstage_stats now;
    pinstage_buffer_stats(buf, &now);
    CHECK(memcmp(&now, &stats_before, sizeof now) == 0);
    REQUIRE_OK((pinstage_status)set_current(ctx));
    CHECK_OK(pinstage_buffer_upload(buf, d12, host, 12, NULL));
}

int main(void) {
    test_setup();
    REQUIRE_OK(pinstage_buffer_create(&buf));
    REQUIRE_OK(pinstage_devbuf_alloc_f32(&d12, 12));
    RUN(upload_with_rejects_bad_input);
    RUN(download_into_rejects_bad_input);
    RUN(upload_and_download_reject_bad_input);
    /* Again with pinned memory in place. */
    REQUIRE_OK(pinstage_buffer_reserve(buf, 1));
    RUN(upload_with_rejects_bad_input);
    RUN(download_into_rejects_bad_input);
    RUN(upload_and_download_reject_bad_input);
    RUN(devbuf_rejects_bad_layouts);
    RUN(helpers_reject_bad_input);
    RUN(driver_errors_pass_through);
    RUN(no_current_context_is_reported);
    pinstage_devbuf_free(d12);
    pinstage_buffer_free(buf);
    return test_finish();
}
