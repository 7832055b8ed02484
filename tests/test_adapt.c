/* SPDX-License-Identifier: MIT */
/* Adapting the route to load: with the emulator's routes made slow in turn
 * (the driver's staging of pageable memory, then DMA through page-locked
 * memory, then neither), upload and download move to the faster route and
 * back, every byte arriving; probes and overrides are counted; switched off
 * (process-wide, per buffer, a fixed profile, a threshold) nothing moves;
 * several threads adapt at once. */
#include <pthread.h>
#include <time.h>

#include "adapt.h"
#include "check.h"

#define K 1024u
#define M (1024u * 1024u)

static CUstream stream;

/* One upload and one download of `bytes`, checked. */
static void round_trip(pinstage_buffer *buf, pinstage_devbuf *d, unsigned char *src, unsigned char *back,
                       size_t bytes, unsigned seed) {
    fill_pattern(src, bytes, seed);
    CHECK_OK(pinstage_buffer_upload(buf, d, src, bytes, stream));
    memset(back, 0, bytes);
    CHECK_OK(pinstage_buffer_download(buf, back, bytes, d, stream));
    CHECK_EQ(pattern_mismatch(back, bytes, seed), -1);
}

typedef struct {
    pinstage_buffer *buf;
    pinstage_devbuf *d;
    unsigned char *src, *back;
    size_t bytes;
    unsigned seed;
} rig;

static rig make_rig(size_t bytes) {
    rig r = {NULL, NULL, malloc(bytes), malloc(bytes), bytes, 1};
    REQUIRE_OK(pinstage_buffer_create(&r.buf));
    REQUIRE_OK(pinstage_devbuf_alloc_u8(&r.d, bytes));
    return r;
}

