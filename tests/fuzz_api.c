/* SPDX-License-Identifier: MIT */
/* A libFuzzer target: input bytes become a sequence of API calls with
 * arguments, bad ones and injected driver faults included, run on the
 * emulated driver and checked against a small reference model (what each
 * device buffer holds, the transfer counters, the capacity). A mismatch,
 * a leak or a crash aborts.
 *
 * Built two ways: with -fsanitize=fuzzer (PINSTAGE_FUZZ=ON, clang) for
 * fuzzing, and with a main() of its own (FUZZ_REPLAY) that runs every file
 * of the committed corpus, which ctest does without libFuzzer. */
#include <dirent.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pinstage.h"
#include "pinstage_emu.h"

#define DEVS 2
#define MAX_BYTES (320u * 1024) /* rarely: most inputs move a few KiB, so fuzzing stays fast */

typedef struct {
    int (*fail)(const char *, unsigned long, int, int);
    void (*clear_faults)(void);
    void (*get_live)(pinstage_emu_live *);
} emu_api;

static emu_api emu;
static CUstream stream;

static void die(const char *what, int line) {
    fprintf(stderr, "fuzz_api: line %d: %s (last message: %s)\n", line, what, pinstage_last_error_message());
    abort();
}
#define ASSERT(cond)                       \
    do {                                   \
        if (!(cond)) die(#cond, __LINE__); \
    } while (0)

/* Input bytes, read from the front; zeros once they run out. */
typedef struct {
    const uint8_t *p;
    size_t n;
} input;

static unsigned take(input *in) {
    if (!in->n) return 0;
    in->n--;
    return *in->p++;
}

static size_t take_size(input *in) {
    static const size_t sizes[] = {1, 3, 64, 4096, 4097, 8192, 16384, 30000, 65536, 65537};
    unsigned b = take(in);
    if (b >= 250) return b == 255 ? MAX_BYTES : 150528 + (b - 250) * 4099; /* the engine's sizes */
    return b < 200 ? sizes[b % 10] : 1 + (b * 977u) % 65536;
}

/* A pattern that depends on the seed and the position, 8 bytes at a time. */
static void pattern(unsigned char *p, size_t n, unsigned seed) {
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        memcpy(p + i, &x, 8);
    }
    for (; i < n; i++) p[i] = (unsigned char)(seed + i);
}

/* The model: per device buffer its size, what it holds (known or not). */
typedef struct {
    pinstage_devbuf *dev;
    size_t bytes;
    unsigned char *expect; /* NULL: unknown (a failed upload may have landed in part) */
} model_dev;

typedef struct {
    pinstage_buffer *buf;
    pinstage_ring *ring;
    model_dev d[DEVS];
    pinstage_stats stats;     /* what the counters must say */
    unsigned char *host, *back;
    int fault_armed;          /* the next operation may fail */
} model;

static const char *const fault_entries[] = {"cuMemAllocHost", "cuMemcpyHtoDAsync", "cuMemcpyDtoHAsync",
                                            "cuEventRecord",  "cuEventQuery",      "cuEventCreate",
                                            "cuMemFreeHost",  "cuMemcpyDtoH",      "cuStreamWaitEvent",
                                            "cuPointerGetAttributes"};
static const int fault_codes[] = {1, 2, 700, 999};

static void fill_seed(void *dst, size_t n, void *user) { pattern(dst, n, *(unsigned *)user); }

static void new_dev(model *m, int i, size_t bytes) {
    if (m->d[i].dev) ASSERT(pinstage_devbuf_free(m->d[i].dev) == PINSTAGE_SUCCESS);
    free(m->d[i].expect);
    m->d[i].bytes = bytes;
    m->d[i].expect = NULL; /* fresh device memory: not modelled until written */
    ASSERT(pinstage_devbuf_alloc_u8(&m->d[i].dev, bytes) == PINSTAGE_SUCCESS);
}

/* After an upload of the pattern `seed`: refused for a bad length, done
 * unless a fault was armed; the model then holds the pattern, or, after a
 * failure, does not know (a chunked upload may have landed in part). */
