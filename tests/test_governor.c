/* SPDX-License-Identifier: MIT */
/* The engine's thread count follows the share of its threads' time the
 * copies used: cut where they mostly waited, as long as the cut costs no
 * time against a window at the cap run right after it, raised where they
 * were always copying, held in between, never outside 2 and the cap; the
 * count in force judged again every 64 windows; samples of another count
 * or a smaller cap do not count; small transfers are left alone.
 * Through a buffer on the emulator, whose DMA is slow: the transfers of a
 * size go down to 2 threads with every byte arriving, and with adaptation
 * off they keep every thread. */
#include <time.h>

#include "check.h"
#include "cpus.h"
#include "governor.h"
#include "pool.h"

#define M ((size_t)1 << 20)
#define WALL 1000000ull /* 1 ms */
#define WINDOW 8 /* transfers per decision, as governor.c */
/* Uses inside the band where the count holds, and above it: the idle uses
 * below (0.05-0.3) are under PS_GOVERNOR_IDLE, and the cuts they make are
 * bounded by halving, not by the target. */
#define IN_BAND_LOW (PS_GOVERNOR_IDLE + 0.05)
#define IN_BAND_MID ((PS_GOVERNOR_IDLE + PS_GOVERNOR_BUSY) / 2)
#define IN_BAND_HIGH (PS_GOVERNOR_BUSY - 0.05)
#define COPY_BOUND ((PS_GOVERNOR_BUSY + 1) / 2)

static unsigned no_load(void) { return 1; }

/* `windows` windows of transfers of `bytes` that asked for `asked`, ran
 * with `used` threads, spent `use` of their time copying and took `wall` ns. */
static void record(size_t bytes, unsigned asked, unsigned used, double use, uint64_t wall, int windows) {
    for (int i = 0; i < windows * WINDOW; i++)
        ps_governor_record(PS_H2D, bytes, asked, used, (uint64_t)(use * used * (double)wall), wall);
}

static unsigned threads_of(ps_direction dir, size_t bytes) {
    unsigned threads;
    uint64_t changes;
    ps_governor_info(dir, bytes, &threads, &changes);
    return threads;
}

static uint64_t changes_of(size_t bytes) {
    unsigned threads;
    uint64_t changes;
    ps_governor_info(PS_H2D, bytes, &threads, &changes);
    return changes;
}

static unsigned now_for(size_t bytes) { return ps_governor_threads(PS_H2D, bytes, 15); }

/* A start: a window not measured, then a window at 15 threads whose use
 * decides the first step. */
static void start(size_t bytes, double use) {
    ps_governor_reset();
    CHECK_EQ(now_for(bytes), 15);
    record(bytes, 15, 15, use, WALL, 1);
    CHECK_EQ(now_for(bytes), 15);
    record(bytes, 15, 15, use, WALL, 1);
}

/* A cut to `count` on trial: its window, which took `wall`, then a window
 * at the profile's 15 that took `control`, to judge it by. */
static void trial(size_t bytes, unsigned count, uint64_t wall, uint64_t control) {
    CHECK_EQ(now_for(bytes), count);
    record(bytes, count, count, 0.3, wall, 1);
    CHECK_EQ(now_for(bytes), 15);
    CHECK_EQ(threads_of(PS_H2D, bytes), count); /* a control window is not a decision */
    record(bytes, 15, 15, 0.3, control, 1);
}

static void idle_threads_are_cut_down_to_two(void) {
    size_t bytes = 64 * M;
    start(bytes, 0.3);
    /* Enough for the target would be 7 or fewer, but a step at most halves. */
    CHECK_EQ(now_for(bytes), 8);
    ps_governor_record(PS_H2D, bytes, 8, 8, (uint64_t)(0.3 * 8 * WALL), WALL);
    CHECK_EQ(now_for(bytes), 8); /* one transfer is not a window */
    record(bytes, 8, 8, 0.3, WALL, 1);
    /* That window judged against one at 15 run next (the extra transfer
     * above, at 8, is not one of its samples). */
    CHECK_EQ(now_for(bytes), 15);
    ps_governor_record(PS_H2D, bytes, 8, 8, (uint64_t)(0.3 * 8 * WALL), WALL);
    record(bytes, 15, 15, 0.3, WALL, 1);
    CHECK_EQ(now_for(bytes), 8);
    record(bytes, 8, 8, 0.3, WALL, 1);
    trial(bytes, 4, WALL, WALL);
    CHECK_EQ(now_for(bytes), 4);
    record(bytes, 4, 4, 0.1, WALL, 1);
    trial(bytes, 2, WALL, WALL);
    record(bytes, 2, 2, 0.05, WALL, 4);
    CHECK_EQ(now_for(bytes), 2); /* never fewer */
    CHECK_EQ(changes_of(bytes), 3);
    CHECK_EQ(threads_of(PS_H2D, bytes), 2);
    CHECK_EQ(threads_of(PS_D2H, bytes), 0); /* the other direction knows nothing */
    CHECK_EQ(threads_of(PS_H2D, 32 * M), 0); /* nor another class */
}