static void free_rig(rig *r) {
    pinstage_buffer_free(r->buf);
    pinstage_devbuf_free(r->d);
    free(r->src);
    free(r->back);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Round trips until both directions take `side`; -1 if that takes more
 * than `seconds` (a probe comes at least every 250 ms of a busy class, and
 * three that win in a row turn the choice). */
static int settle(rig *r, int side, double seconds) {
    pinstage_route_info up, down;
    double give_up = now_s() + seconds;
    for (int i = 0; now_s() < give_up; i++) {
        round_trip(r->buf, r->d, r->src, r->back, r->bytes, r->seed++);
        CHECK_OK(pinstage_route_get_info(PINSTAGE_H2D, r->bytes, &up));
        CHECK_OK(pinstage_route_get_info(PINSTAGE_D2H, r->bytes, &down));
        if (up.chosen == side && down.chosen == side) return i + 1;
    }
    printf("#   not settled: h2d chose %d (pageable %.0f us x%u, staging %.0f us x%u), "
           "d2h chose %d (pageable %.0f us x%u, staging %.0f us x%u)\n",
           up.chosen, up.pageable_us, up.pageable_samples, up.staging_us, up.staging_samples, down.chosen,
           down.pageable_us, down.pageable_samples, down.staging_us, down.staging_samples);
    return -1;
}

static void follows_the_faster_route_and_back(void) {
    if (!emu) {
        printf("#   skipped: needs the emulator to make a route slow\n");
        return;
    }
    pinstage_route_reset();
    /* The emulator's copies need a CPU: on a small machine spinning workers
     * would time the emulator, not the routes. */
    REQUIRE_OK(pinstage_pool_set_threads(0));
    rig r = make_rig(1 * M);
    pinstage_stats st;
    /* The driver's pageable path slow (30 ms a MiB; under ThreadSanitizer on
     * a busy machine a staged download took up to 55 ms, and at 10 ms a MiB
     * the pageable path won by chance): the profile's engine stays. */
    emu->set_host_rates(0.035, 0);
    int took = settle(&r, PINSTAGE_ADAPT_STAGING, 0.1);
    CHECK(took > 0);
    for (int i = 0; i < 40; i++) round_trip(r.buf, r.d, r.src, r.back, r.bytes, r.seed++);
    pinstage_buffer_stats(r.buf, &st);
    CHECK_EQ(st.route_overrides, 0);
    /* The pageable route was measured, and at 30 ms a probe it is probed
     * again only 32 probes' time (about a second) later: a few probes in
     * all, not one every 16th transfer. */
    CHECK(st.route_probes >= 1);
    CHECK(st.pageable_transfers == st.route_probes);
    pinstage_route_info info;
    CHECK_OK(pinstage_route_get_info(PINSTAGE_H2D, r.bytes, &info));
    CHECK(info.pageable_samples >= 1 && info.staging_samples >= 3);
    CHECK(info.pageable_us == 0 || info.pageable_us > info.staging_us);
    CHECK_EQ(info.adaptive, 1);
    printf("#   pageable slow: pageable %.0f us, staging %.0f us; %llu probes\n", info.pageable_us, info.staging_us,
           (unsigned long long)st.route_probes);

    /* DMA through page-locked memory slow: both directions move to the
     * pageable path within a few dozen transfers. Slow enough to stand out
     * under ThreadSanitizer too, where the emulator's own staging of a
     * pageable 1 MiB upload (malloc, memcpy, free) takes 15-21 ms: at 0.05
     * GB/s the two routes measured 26 and 28 ms and the choice wavered.
     * Each staged transfer then takes over 100 ms: up to 10 s to settle,
     * which a settled run never waits for. Then a probe of the staged route
     * comes every 4th transfer of a class at most (every 250 ms of a busy
     * class): 60 of the next 80 transfers take the pageable path, or a few
     * fewer where the choice wavers right after settling (57 in 3 of 9 runs
     * under ThreadSanitizer on 2 CPUs). The bug this guards against left 30. */
    emu->set_host_rates(0, 0.01);
    took = settle(&r, PINSTAGE_ADAPT_PAGEABLE, 10);
    CHECK(took > 0);
    printf("#   page-locked DMA slow: pageable after %d round trips\n", took);
    pinstage_stats before;
    pinstage_buffer_stats(r.buf, &before);
    for (int i = 0; i < 40; i++) round_trip(r.buf, r.d, r.src, r.back, r.bytes, r.seed++);
    pinstage_buffer_stats(r.buf, &st);
    printf("#   then 80 transfers: %llu overridden, %llu on the pageable path\n",
           (unsigned long long)(st.route_overrides - before.route_overrides),
           (unsigned long long)(st.pageable_transfers - before.pageable_transfers));
    CHECK(st.route_overrides - before.route_overrides >= 56);
    CHECK(st.pageable_transfers - before.pageable_transfers >= 56);
    CHECK_OK(pinstage_route_get_info(PINSTAGE_D2H, r.bytes, &info));
    printf("#   download: pageable %.0f us x%u, staging %.0f us x%u\n", info.pageable_us, info.pageable_samples,
           info.staging_us, info.staging_samples);
    CHECK(info.switches >= 1);
    CHECK_EQ(info.chosen, PINSTAGE_ADAPT_PAGEABLE);
    /* Probes of a route this slow come every 4th transfer of the class at
     * most, and under ThreadSanitizer on a loaded machine fewer than three
     * may be under 2 s old: then it has no estimate. */
    CHECK(info.staging_us == 0 || info.staging_us > info.pageable_us);

    /* Both fast again: back to the engine (the pageable path's staging cost
     * makes it the slower one). */
    emu->set_host_rates(0.035, 0);
    took = settle(&r, PINSTAGE_ADAPT_STAGING, 10);
    CHECK(took > 0);
    printf("#   page-locked DMA fast again: staging after %d round trips\n", took);
    CHECK_OK(pinstage_route_get_info(PINSTAGE_H2D, r.bytes, &info));
    CHECK(info.switches >= 2);
    emu->set_host_rates(0, 0);
    REQUIRE_OK(pinstage_pool_set_threads(PINSTAGE_POOL_AUTO));
    free_rig(&r);
}

/* Off: process-wide, per buffer, by a fixed profile or by a threshold, the
 * route is the profile's whatever the timings say. */
static void switched_off_follows_the_profile(void) {
    pinstage_route_reset();
    if (emu) emu->set_host_rates(0, 0.2); /* the profile's route slow */
    rig r = make_rig(512 * K);
    pinstage_stats st;

    pinstage_set_adaptive(0);
    for (int i = 0; i < 30; i++) round_trip(r.buf, r.d, r.src, r.back, r.bytes, r.seed++);
    pinstage_buffer_stats(r.buf, &st);
    CHECK_EQ(st.route_probes, 0);
    CHECK_EQ(st.route_overrides, 0);
    CHECK_EQ(st.pageable_transfers, 0);
    pinstage_route_info info;
    CHECK_OK(pinstage_route_get_info(PINSTAGE_H2D, r.bytes, &info));
    CHECK_EQ(info.adaptive, 0);
    CHECK_EQ(info.staging_samples, 0); /* nothing recorded either */
    pinstage_set_adaptive(1);

    pinstage_buffer_set_adaptive(r.buf, 0);
    for (int i = 0; i < 30; i++) round_trip(r.buf, r.d, r.src, r.back, r.bytes, r.seed++);
    pinstage_buffer_stats(r.buf, &st);
    CHECK_EQ(st.route_probes, 0);
    CHECK_EQ(st.pageable_transfers, 0);
    pinstage_buffer_set_adaptive(r.buf, 1);

    pinstage_profile *fixed;
    REQUIRE_OK(pinstage_profile_fixed(&fixed, PINSTAGE_ROUTE_ENGINE, 128 * K, 0));
    REQUIRE_OK(pinstage_buffer_set_profile(r.buf, fixed));
    pinstage_profile_free(fixed);
    for (int i = 0; i < 30; i++) round_trip(r.buf, r.d, r.src, r.back, r.bytes, r.seed++);
    pinstage_buffer_stats(r.buf, &st);
    CHECK_EQ(st.route_probes, 0);
    CHECK_EQ(st.pageable_transfers, 0);
    REQUIRE_OK(pinstage_buffer_set_profile(r.buf, NULL));

    pinstage_buffer_set_auto_stage_max_bytes(r.buf, SIZE_MAX);
    for (int i = 0; i < 30; i++) round_trip(r.buf, r.d, r.src, r.back, r.bytes, r.seed++);
    pinstage_buffer_stats(r.buf, &st);
    CHECK_EQ(st.route_probes, 0);
    CHECK_EQ(st.pageable_transfers, 0);
    CHECK_EQ(st.staged_transfers, 8 * 30);
    if (emu) emu->set_host_rates(0, 0);
    free_rig(&r);
}

static void route_info_checks_its_arguments(void) {
    pinstage_route_info info;
    unsigned long calls = driver_calls();
    CHECK_STATUS(pinstage_route_get_info(PINSTAGE_H2D, 4096, NULL), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_MESSAGE("info is NULL");
    CHECK_STATUS(pinstage_route_get_info(PINSTAGE_H2D, 0, &info), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_MESSAGE("bytes is 0");
    CHECK_STATUS(pinstage_route_get_info((pinstage_direction)7, 4096, &info), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_MESSAGE("dir");
    CHECK_EQ(driver_calls(), calls);
    pinstage_route_reset();
    CHECK_OK(pinstage_route_get_info(PINSTAGE_D2H, 4096, &info));
    CHECK_EQ(info.chosen, PINSTAGE_ADAPT_PROFILE);
    CHECK_EQ(info.pageable_samples + info.staging_samples, 0);
    pinstage_buffer_set_adaptive(NULL, 0); /* accepted, does nothing */
}

/* The estimates are the median of the fresh samples after every sample,
 * asked once or again, and none is left once the samples are older than
 * 2 s: the choice goes back to the profile's. */
static int near_us(double us, double ns_per_byte, size_t bytes) {
    double want = ns_per_byte * (double)bytes / 1e3;
    return want == 0 ? us == 0 : us > want * 0.999 && us < want * 1.001;
}

static void estimates_follow_each_sample_and_age_out(void) {
    const size_t bytes = 64 * K;
    static const double per_byte[] = {10, 30, 20, 40}, median[] = {0, 0, 20, 25};
    pinstage_route_info info;
    pinstage_route_reset();
    for (unsigned i = 0; i < 4; i++) {
        ps_adapt_record(PS_H2D, bytes, PINSTAGE_ROUTE_PAGEABLE, (uint64_t)(per_byte[i] * (double)bytes));
        for (int again = 0; again < 2; again++) {
            CHECK_OK(pinstage_route_get_info(PINSTAGE_H2D, bytes, &info));
            CHECK_EQ(info.pageable_samples, i + 1);
            CHECK(near_us(info.pageable_us, median[i], bytes));
        }
    }
    /* Through pinned memory, 5 ns per byte: faster, so it takes over. */
    ps_plan profiled = {PINSTAGE_ROUTE_PAGEABLE, 0, 0}, other = {PINSTAGE_ROUTE_STAGED, 0, 0};
    for (int i = 0; i < 3; i++) ps_adapt_record(PS_H2D, bytes, PINSTAGE_ROUTE_STAGED, 5 * bytes);
    ps_adapt_pick pick = ps_adapt_choose(PS_H2D, bytes, profiled, other);
    CHECK(pick.plan.route == PINSTAGE_ROUTE_STAGED && pick.overridden && !pick.probe);
    CHECK_OK(pinstage_route_get_info(PINSTAGE_H2D, bytes, &info));
    CHECK(near_us(info.staging_us, 5, bytes) && near_us(info.pageable_us, 25, bytes));
    struct timespec aged = {2, 100000000};
    nanosleep(&aged, NULL);
    CHECK_OK(pinstage_route_get_info(PINSTAGE_H2D, bytes, &info));
    CHECK_EQ(info.pageable_samples + info.staging_samples, 0);
    CHECK(info.pageable_us == 0 && info.staging_us == 0);
    pick = ps_adapt_choose(PS_H2D, bytes, profiled, other);
    CHECK(pick.plan.route == PINSTAGE_ROUTE_PAGEABLE && !pick.overridden && !pick.probe);
    pinstage_route_reset();
}

/* Every 8th transfer of the route taken is timed, and the first one 100 ms
 * after its route's last time; a probe always is. The checks that need the
 * calls to come within 100 ms are skipped (and say so) where this machine
 * is too slow for that. */
static void every_eighth_transfer_of_the_route_taken_is_timed(void) {
    const size_t bytes = 4 * K;
    ps_plan profiled = {PINSTAGE_ROUTE_PAGEABLE, 0, 0}, other = {PINSTAGE_ROUTE_STAGED, 0, 0};
    pinstage_route_reset();
    ps_adapt_pick pick = ps_adapt_choose(PS_H2D, bytes, profiled, other);
    CHECK(pick.timed && !pick.probe); /* no sample yet */
    /* Times of 4 and 8 ns: a probe's spacing (32 times its route's last
     * time) is then shorter than the choices between two probes take. */
    ps_adapt_record(PS_H2D, bytes, PINSTAGE_ROUTE_PAGEABLE, 4);
    /* The probes measure the other route 2x slower, so the choice holds. */
    double t0 = now_s();
    unsigned taken = 0, timed_taken = 0, probes = 0, off_beat = 0;
    for (int i = 0; i < 100; i++) {
        pick = ps_adapt_choose(PS_H2D, bytes, profiled, other);
        if (pick.probe) {
            probes++;
            CHECK(pick.timed && pick.plan.route == PINSTAGE_ROUTE_STAGED);
            ps_adapt_record(PS_H2D, bytes, PINSTAGE_ROUTE_STAGED, 8);
            continue;
        }
        CHECK_EQ(pick.plan.route, PINSTAGE_ROUTE_PAGEABLE);
        taken++;
        if (pick.timed) {
            timed_taken++;
            off_beat += taken % 8 != 0;
            ps_adapt_record(PS_H2D, bytes, PINSTAGE_ROUTE_PAGEABLE, 4);
        }
    }
    CHECK(probes >= 2);
    if (now_s() - t0 < 0.09) {
        CHECK_EQ(off_beat, 0);
        CHECK_EQ(timed_taken, taken / 8);
    } else {
        printf("#   skipped the count checks: 100 choices took over 90 ms\n");
    }
    /* A pause: the next transfer of the route taken is timed, however few
     * came since the last timed one. */
    do pick = ps_adapt_choose(PS_H2D, bytes, profiled, other);
    while (pick.probe || !pick.timed);
    ps_adapt_record(PS_H2D, bytes, PINSTAGE_ROUTE_PAGEABLE, 4);
    struct timespec pause = {0, 101000000};
    nanosleep(&pause, NULL);
    do pick = ps_adapt_choose(PS_H2D, bytes, profiled, other);
    while (pick.probe);
    CHECK(pick.timed);

    /* Through the buffer, with DMA through page-locked memory slow so the
     * pageable route stays: the first upload is timed, then every 8th of
     * those not probing. */
    if (!emu) return; /* the emulator makes the other route slow */
    emu->set_host_rates(0, 0.001); /* 4 ms per staged upload: a loaded machine's pageable path stays faster */
    rig r = make_rig(bytes);
    fill_pattern(r.src, bytes, 7);
    CHECK_OK(pinstage_buffer_upload(r.buf, r.d, r.src, bytes, stream)); /* the buffer's events made */
    pinstage_route_reset();
    t0 = now_s();
    for (int i = 0; i < 30; i++) CHECK_OK(pinstage_buffer_upload(r.buf, r.d, r.src, bytes, stream));
    double took = now_s() - t0;
    pinstage_route_info info;
    CHECK_OK(pinstage_route_get_info(PINSTAGE_H2D, bytes, &info));
    CHECK_EQ(info.chosen, PINSTAGE_ADAPT_PAGEABLE);
    CHECK(info.probes >= 1 && info.staging_samples <= info.probes);
    if (took < 0.09) {
        /* The first probe (the 4th upload: no estimate yet) took 4 ms; the
         * next waits 32 times that, but for the repeat of a probe that woke
         * the engine's threads, whose time is not kept. Without the spacing
         * every 4th upload probed. */
        CHECK(info.probes <= 2);
        CHECK_EQ(info.pageable_samples, 1 + (30 - info.probes - 1) / 8);
    } else
        printf("#   skipped the sample count: 30 uploads took %.1f ms\n", took * 1e3);
    CHECK_OK(pinstage_buffer_download(r.buf, r.back, bytes, r.d, stream));
    CHECK_EQ(pattern_mismatch(r.back, bytes, 7), -1);
    free_rig(&r);
    emu->set_host_rates(0, 0);
    pinstage_route_reset();
}

/* A probe that beats the route taken is repeated by the next transfer, and
 * three such in a row turn the choice, also when the probed route has no
 * estimate of its own (its earlier samples aged out, as they do when its
 * transfers are slow and probes of it come hundreds of ms apart). */
static void a_winning_probe_is_repeated_at_once(void) {
    const size_t bytes = 1 * M;
    ps_plan profiled = {PINSTAGE_ROUTE_STAGED, 0, 0}, other = {PINSTAGE_ROUTE_PAGEABLE, 0, 0};
    pinstage_route_reset();
    for (int i = 0; i < 3; i++) ps_adapt_record(PS_D2H, bytes, PINSTAGE_ROUTE_STAGED, 10 * bytes);
    ps_adapt_pick pick;
    int taken = 0;
    do {
        pick = ps_adapt_choose(PS_D2H, bytes, profiled, other);
        taken += !pick.probe;
        CHECK(pick.probe || (pick.plan.route == PINSTAGE_ROUTE_STAGED && !pick.overridden));
    } while (!pick.probe && taken < 100);
    CHECK_EQ(taken, 3); /* no estimate for the pageable route: every 4th transfer probes it */
    CHECK_EQ(pick.plan.route, PINSTAGE_ROUTE_PAGEABLE);
    for (int win = 1; win <= 3; win++) {
        ps_adapt_record(PS_D2H, bytes, PINSTAGE_ROUTE_PAGEABLE, 2 * bytes); /* 5x faster */
        pinstage_route_info info;
        CHECK_OK(pinstage_route_get_info(PINSTAGE_D2H, bytes, &info));
        CHECK_EQ(info.pageable_samples, (unsigned)win);
        pick = ps_adapt_choose(PS_D2H, bytes, profiled, other);
        CHECK_EQ(pick.plan.route, PINSTAGE_ROUTE_PAGEABLE);
        if (win < 3) CHECK(pick.probe && pick.timed && !pick.overridden);
        else CHECK(!pick.probe && pick.overridden); /* three wins in a row: the pageable route taken */
    }
    /* A probe that loses is not repeated. */
    pinstage_route_reset();
    for (int i = 0; i < 3; i++) ps_adapt_record(PS_D2H, bytes, PINSTAGE_ROUTE_STAGED, 10 * bytes);
    do pick = ps_adapt_choose(PS_D2H, bytes, profiled, other);
    while (!pick.probe);
    ps_adapt_record(PS_D2H, bytes, PINSTAGE_ROUTE_PAGEABLE, 20 * bytes);
    int probes = 0;
    for (int i = 0; i < 3; i++) probes += ps_adapt_choose(PS_D2H, bytes, profiled, other).probe;
    CHECK_EQ(probes, 0);
    pinstage_route_reset();
}

/* A probe of a route far slower than the one taken comes only once 32
 * times its last time has passed since the previous probe, so probes take
 * about 1/32 of a busy class's time whatever the transfers' length; a
 * probe that won is repeated at once all the same. */
static void probes_of_a_slow_route_are_spaced_by_their_cost(void) {
    const size_t bytes = 1 * M;
    ps_plan profiled = {PINSTAGE_ROUTE_ENGINE, 0, 0}, other = {PINSTAGE_ROUTE_PAGEABLE, 0, 0};
    const uint64_t taken_ns = 500000, probe_ns = 3000000; /* the pageable route 6x slower: 96 ms apart */
    pinstage_route_reset();
    for (int i = 0; i < 3; i++) ps_adapt_record(PS_H2D, bytes, PINSTAGE_ROUTE_ENGINE, taken_ns);
    /* 300 ms of choices as fast as they come, each probe and every 8th
     * taken transfer recorded at its route's time. */
    double t0 = now_s(), last_probe = 0, closest = 1;
    unsigned probes = 0, choices = 0;
    while (now_s() - t0 < 0.3) {
        ps_adapt_pick pick = ps_adapt_choose(PS_H2D, bytes, profiled, other);
        choices++;
        if (pick.probe) {
            double at = now_s();
            if (probes && at - last_probe < closest) closest = at - last_probe;
            last_probe = at;
            probes++;
            CHECK_EQ(pick.plan.route, PINSTAGE_ROUTE_PAGEABLE);
            ps_adapt_record(PS_H2D, bytes, PINSTAGE_ROUTE_PAGEABLE, probe_ns);
        } else {
            CHECK_EQ(pick.plan.route, PINSTAGE_ROUTE_ENGINE);
            if (pick.timed) ps_adapt_record(PS_H2D, bytes, PINSTAGE_ROUTE_ENGINE, taken_ns);
        }
    }
    printf("#   %u choices in 300 ms: %u probes, the closest %.1f ms apart\n", choices, probes, closest * 1e3);
    CHECK(probes >= 1 && probes <= 4);
    if (probes > 1) CHECK(closest >= 0.095); /* the library reads its clock a little apart from this one */
    /* A probe that wins is repeated by the next transfer, spacing or not. */
    do {
        ps_adapt_pick pick = ps_adapt_choose(PS_H2D, bytes, profiled, other);
        if (pick.probe) break;
        if (pick.timed) ps_adapt_record(PS_H2D, bytes, PINSTAGE_ROUTE_ENGINE, taken_ns);
    } while (now_s() - t0 < 5);
    ps_adapt_record(PS_H2D, bytes, PINSTAGE_ROUTE_PAGEABLE, taken_ns / 4); /* load came: the pageable route wins */
    ps_adapt_pick again = ps_adapt_choose(PS_H2D, bytes, profiled, other);
    CHECK(again.probe && again.plan.route == PINSTAGE_ROUTE_PAGEABLE);
    pinstage_route_reset();
}

/* Several threads' transfers at once: adaptation holds still, every byte arrives. */
static void *adapting_thread(void *arg) {
    int *failures = arg;
    CUstream own;
    if (pinstage_context_init(0) || pinstage_stream_create(&own, PINSTAGE_STREAM_NON_BLOCKING)) {
        (*failures)++;
        return NULL;
    }
    rig r = make_rig(256 * K);
    for (int i = 0; i < 60; i++) {
        fill_pattern(r.src, r.bytes, r.seed);
        if (pinstage_buffer_upload(r.buf, r.d, r.src, r.bytes, own) ||
            pinstage_buffer_download(r.buf, r.back, r.bytes, r.d, own) || pattern_mismatch(r.back, r.bytes, r.seed) != -1)
            (*failures)++;
        r.seed++;
    }
    free_rig(&r);
    pinstage_stream_destroy(own);
    pinstage_context_release(0);
    return NULL;
}

static void threads_adapt_together(void) {
    enum { THREADS = 4 };
    pthread_t t[THREADS];
    int failures[THREADS] = {0};
    pinstage_route_reset();
    if (emu) emu->set_host_rates(1, 0);
    for (int i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, adapting_thread, &failures[i]);
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        CHECK_EQ(failures[i], 0);
    }
    /* Beside each other the routes slow each other down: the choice made
     * alone holds. With the emulator's pageable path slow that choice is the
     * profile's (a real GPU's first transfers, alone, may choose either). */
    pinstage_route_info info;
    CHECK_OK(pinstage_route_get_info(PINSTAGE_H2D, 256 * K, &info));
    if (emu) CHECK(info.chosen != PINSTAGE_ADAPT_PAGEABLE);
    if (emu) emu->set_host_rates(0, 0);
}

int main(void) {
    pinstage_set_adaptive(1); /* the suite runs with PINSTAGE_ADAPTIVE=0 */
    test_setup();
    REQUIRE_OK(pinstage_stream_create(&stream, PINSTAGE_STREAM_NON_BLOCKING));
    pinstage_emu_live before = live_now();
    RUN(route_info_checks_its_arguments);
    RUN(estimates_follow_each_sample_and_age_out);
    RUN(every_eighth_transfer_of_the_route_taken_is_timed);
    RUN(a_winning_probe_is_repeated_at_once);
    RUN(probes_of_a_slow_route_are_spaced_by_their_cost);
    RUN(follows_the_faster_route_and_back);
    RUN(switched_off_follows_the_profile);
    RUN(threads_adapt_together);
    check_current_test = "no_leaks";
    CHECK_NO_LEAK(before);
    pinstage_stream_destroy(stream);
    return test_finish();
}