static void after_upload(model_dev *d, pinstage_status s, int bad, int armed, unsigned seed) {
    if (bad) ASSERT(s == PINSTAGE_ERROR_INVALID_VALUE);
    if (!bad && !armed) ASSERT(s == PINSTAGE_SUCCESS);
    if (!s) {
        if (!d->expect) d->expect = malloc(d->bytes);
        pattern(d->expect, d->bytes, seed);
    } else if (!bad) {
        free(d->expect);
        d->expect = NULL;
    }
}

/* After a call: counters the model predicts, capacity never above what was
 * asked for at most, a failure only with an armed fault or bad input. */
static void check_stats(model *m, pinstage_status s, int expected_ok) {
    pinstage_stats st;
    pinstage_buffer_stats(m->buf, &st);
    if (!s) {
        ASSERT(st.staged_transfers + st.pageable_transfers + st.pinned_host_transfers ==
               m->stats.staged_transfers + m->stats.pageable_transfers + m->stats.pinned_host_transfers +
                   (uint64_t)expected_ok);
    } else {
        ASSERT(st.staged_transfers == m->stats.staged_transfers);
        ASSERT(st.pageable_transfers == m->stats.pageable_transfers);
        ASSERT(st.pinned_host_transfers == m->stats.pinned_host_transfers);
        ASSERT(st.bytes_uploaded == m->stats.bytes_uploaded);
        ASSERT(st.bytes_downloaded == m->stats.bytes_downloaded);
        ASSERT(st.pinned_allocations == m->stats.pinned_allocations);
    }
    m->stats = st;
    ASSERT(pinstage_buffer_capacity(m->buf) % PINSTAGE_CAPACITY_GRANULARITY == 0);
}