static void a_cut_that_costs_time_is_undone(void) {
    size_t bytes = 64 * M;
    start(bytes, 0.3);
    trial(bytes, 8, WALL * 102 / 100, WALL); /* 2% slower than 15 threads: kept */
    CHECK_EQ(now_for(bytes), 8);
    record(bytes, 8, 8, 0.3, WALL, 1);
    /* Judged against the window at 15 run beside it, not an old one: the
     * machine got faster meanwhile, and 4 threads are 5% slower than 15. */
    trial(bytes, 4, WALL, WALL * 100 / 105);
    CHECK_EQ(now_for(bytes), 8);
    CHECK_EQ(changes_of(bytes), 3); /* 8, 4, 8 */
    /* 8 is the floor now, however idle its threads. */
    record(bytes, 8, 8, 0.2, WALL, 40);
    CHECK_EQ(now_for(bytes), 8);
    CHECK_EQ(changes_of(bytes), 3);
    /* Every 64 windows the count in force is judged again, against 15, and
     * the floor forgotten: 8 still costs nothing, and cuts resume. */
    record(bytes, 8, 8, 0.2, WALL, 64 - 2 - 40 - 1);
    CHECK_EQ(now_for(bytes), 8);
    record(bytes, 8, 8, 0.2, WALL, 1);
    CHECK_EQ(now_for(bytes), 15);
    record(bytes, 15, 15, 0.2, WALL, 1);
    CHECK_EQ(now_for(bytes), 8);
    record(bytes, 8, 8, 0.3, WALL, 1);
    trial(bytes, 4, 2 * WALL, 2 * WALL); /* the machine got slower: both windows alike */
    CHECK_EQ(now_for(bytes), 4);
    CHECK_EQ(changes_of(bytes), 4);
}

static void the_count_in_force_is_judged_again(void) {
    size_t bytes = 64 * M;
    start(bytes, 0.3);
    trial(bytes, 8, WALL, WALL);
    record(bytes, 8, 8, IN_BAND_MID, WALL, 62); /* held: use in the band */
    CHECK_EQ(now_for(bytes), 8);
    /* The 64th window, judged against one at 15 that is twice as fast (the
     * source moved into a cache, say): back to 15, and no cut until the
     * next check. */
    record(bytes, 8, 8, IN_BAND_MID, WALL, 1);
    CHECK_EQ(now_for(bytes), 15);
    record(bytes, 15, 15, IN_BAND_MID, WALL / 2, 1);
    CHECK_EQ(now_for(bytes), 15);
    CHECK_EQ(threads_of(PS_H2D, bytes), 15);
    record(bytes, 15, 15, 0.1, WALL / 2, 63);
    CHECK_EQ(now_for(bytes), 15);
    CHECK_EQ(changes_of(bytes), 2);
    /* The next check forgets that floor: cuts again. */
    record(bytes, 15, 15, 0.1, WALL / 2, 1);
    CHECK_EQ(now_for(bytes), 8);
}

static void busy_threads_are_added_up_to_the_cap(void) {
    size_t bytes = 32 * M;
    start(bytes, 0.2);
    trial(bytes, 8, WALL, WALL);
    record(bytes, 8, 8, 0.2, WALL, 1);
    trial(bytes, 4, WALL, WALL);
    CHECK_EQ(now_for(bytes), 4);
    /* Raised without a trial: a copy-bound count only gains. */
    record(bytes, 4, 4, COPY_BOUND, WALL, 1);
    CHECK_EQ(now_for(bytes), 6);
    record(bytes, 6, 6, COPY_BOUND, WALL, 1);
    CHECK_EQ(now_for(bytes), 9);
    record(bytes, 9, 9, COPY_BOUND, WALL, 1);
    CHECK_EQ(now_for(bytes), 14);
    record(bytes, 14, 14, COPY_BOUND, WALL, 1);
    CHECK_EQ(now_for(bytes), 15);
    record(bytes, 15, 15, 0.99, WALL, 4);
    CHECK_EQ(now_for(bytes), 15);
}

static void a_use_in_the_band_holds_the_count(void) {
    size_t bytes = 16 * M;
    start(bytes, 0.3);
    trial(bytes, 8, WALL, WALL);
    uint64_t changes = changes_of(bytes);
    record(bytes, 8, 8, IN_BAND_LOW, WALL, 20);
    record(bytes, 8, 8, IN_BAND_HIGH, WALL, 20);
    CHECK_EQ(now_for(bytes), 8);
    CHECK_EQ(changes_of(bytes), changes);
}

