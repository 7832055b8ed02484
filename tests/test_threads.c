/* SPDX-License-Identifier: MIT */
/* The documented thread-safety rules, hammered: threads race to load the
 * driver (nothing is loaded when they start), then each uses its own
 * buffer, ring, device buffers and stream concurrently on every route (the
 * copy engine's workers shared by all), reads and sets the default profile,
 * asks for status names, resizes the worker pool, and checks that its
 * last-error message is its own. Every byte moved is checked. Run under
 * ThreadSanitizer in CI. */
#include <pthread.h>

#include "check.h"

#define THREADS 6
#define ROUNDS 8
#define K 1024u

typedef struct {
    unsigned id;
    int failures;
    pthread_barrier_t *start;
} worker;

#define EXPECT(cond, what)                                                                          \
    do {                                                                                            \
        if (!(cond)) {                                                                              \
            fprintf(stderr, "  thread %u: %s (%s)\n", w->id, what, pinstage_last_error_message()); \
            w->failures++;                                                                          \
        }                                                                                           \
    } while (0)

static void *run_worker(void *arg) {
    worker *w = arg;
    pthread_barrier_wait(w->start);
    /* All at once: the first driver load races here. */
    pinstage_driver_info info;
    EXPECT(pinstage_driver_get_info(&info) == PINSTAGE_SUCCESS, "driver_get_info");
    EXPECT(pinstage_context_init(0) == PINSTAGE_SUCCESS, "context_init");
    CUstream stream;
    pinstage_buffer *buf;
    pinstage_ring *ring;
    EXPECT(pinstage_stream_create(&stream, w->id % 2 ? PINSTAGE_STREAM_NON_BLOCKING : 0) == PINSTAGE_SUCCESS,
           "stream_create");
    EXPECT(pinstage_buffer_create(&buf) == PINSTAGE_SUCCESS, "buffer_create");
    EXPECT(pinstage_ring_create(&ring, 3, 0) == PINSTAGE_SUCCESS, "ring_create");
    if (w->failures) return NULL;
    size_t sizes[] = {4 * K, 150528, 700 * K + 3, 3u << 20};
    for (unsigned round = 0; round < ROUNDS && !w->failures; round++) {
        size_t bytes = sizes[(round + w->id) % 4];
        unsigned seed = 9000 + w->id * 100 + round;
        unsigned char *src = malloc(bytes), *back = malloc(bytes);
        pinstage_devbuf *d;
        EXPECT(pinstage_devbuf_alloc_u8(&d, bytes) == PINSTAGE_SUCCESS, "devbuf_alloc");
        fill_pattern(src, bytes, seed);
        /* Every route: the profile's, always staged, and the pageable path. */
        pinstage_buffer_set_auto_stage_max_bytes(buf, round % 3 == 0   ? PINSTAGE_AUTO_STAGE_PROFILE
                                                      : round % 3 == 1 ? SIZE_MAX
                                                                       : 0);
        EXPECT(pinstage_buffer_upload_u8(buf, d, src, bytes, stream) == PINSTAGE_SUCCESS, "upload");
        memset(back, 0, bytes);
        EXPECT(pinstage_buffer_download_u8(buf, back, bytes, d, stream) == PINSTAGE_SUCCESS, "download");
        EXPECT(pattern_mismatch(back, bytes, seed) == -1, "download moved the wrong bytes");
        const void *view = NULL;
        EXPECT(pinstage_buffer_download_into(buf, d, bytes, stream, &view) == PINSTAGE_SUCCESS, "download_into");
        EXPECT(view && pattern_mismatch(view, bytes, seed) == -1, "download_into moved the wrong bytes");
        /* The ring, on the same stream. */
        pinstage_ticket t;
        fill_pattern(src, bytes, seed + 50);
        EXPECT(pinstage_ring_upload_async(ring, d, src, bytes, stream) == PINSTAGE_SUCCESS, "ring upload");
        EXPECT(pinstage_ring_download_async(ring, d, bytes, stream, &t) == PINSTAGE_SUCCESS, "ring download");
        EXPECT(pinstage_ring_wait(ring, t, &view) == PINSTAGE_SUCCESS, "ring wait");
        EXPECT(view && pattern_mismatch(view, bytes, seed + 50) == -1, "the ring moved the wrong bytes");
        EXPECT(pinstage_ring_release(ring, t) == PINSTAGE_SUCCESS, "ring release");
        /* Process-wide, thread-safe calls. */
        pinstage_profile *p;
        EXPECT(pinstage_profile_get_default(&p) == PINSTAGE_SUCCESS, "profile_get_default");
        EXPECT(pinstage_profile_set_default(p) == PINSTAGE_SUCCESS, "profile_set_default");
        pinstage_profile_free(p);
        EXPECT(strcmp(pinstage_status_name(1), "CUDA_ERROR_INVALID_VALUE") == 0, "status_name");
        if (round == ROUNDS / 2 && w->id == 0) pinstage_pool_set_threads(2);
        pinstage_pool_info pool;
        pinstage_pool_get_info(&pool);
        /* This thread's message is this thread's. */
        char expected[64];
        snprintf(expected, sizeof expected, "n=%u but", w->id + 1);
        EXPECT(pinstage_buffer_upload_u8(buf, d, src, w->id + 1, stream) == PINSTAGE_ERROR_INVALID_VALUE,
               "a bad n is refused");
        EXPECT(strstr(pinstage_last_error_message(), expected) != NULL, "the message is another thread's");
        pinstage_devbuf_free(d);
        free(src);
        free(back);
    }
    EXPECT(pinstage_ring_free(ring) == PINSTAGE_SUCCESS, "ring_free");
    EXPECT(pinstage_buffer_free(buf) == PINSTAGE_SUCCESS, "buffer_free");
    EXPECT(pinstage_stream_destroy(stream) == PINSTAGE_SUCCESS, "stream_destroy");
    EXPECT(pinstage_context_release(0) == PINSTAGE_SUCCESS, "context_release");
    return NULL;
}

static void threads_use_their_own_objects_concurrently(void) {
    pthread_t threads[THREADS];
    worker workers[THREADS];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, THREADS);
    for (unsigned i = 0; i < THREADS; i++) {
        workers[i] = (worker){i, 0, &start};
        if (pthread_create(&threads[i], NULL, run_worker, &workers[i])) {
            fprintf(stderr, "cannot start thread %u\n", i);
            exit(1);
        }
    }
    for (unsigned i = 0; i < THREADS; i++) {
        pthread_join(threads[i], NULL);
        CHECK_EQ(workers[i].failures, 0);
    }
    pthread_barrier_destroy(&start);
}

int main(void) {
    /* No test_setup: the driver must not be loaded before the threads race. */
    RUN(threads_use_their_own_objects_concurrently);
    test_setup();
    check_current_test = "no_leaks";
    pinstage_emu_live now = live_now();
    size_t held = 1;
    pinstage_get_pinned_usage(&held, NULL);
    CHECK_EQ(held, 0);
    if (emu) {
        CHECK_EQ(now.streams, 0);
        CHECK_EQ(now.pinned_allocations, 0);
        CHECK_EQ(now.events, 0);
        CHECK_EQ(now.device_allocations, 1); /* test_setup's ballast */
    }
    pinstage_pool_shutdown();
    return test_finish();
}
