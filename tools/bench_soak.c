/* SPDX-License-Identifier: MIT */
/* pinstage-bench --soak N: N mixed transfers of varying shapes and
 * directions on several threads, each with its own buffer, ring and stream,
 * every byte verified; errors, mismatches, RSS and pinned bytes reported at
 * the first 10% of the run and at its end, so a slow leak shows as growth.
 *
 * Each step moves one shape through one API, out and back, and compares:
 * upload + download, upload_with + download_into, or the ring's
 * upload_async + download_async; a step counts two transfers. The bytes come
 * from a random pool at a varying offset, so no two steps move the same. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

#define POOL_BYTES ((size_t)8 << 20)

typedef struct {
    unsigned id;
    int device;
    pthread_barrier_t *finished; /* all steps done: measured before teardown */
    unsigned long steps;    /* this thread's share */
    unsigned long done;     /* steps finished, read by the reporter (atomic) */
    unsigned long errors, mismatches;
    uint64_t bytes;
    const unsigned char *pool;
    char first_error[256];
} soaker;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static long rss_kib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld", &kib) == 1) break;
    if (f) fclose(f);
    return kib;
}

static uint64_t next_random(uint64_t *x) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* Mostly the shapes a frame pipeline moves, now and then a large one. */
static size_t pick_bytes(uint64_t *x) {
    static const size_t small[] = {4096, 12288, 65536, 65537, 150528, 196608, 200000, 262144};
    unsigned r = (unsigned)(next_random(x) % 100);
    if (r < 85) return small[next_random(x) % 8];
    if (r < 98) return (size_t)1 << 20;
    return 640 * 640 * 3 * 4;
}

typedef struct {
    const unsigned char *src;
} pool_fill;

static void fill_from(void *dst, size_t n, void *user) { memcpy(dst, ((pool_fill *)user)->src, n); }

static void note_error(soaker *s, const char *what, pinstage_status st) {
    if (!s->errors++)
        snprintf(s->first_error, sizeof s->first_error, "%s: %s: %s", what, pinstage_status_name(st),
                 pinstage_last_error_message());
}

static void *soak_thread(void *arg) {
    soaker *s = arg;
    uint64_t x = 0x9e3779b97f4a7c15ull * (s->id + 1);
    CUstream stream = NULL;
    pinstage_buffer *buf = NULL;
    pinstage_ring *ring = NULL;
    pinstage_devbuf *dev[8] = {0};
    size_t dev_bytes[8] = {0};
    unsigned char *back = malloc(640 * 640 * 3 * 4);
    pinstage_status st;
    if ((st = pinstage_context_init(s->device)) || (st = pinstage_stream_create(&stream, PINSTAGE_STREAM_NON_BLOCKING)) ||
        (st = pinstage_buffer_create(&buf)) || (st = pinstage_ring_create(&ring, 3, 0)) || !back) {
        note_error(s, "setup", st ? st : PINSTAGE_ERROR_OUT_OF_MEMORY);
        free(back);
        pthread_barrier_wait(s->finished);
        pthread_barrier_wait(s->finished);
        return NULL;
    }
    for (unsigned long k = 0; k < s->steps; k++) {
        size_t bytes = pick_bytes(&x);
        unsigned slot = (unsigned)(next_random(&x) % 8);
        if (dev_bytes[slot] != bytes) {
            /* A device buffer per shape, reallocated as shapes change. */
            pinstage_devbuf_free(dev[slot]);
            dev[slot] = NULL;
            if ((st = pinstage_devbuf_alloc_u8(&dev[slot], bytes))) {
                note_error(s, "devbuf_alloc", st);
                dev_bytes[slot] = 0;
                continue;
            }
            dev_bytes[slot] = bytes;
        }
        const unsigned char *src = s->pool + (next_random(&x) % (POOL_BYTES - bytes));
        const void *got = back;
        unsigned api = (unsigned)(next_random(&x) % 3);
        if (api == 0) {
            if ((st = pinstage_buffer_upload_u8(buf, dev[slot], src, bytes, stream))) {
                note_error(s, "upload", st);
                continue;
            }
            if ((st = pinstage_buffer_download_u8(buf, back, bytes, dev[slot], stream))) {
                note_error(s, "download", st);
                continue;
            }
        } else if (api == 1) {
            pool_fill f = {src};
            if ((st = pinstage_buffer_upload_with(buf, dev[slot], bytes, stream, fill_from, &f))) {
                note_error(s, "upload_with", st);
                continue;
            }
            if ((st = pinstage_buffer_download_into(buf, dev[slot], bytes, stream, &got))) {
                note_error(s, "download_into", st);
                continue;
            }
        } else {
            pinstage_ticket t;
            if ((st = pinstage_ring_upload_async(ring, dev[slot], src, bytes, stream))) {
                note_error(s, "ring upload_async", st);
                continue;
            }
            if ((st = pinstage_ring_download_async(ring, dev[slot], bytes, stream, &t)) ||
                (st = pinstage_ring_wait(ring, t, &got))) {
                note_error(s, "ring download", st);
                continue;
            }
            pinstage_ring_release(ring, t);
        }
        if (memcmp(got, src, bytes)) s->mismatches++;
        s->bytes += 2 * bytes;
        __atomic_store_n(&s->done, k + 1, __ATOMIC_RELAXED);
    }
    pthread_barrier_wait(s->finished); /* the reporter measures now */
    pthread_barrier_wait(s->finished);
    for (int i = 0; i < 8; i++) pinstage_devbuf_free(dev[i]);
    if ((st = pinstage_ring_free(ring))) note_error(s, "ring_free", st);
    if ((st = pinstage_buffer_free(buf))) note_error(s, "buffer_free", st);
    pinstage_stream_destroy(stream);
    pinstage_context_release(s->device);
    free(back);
    return NULL;
}