static void run_ops(model *m, input *in) {
    unsigned seed = 1;
    while (in->n) {
        unsigned op = take(in) % 13;
        int i = (int)(take(in) % DEVS);
        model_dev *d = &m->d[i];
        size_t n = d->bytes;
        int bad = take(in) % 8 == 0; /* a wrong length */
        if (bad) n = take(in) % 2 ? n + 1 : 0;
        pinstage_status s = PINSTAGE_SUCCESS;
        seed++;
        int armed = m->fault_armed;
        m->fault_armed = 0;
        switch (op) {
        case 0: /* upload */
        case 1: /* upload_with */
            pattern(m->host, d->bytes, seed);
            s = op == 0 ? pinstage_buffer_upload_u8(m->buf, d->dev, m->host, n, stream)
                        : pinstage_buffer_upload_with(m->buf, d->dev, n, stream, fill_seed, &seed);
            after_upload(d, s, bad, armed, seed);
            check_stats(m, s, 1);
            break;
        case 2: /* download */
        case 3: { /* download_into */
            const void *view = NULL;
            memset(m->back, 0xcd, d->bytes);
            s = op == 2 ? pinstage_buffer_download_u8(m->buf, m->back, n, d->dev, stream)
                        : pinstage_buffer_download_into(m->buf, d->dev, n, stream, &view);
            if (bad) ASSERT(s == PINSTAGE_ERROR_INVALID_VALUE);
            if (!bad && !armed) ASSERT(s == PINSTAGE_SUCCESS);
            if (!s && d->expect) ASSERT(memcmp(op == 2 ? (const void *)m->back : view, d->expect, d->bytes) == 0);
            if (s && op == 3) ASSERT(view == NULL);
            check_stats(m, s, 1);
            break;
        }
        case 4: { /* reserve */
            size_t before = pinstage_buffer_capacity(m->buf);
            size_t want = take(in) % 16 == 0 ? (take(in) % 2 ? 0 : SIZE_MAX) : take_size(in);
            s = pinstage_buffer_reserve(m->buf, want);
            if (want == 0 || want == SIZE_MAX) ASSERT(s == PINSTAGE_ERROR_INVALID_VALUE);
            else if (!armed) ASSERT(s == PINSTAGE_SUCCESS);
            if (!s) ASSERT(pinstage_buffer_capacity(m->buf) >= want && pinstage_buffer_capacity(m->buf) >= before);
            if (s == PINSTAGE_ERROR_INVALID_VALUE) ASSERT(pinstage_buffer_capacity(m->buf) == before);
            check_stats(m, s, 0);
            break;
        }
        case 5: /* shrink_to_fit */
            s = pinstage_buffer_shrink_to_fit(m->buf);
            if (!armed) ASSERT(s == PINSTAGE_SUCCESS);
            ASSERT(pinstage_buffer_capacity(m->buf) == 0);
            check_stats(m, s, 0);
            break;
        case 6: { /* threshold */
            static const size_t thresholds[] = {0, 4096, 200000, SIZE_MAX, PINSTAGE_AUTO_STAGE_PROFILE};
            pinstage_buffer_set_auto_stage_max_bytes(m->buf, thresholds[take(in) % 5]);
            m->fault_armed = armed;
            break;
        }
        case 7: /* a driver fault for the next operation */
            emu.fail(fault_entries[take(in) % 10], 1 + take(in) % 3, fault_codes[take(in) % 4], take(in) % 4 == 0);
            m->fault_armed = 1;
            continue; /* the fault stays armed */
        case 8: /* a new device buffer */
            new_dev(m, i, take_size(in));
            m->fault_armed = armed;
            break;
        case 9: { /* the ring: upload, then download and compare */
            pinstage_ticket t = 0;
            const void *view = NULL;
            pattern(m->host, d->bytes, seed);
            s = pinstage_ring_upload_async(m->ring, d->dev, m->host, n, stream);
            after_upload(d, s, bad, armed, seed);
            if (bad) break;
            pinstage_status r = pinstage_ring_download_async(m->ring, d->dev, d->bytes, stream, &t);
            if (!armed) ASSERT(r == PINSTAGE_SUCCESS);
            if (r) {
                ASSERT(t == 0);
                break;
            }
            r = pinstage_ring_wait(m->ring, t, &view);
            if (!armed) ASSERT(r == PINSTAGE_SUCCESS);
            if (!r && d->expect) ASSERT(memcmp(view, d->expect, d->bytes) == 0);
            if (!r) ASSERT(pinstage_ring_release(m->ring, t) == PINSTAGE_SUCCESS);
            else ASSERT(pinstage_ring_release(m->ring, t) == PINSTAGE_ERROR_INVALID_VALUE);
            break;
        }
        case 10: { /* bad pointers: refused, nothing changes */
            pinstage_stats before, after;
            pinstage_buffer_stats(m->buf, &before);
            size_t capacity = pinstage_buffer_capacity(m->buf);
            ASSERT(pinstage_buffer_upload_u8(m->buf, d->dev, NULL, d->bytes, stream) == PINSTAGE_ERROR_INVALID_VALUE);
            ASSERT(pinstage_buffer_download_u8(m->buf, NULL, d->bytes, d->dev, stream) == PINSTAGE_ERROR_INVALID_VALUE);
            ASSERT(pinstage_buffer_download_into(m->buf, d->dev, d->bytes, stream, NULL) == PINSTAGE_ERROR_INVALID_VALUE);
            ASSERT(pinstage_buffer_upload_with(m->buf, d->dev, d->bytes, stream, NULL, NULL) ==
                   PINSTAGE_ERROR_INVALID_VALUE);
            ASSERT(pinstage_ring_wait(m->ring, 0, NULL) == PINSTAGE_ERROR_INVALID_VALUE);
            pinstage_buffer_stats(m->buf, &after);
            ASSERT(memcmp(&before, &after, sizeof before) == 0);
            ASSERT(pinstage_buffer_capacity(m->buf) == capacity);
            m->fault_armed = armed;
            break;
        }
        case 11: /* the driver's plain path writes a device buffer */
            pattern(m->host, d->bytes, seed);
            s = pinstage_devbuf_copy_from_host(d->dev, m->host, d->bytes);
            if (!armed) ASSERT(s == PINSTAGE_SUCCESS);
            if (!s) {
                if (!d->expect) d->expect = malloc(d->bytes);
                memcpy(d->expect, m->host, d->bytes);
            } else {
                free(d->expect), d->expect = NULL;
            }
            break;
        case 12: { /* a new buffer, the old one freed; unbound, bound, or bound with its memory placed */
            s = pinstage_buffer_free(m->buf);
            if (!armed) ASSERT(s == PINSTAGE_SUCCESS);
            ASSERT(pinstage_buffer_create(&m->buf) == PINSTAGE_SUCCESS);
            memset(&m->stats, 0, sizeof m->stats);
            unsigned how = take(in) % 3;
            pinstage_binding b = {0, NULL, how == 1 ? PINSTAGE_NUMA_DEVICE : 0};
            if (how) ASSERT(pinstage_buffer_bind(m->buf, &b) == PINSTAGE_SUCCESS);
            break;
        }
        }
        emu.clear_faults();
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    setenv("PINSTAGE_DRIVER", PINSTAGE_FUZZ_EMU_PATH, 0); /* unless named (a moved build) */
    setenv("PINSTAGE_EMU_INLINE", "1", 1);
    pinstage_driver_info info;
    if (pinstage_driver_get_info(&info) || !info.emulated) die("the emulated driver did not load", __LINE__);
    void *h = dlopen(info.path, RTLD_NOW | RTLD_NOLOAD);
    *(void **)&emu.fail = dlsym(h, "pinstage_emu_fail");
    *(void **)&emu.clear_faults = dlsym(h, "pinstage_emu_clear_faults");
    *(void **)&emu.get_live = dlsym(h, "pinstage_emu_get_live");
    if (!emu.fail || !emu.clear_faults || !emu.get_live) die("the emulator's instruments are missing", __LINE__);
    if (pinstage_context_init(0) || pinstage_stream_create(&stream, PINSTAGE_STREAM_NON_BLOCKING))
        die("no context", __LINE__);
    pinstage_pool_set_threads(0); /* one thread: reproducible, and fast to start */
    pinstage_set_adaptive(0);     /* the model predicts each transfer's route from the profile */
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    input in = {data, size};
    model m;
    pinstage_emu_live before, after;
    memset(&m, 0, sizeof m);
    emu.get_live(&before);
    static unsigned char host[MAX_BYTES + 1], back[MAX_BYTES + 1];
    m.host = host;
    m.back = back;
    ASSERT(pinstage_buffer_create(&m.buf) == PINSTAGE_SUCCESS);
    ASSERT(pinstage_ring_create(&m.ring, 1 + take(&in) % 3, 0) == PINSTAGE_SUCCESS);
    for (int i = 0; i < DEVS; i++) new_dev(&m, i, take_size(&in));
    run_ops(&m, &in);
    emu.clear_faults();
    ASSERT(pinstage_ring_free(m.ring) == PINSTAGE_SUCCESS);
    ASSERT(pinstage_buffer_free(m.buf) == PINSTAGE_SUCCESS);
    for (int i = 0; i < DEVS; i++) {
        ASSERT(pinstage_devbuf_free(m.d[i].dev) == PINSTAGE_SUCCESS);
        free(m.d[i].expect);
    }
    ASSERT(pinstage_pinned_retry_releases() == PINSTAGE_SUCCESS);
    emu.get_live(&after);
    ASSERT(after.pinned_allocations == before.pinned_allocations);
    ASSERT(after.registered_ranges == before.registered_ranges);
    ASSERT(after.device_allocations == before.device_allocations);
    ASSERT(after.events == before.events);
    ASSERT(after.streams == before.streams);
    return 0;
}

#ifdef FUZZ_REPLAY
/* Replays files or directories of inputs: the committed corpus, in ctest. */
static int replay(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    static uint8_t buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    LLVMFuzzerTestOneInput(buf, n);
    return 1;
}

int main(int argc, char **argv) {
    LLVMFuzzerInitialize(&argc, &argv);
    int count = 0;
    for (int a = 1; a < argc; a++) {
        DIR *dir = opendir(argv[a]);
        if (!dir) {
            count += replay(argv[a]);
            continue;
        }
        for (struct dirent *e; (e = readdir(dir));) {
            if (e->d_name[0] == '.') continue;
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[a], e->d_name);
            count += replay(path);
        }
        closedir(dir);
    }
    printf("fuzz_api: %d inputs replayed, no findings\n", count);
    return count ? 0 : 1;
}
#endif