static void samples_of_another_count_do_not_count(void) {
    size_t bytes = 64 * M;
    start(bytes, 0.3);
    CHECK_EQ(now_for(bytes), 8);
    /* Transfers that began before the cut (another thread's) finish now. */
    record(bytes, 15, 15, 0.1, 10 * WALL, 10);
    CHECK_EQ(now_for(bytes), 8);
    trial(bytes, 8, WALL, WALL);
    /* Copy-bound, but with fewer seats than asked: more would not come. */
    record(bytes, 8, 5, 0.99, WALL, 10);
    CHECK_EQ(now_for(bytes), 8);
    /* Waiting, with fewer seats than asked: enough for the target use of
     * what ran would be 2, but a step at most halves. */
    record(bytes, 8, 5, 0.2, WALL, 1);
    CHECK_EQ(now_for(bytes), 4);
}

static void a_new_cap_starts_over(void) {
    size_t bytes = 64 * M;
    start(bytes, 0.3);
    CHECK_EQ(now_for(bytes), 8);
    CHECK_EQ(ps_governor_threads(PS_H2D, bytes, 6), 6); /* the pool was made smaller */
    CHECK_EQ(ps_governor_threads(PS_H2D, bytes, 15), 15);
    CHECK_EQ(ps_governor_threads(PS_H2D, bytes, 2), 2); /* too few to govern */
    ps_governor_reset();
    CHECK_EQ(threads_of(PS_H2D, bytes), 0);
    CHECK_EQ(changes_of(bytes), 0);
}

static void small_transfers_are_left_alone(void) {
    ps_governor_reset();
    size_t bytes = PS_GOVERNED_MIN - 1;
    CHECK_EQ(now_for(bytes), 15);
    record(bytes, 15, 15, 0.05, WALL, 4);
    CHECK_EQ(now_for(bytes), 15);
    CHECK_EQ(threads_of(PS_H2D, bytes), 0);
    /* Nonsense measurements change nothing. */
    bytes = 64 * M;
    CHECK_EQ(now_for(bytes), 15);
    for (int i = 0; i < 40; i++) {
        ps_governor_record(PS_H2D, bytes, 15, 0, 1000, WALL);
        ps_governor_record(PS_H2D, bytes, 15, 15, 1000, 0);
    }
    CHECK_EQ(now_for(bytes), 15);
}

/* Round trips of `bytes` through `buf`, every byte checked. Each sends a
 * window of `pattern` (bytes + 1 KiB) at another offset, so a byte out of
 * place or left from the trip before shows; memcpy and memcmp keep it quick
 * under ThreadSanitizer. */
static void round_trips(pinstage_buffer *buf, pinstage_devbuf *dev, const unsigned char *pattern,
                        unsigned char *src, unsigned char *back, size_t bytes, int n) {
    static int trip;
    for (int i = 0; i < n; i++, trip++) {
        memcpy(src, pattern + (size_t)(trip % 128) * 8, bytes);
        CHECK_OK(pinstage_buffer_upload(buf, dev, src, bytes, NULL));
        memset(back, 0, bytes);
        CHECK_OK(pinstage_buffer_download(buf, back, bytes, dev, NULL));
        CHECK(memcmp(back, src, bytes) == 0);
    }
}

