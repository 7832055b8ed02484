/* SPDX-License-Identifier: MIT */
/* The worker pool: every piece of every job runs exactly once, from many
 * threads at once; start, resize, idle, shutdown; an idle pool uses no CPU. */
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "check.h"
#include "pool.h"

#define JOBS 20000

static _Atomic unsigned runs[PS_POOL_MAX_PIECES];

static void count_piece(void *arg, unsigned i) {
    unsigned *seen = arg;
    seen[i]++; /* a plain write: two threads on one piece would race (TSan) */
    atomic_fetch_add_explicit(&runs[i], 1, memory_order_relaxed);
}

static void every_piece_runs_exactly_once(void) {
    ps_pool *pool = ps_pool_default();
    unsigned seen[PS_POOL_MAX_PIECES];
    unsigned counts[] = {1, 2, 3, 7, 16, 17, 64, PS_POOL_MAX_PIECES};
    for (int j = 0; j < JOBS; j++) {
        unsigned count = counts[j % 8];
        memset(seen, 0, sizeof seen);
        ps_pool_run(pool, count, count_piece, seen);
        for (unsigned i = 0; i < count; i++)
            if (seen[i] != 1) {
                CHECK_EQ(seen[i], 1);
                return;
            }
    }
}

/* Posted jobs let the caller work meanwhile; the join sees every write. */
static void post_then_join(void) {
    ps_pool *pool = ps_pool_default();
    unsigned seen[PS_POOL_MAX_PIECES];
    for (int j = 0; j < 2000; j++) {
        ps_job job;
        memset(seen, 0, sizeof seen);
        ps_pool_post(pool, &job, 40, count_piece, seen);
        ps_pool_join(pool, &job);
        for (unsigned i = 0; i < 40; i++) CHECK_EQ(seen[i], 1);
    }
}

typedef struct {
    int id;
    int failures;
} hammer_arg;

/* Distinct buffers and streams on many threads at once share the pool (a
 * thread that finds it busy copies alone): every byte must arrive. */
static void *hammer(void *p) {
    hammer_arg *a = p;
    size_t bytes = (size_t)(150 + a->id * 37) * 1024;
    pinstage_buffer *buf;
    pinstage_devbuf *d;
    CUstream stream;
    unsigned char *src = malloc(bytes), *back = malloc(bytes);
    if (pinstage_context_init(0) || pinstage_buffer_create(&buf) || pinstage_devbuf_alloc_u8(&d, bytes) ||
        pinstage_stream_create(&stream, PINSTAGE_STREAM_NON_BLOCKING)) {
        a->failures++;
        return NULL;
    }
    pinstage_buffer_set_auto_stage_max_bytes(buf, SIZE_MAX);
    for (int round = 0; round < 40; round++) {
        fill_pattern(src, bytes, (unsigned)(a->id * 1000 + round));
        memset(back, 0, bytes);
        if (pinstage_buffer_upload(buf, d, src, bytes, stream) ||
            pinstage_buffer_download(buf, back, bytes, d, stream) || memcmp(src, back, bytes))
            a->failures++;
    }
    pinstage_stream_destroy(stream);
    pinstage_devbuf_free(d);
    pinstage_buffer_free(buf);
    pinstage_context_release(0);
    free(src);
    free(back);
    return NULL;
}

static void threads_share_the_pool(void) {
    enum { THREADS = 6 };
    pthread_t t[THREADS];
    hammer_arg args[THREADS];
    for (int i = 0; i < THREADS; i++) {
        args[i] = (hammer_arg){i, 0};
        pthread_create(&t[i], NULL, hammer, &args[i]);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        CHECK_EQ(args[i].failures, 0);
    }
}

static void engine_transfer(void) {
    size_t bytes = 512 * 1024;
    pinstage_buffer *buf;
    pinstage_devbuf *d;
    unsigned char *src = malloc(bytes), *back = malloc(bytes);
    REQUIRE_OK(pinstage_buffer_create(&buf));
    REQUIRE_OK(pinstage_devbuf_alloc_u8(&d, bytes));
    pinstage_profile *p;
    REQUIRE_OK(pinstage_profile_fixed(&p, PINSTAGE_ROUTE_ENGINE, 64 * 1024, 0));
    REQUIRE_OK(pinstage_buffer_set_profile(buf, p));
    pinstage_profile_free(p);
    fill_pattern(src, bytes, 77);
    CHECK_OK(pinstage_buffer_upload(buf, d, src, bytes, NULL));
    CHECK_OK(pinstage_buffer_download(buf, back, bytes, d, NULL));
    CHECK(memcmp(src, back, bytes) == 0);
    pinstage_devbuf_free(d);
    pinstage_buffer_free(buf);
    free(src);
    free(back);
}

static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

static void start_resize_idle_shutdown(void) {
    pinstage_pool_info info;
    CHECK_OK(pinstage_pool_set_threads(3));
    pinstage_pool_get_info(&info);
    CHECK_EQ(info.workers, 3);
    CHECK_EQ(info.running, 0); /* started on first need */
    engine_transfer();
    pinstage_pool_get_info(&info);
    CHECK_EQ(info.running, 3);

    /* Idle: after the spin, every worker parks and the process uses no CPU. */
    pinstage_pool_set_spin_us(1000);
    pinstage_pool_get_info(&info);
    CHECK_EQ(info.spin_us, 1000);
    engine_transfer();
    sleep_ms(100);
    pinstage_pool_get_info(&info);
    CHECK_EQ(info.parked, 3);
    double cpu = cpu_seconds();
    sleep_ms(300);
    double used = cpu_seconds() - cpu;
    printf("#   cpu used while idle for 300 ms: %.4f s\n", used);
    CHECK(used < 0.02);

    /* Resize: the workers stop now and the new number starts on next use. */
    CHECK_OK(pinstage_pool_set_threads(1));
    pinstage_pool_get_info(&info);
    CHECK_EQ(info.running, 0);
    CHECK_EQ(info.workers, 1);
    engine_transfer();
    pinstage_pool_get_info(&info);
    CHECK_EQ(info.running, 1);

    /* Zero workers: the caller copies alone. */
    CHECK_OK(pinstage_pool_set_threads(0));
    engine_transfer();
    pinstage_pool_get_info(&info);
    CHECK_EQ(info.running, 0);

    CHECK_STATUS(pinstage_pool_set_threads(256), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_MESSAGE("at most 255");

    /* Shutdown joins the workers; the next transfer starts them again. */
    CHECK_OK(pinstage_pool_set_threads(PINSTAGE_POOL_AUTO));
    engine_transfer();
    pinstage_pool_shutdown();
    pinstage_pool_get_info(&info);
    CHECK_EQ(info.running, 0);
    engine_transfer();
    pinstage_pool_get_info(&info);
    CHECK_EQ(info.running, info.workers);
    pinstage_pool_set_spin_us(200);
}

int main(void) {
    test_setup();
    pinstage_emu_live before = live_now();
    RUN(every_piece_runs_exactly_once);
    RUN(post_then_join);
    RUN(threads_share_the_pool);
    RUN(start_resize_idle_shutdown);
    check_current_test = "no_leaks";
    CHECK_NO_LEAK(before);
    return test_finish();
}