int bench_soak(unsigned long transfers, unsigned threads, int device, const bench_context *ctx, FILE *text,
               FILE *json) {
    unsigned char *pool = malloc(POOL_BYTES);
    soaker *s = calloc(threads, sizeof *s);
    pthread_t *tid = calloc(threads, sizeof *tid);
    if (!pool || !s || !tid) {
        fprintf(stderr, "pinstage-bench: out of host memory\n");
        return 2;
    }
    uint64_t x = 12345;
    for (size_t i = 0; i < POOL_BYTES; i += 8) {
        uint64_t v = next_random(&x);
        memcpy(pool + i, &v, 8);
    }
    unsigned long steps = (transfers + 1) / 2; /* each step is two transfers */
    double start = now_s();
    long rss_start = 0, rss_end;
    size_t pinned_start = 0, pinned_end = 0, pinned_after = 0;
    pthread_barrier_t finished;
    pthread_barrier_init(&finished, NULL, threads + 1);
    for (unsigned i = 0; i < threads; i++) {
        s[i] = (soaker){.id = i, .device = device, .finished = &finished,
                        .steps = steps / threads + (i < steps % threads), .pool = pool};
        pthread_create(&tid[i], NULL, soak_thread, &s[i]);
    }
    /* The first 10%: the baseline that the end is compared with. */
    for (;;) {
        unsigned long done = 0;
        for (unsigned i = 0; i < threads; i++) done += __atomic_load_n(&s[i].done, __ATOMIC_RELAXED);
        if (done * 10 >= steps || now_s() - start > 3600) break;
        struct timespec nap = {0, 2000000};
        nanosleep(&nap, NULL);
    }
    rss_start = rss_kib();
    pinstage_get_pinned_usage(&pinned_start, NULL);
    pthread_barrier_wait(&finished); /* every step done, nothing torn down yet */
    double seconds = now_s() - start;
    rss_end = rss_kib();
    pinstage_get_pinned_usage(&pinned_end, NULL);
    pthread_barrier_wait(&finished);
    for (unsigned i = 0; i < threads; i++) pthread_join(tid[i], NULL);
    pthread_barrier_destroy(&finished);
    pinstage_get_pinned_usage(&pinned_after, NULL);
    unsigned long errors = 0, mismatches = 0;
    uint64_t bytes = 0;
    const char *first = "";
    for (unsigned i = 0; i < threads; i++) {
        errors += s[i].errors;
        mismatches += s[i].mismatches;
        bytes += s[i].bytes;
        if (!*first && s[i].errors) first = s[i].first_error;
    }
    unsigned long moved = 2 * steps;
    if (text) {
        bench_text_context(text, ctx);
        fprintf(text, "# soak: %lu transfers (%lu verified round trips) on %u threads, each with its own buffer, "
                      "ring and stream\n", moved, steps, threads);
        fprintf(text, "transfers %lu, bytes %llu, seconds %.1f, errors %lu, mismatches %lu\n", moved,
                (unsigned long long)bytes, seconds, errors, mismatches);
        fprintf(text, "rss at 10%%: %ld KiB, at the end: %ld KiB; pinned at 10%%: %zu bytes, at the end: %zu bytes, "
                      "after every buffer and ring was freed: %zu bytes\n",
                rss_start, rss_end, pinned_start, pinned_end, pinned_after);
        if (*first) fprintf(text, "first error: %s\n", first);
    }
    if (json) {
        fprintf(json, "{\n  \"schema\": \"pinstage-bench-soak/1\",\n");
        bench_json_context(json, ctx, "mixed shapes, directions and APIs on several threads; every byte compared");
        fprintf(json, ",\n  \"transfers\": %lu,\n  \"round_trips\": %lu,\n  \"threads\": %u,\n  \"bytes\": %llu,\n"
                      "  \"seconds\": %.3f,\n  \"errors\": %lu,\n  \"mismatches\": %lu,\n"
                      "  \"rss_kib_at_10_percent\": %ld,\n  \"rss_kib_at_end\": %ld,\n"
                      "  \"pinned_bytes_at_10_percent\": %zu,\n  \"pinned_bytes_at_end\": %zu,\n"
                      "  \"pinned_bytes_after_free\": %zu,\n  \"first_error\": ",
                moved, steps, threads, (unsigned long long)bytes, seconds, errors, mismatches, rss_start, rss_end,
                pinned_start, pinned_end, pinned_after);
        bench_json_string(json, first);
        fprintf(json, "\n}\n");
    }
    free(pool);
    free(s);
    free(tid);
    return errors || mismatches || pinned_after ? 1 : 0;
}