static void a_buffer_with_slow_dma_needs_two_threads(void) {
    if (!emu) {
        printf("#   skipped: needs the emulator to make the DMA slow\n");
        return;
    }
    size_t bytes = 16 * M;
    unsigned char *src = malloc(bytes), *back = malloc(bytes), *pattern = malloc(bytes + 1024);
    REQUIRE(src && back && pattern);
    fill_pattern(pattern, bytes + 1024, 7);
    pinstage_buffer *buf;
    pinstage_devbuf *dev;
    REQUIRE_OK(pinstage_buffer_create(&buf));
    REQUIRE_OK(pinstage_devbuf_alloc_u8(&dev, bytes));
    ps_cpus_set_usable(16);
    ps_cpus_set_probe(no_load);
    CHECK_OK(pinstage_pool_set_threads(7));
    pinstage_route_reset();
    pinstage_set_adaptive(1);
    /* The engine's DMA at 0.8 GB/s (21 ms): the copy waits nearly all the
     * time, and fewer threads cost none. The driver's pageable path at a
     * quarter of that, so the engine keeps the route: at half, beside two
     * busy loops on a two-CPU machine, the route flipped in 1 of 14 runs
     * and a probe of the engine was counted. The emulator's timings vary by
     * up to a fifth between windows on a busy two-CPU machine, so the time
     * check (the unit cases above) is widened to half here. Seven windows a
     * direction: one not measured, the cut to 4, its trial and control, the
     * cut to 2, its trial and control. With the first transfer, which pins
     * the memory and is not counted, that is 57 engine transfers a
     * direction, however many probes of the pageable path came between
     * (their pace is set by time); the next opens the eighth window, at the
     * decided count. */
    emu->set_host_rates(0.2, 0);
    emu->set_timing(5, 0.8);
    ps_governor_set_tolerance(0.5);
    enum { ENGINE_TRANSFERS = 57 };
    pinstage_route_info up, down;
    unsigned uploads = 0, downloads = 0, trip = 0;
    for (;;) {
        CHECK_OK(pinstage_route_get_info(PINSTAGE_H2D, bytes, &up));
        CHECK_OK(pinstage_route_get_info(PINSTAGE_D2H, bytes, &down));
        int up_short = uploads - up.probes < ENGINE_TRANSFERS, down_short = downloads - down.probes < ENGINE_TRANSFERS;
        if (!up_short && !down_short) break;
        if (up_short) {
            memcpy(src, pattern + (size_t)(trip++ % 128) * 8, bytes);
            CHECK_OK(pinstage_buffer_upload(buf, dev, src, bytes, NULL));
            uploads++;
        }
        if (down_short) {
            memset(back, 0, bytes);
            CHECK_OK(pinstage_buffer_download(buf, back, bytes, dev, NULL));
            CHECK(memcmp(back, src, bytes) == 0);
            downloads++;
        }
    }
    printf("#   after %u engine transfers a direction: upload %u threads (%llu changes), download %u (%llu)\n",
           ENGINE_TRANSFERS, up.engine_threads, (unsigned long long)up.thread_changes, down.engine_threads,
           (unsigned long long)down.thread_changes);
    CHECK_EQ(up.engine_threads, 2);
    CHECK_EQ(down.engine_threads, 2);
    CHECK_EQ(up.thread_changes, 2); /* 8, 4, 2 */
    CHECK_EQ(down.thread_changes, 2);
    pinstage_stats st;
    pinstage_buffer_stats(buf, &st);
    CHECK_EQ(st.engine_transfers, 2 * ENGINE_TRANSFERS);
    CHECK_EQ(st.pageable_transfers, st.route_probes); /* the pageable path only measured */
    CHECK(st.route_probes >= 2);
    uint64_t probes;
    do {
        probes = up.probes;
        CHECK_OK(pinstage_buffer_upload(buf, dev, src, bytes, NULL));
        CHECK_OK(pinstage_route_get_info(PINSTAGE_H2D, bytes, &up));
    } while (up.probes != probes);
    CHECK_EQ(ps_pool_last_seats(), 1); /* one worker beside the caller */

    /* Off: every thread the profile asks for, and no record kept. */
    pinstage_set_adaptive(0);
    round_trips(buf, dev, pattern, src, back, bytes, 1);
    CHECK_EQ(ps_pool_last_seats(), 7);
    pinstage_route_reset();
    CHECK_OK(pinstage_route_get_info(PINSTAGE_H2D, bytes, &up));
    CHECK_EQ(up.engine_threads, 0);
    round_trips(buf, dev, pattern, src, back, bytes, 17); /* past two windows */
    CHECK_OK(pinstage_route_get_info(PINSTAGE_H2D, bytes, &up));
    CHECK_EQ(up.engine_threads, 0);
    CHECK_EQ(up.thread_changes, 0);

    ps_governor_set_tolerance(-1);
    emu->set_timing(20, 4); /* the emulator's defaults */
    emu->set_host_rates(0, 0);
    CHECK_OK(pinstage_pool_set_threads(PINSTAGE_POOL_AUTO));
    ps_cpus_set_probe(NULL);
    ps_cpus_set_usable(0);
    pinstage_buffer_free(buf);
    pinstage_devbuf_free(dev);
    free(src);
    free(back);
    free(pattern);
}

int main(void) {
    test_setup();
    pinstage_emu_live before = live_now();
    /* The idle uses here (at most 0.3) and the copy-bound ones (0.99) lie
     * outside the band governor.h sets. */
    REQUIRE(PS_GOVERNOR_IDLE > 0.3 && PS_GOVERNOR_BUSY < 0.95 && PS_GOVERNOR_TARGET > PS_GOVERNOR_IDLE);
    RUN(idle_threads_are_cut_down_to_two);
    RUN(a_cut_that_costs_time_is_undone);
    RUN(the_count_in_force_is_judged_again);
    RUN(busy_threads_are_added_up_to_the_cap);
    RUN(a_use_in_the_band_holds_the_count);
    RUN(samples_of_another_count_do_not_count);
    RUN(a_new_cap_starts_over);
    RUN(small_transfers_are_left_alone);
    RUN(a_buffer_with_slow_dma_needs_two_threads);
    check_current_test = "no_leaks";
    CHECK_NO_LEAK(before);
    return test_finish();
}
