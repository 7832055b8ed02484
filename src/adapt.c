/* SPDX-License-Identifier: MIT */
/* Route choice from what recent transfers achieved. One lock guards the
 * table: a transfer holds it for well under a microsecond, once (twice when
 * it is timed). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "adapt.h"
#include "governor.h"
#include "status.h"

/* Recent transfers kept per route and class; the estimate is their median. */
#define SAMPLES 8
/* Fewer samples than this newer than FRESH_NS: no estimate. Short, so the
 * two sides are compared under the same load: a time measured before
 * other threads started transferring would make the slower side look
 * faster (the driver's pageable path serializes threads). */
#define MIN_SAMPLES 3
#define FRESH_NS 2000000000ull
/* The other route must be this much faster to take over (hysteresis). */
#define MARGIN 0.95f
/* Probes of the route not taken: every PROBE_EVERY transfers of the class,
 * every STALE_PROBE_EVERY while it has no estimate, up to every
 * PROBE_EVERY_MAX while it keeps measuring far slower, but at least every
 * PROBE_INTERVAL_NS of a busy class, so a change of load is seen within a
 * fraction of a second. */
#define PROBE_EVERY 16u
#define STALE_PROBE_EVERY 4u
#define PROBE_EVERY_MAX 128u
#define PROBE_INTERVAL_NS 250000000ull
/* And a probe (other than the repeat of one that won or ran cold) waits
 * PROBE_SPACING times what its route's last sample took since the previous
 * probe, up to PROBE_SPACING_MAX_NS, so probes of a slow route take about
 * 1/PROBE_SPACING of the time (more only for probes over 31 ms). At
 * 256 MiB the pageable path took 4.6-6.8 times the engine's time in the
 * H200's sweep (docs/benchmarks.md), so one probe each 250 ms would take
 * 9-15% of a busy class's time, which the median of the calls never shows.
 * The cap keeps a route that measured very slow, and has since recovered,
 * from waiting longer than a second to be seen. */
#define PROBE_SPACING 32u
#define PROBE_SPACING_MAX_NS 1000000000ull
/* A transfer of the route taken is timed once every TIME_EVERY of them, and
 * whenever that route's newest sample is TIME_GAP_NS old (probes always
 * are). A 4 KiB upload lands in a few microseconds, and three more clock
 * reads, recording the sample and working out the estimate again for
 * every one of them was most of the library's own work per call. The
 * sample is picked by count, not by time since the last one: a clock rule
 * times the first call after every pause, the one that wakes the engine,
 * and a median of those made the engine look slower than it runs (on an
 * H100, 64 KiB uploads went to the pageable route in 40% of calls instead
 * of the probes' 6%). Calls far apart are each timed. */
#define TIME_EVERY 8u
#define TIME_GAP_NS 100000000ull

typedef struct {
    float per_byte[SAMPLES]; /* ns per byte */
    uint64_t at[SAMPLES];    /* when, ns */
    unsigned count, next;
    /* estimate()'s last answer, which holds from known_from to known_until
     * (ns) while no sample is added: the fresh samples change only as the
     * oldest of them ages out. known_until 0: none. Every transfer asks for
     * both sides' estimates, and working them out was most of its time in
     * this file. */
    float known;
    uint64_t known_from, known_until;
} samples;

typedef struct {
    samples side[2]; /* 0: the pageable route; 1: through pinned memory (staged or engine) */
    int chosen;      /* side taken now; -1: the profile's */
    unsigned since_probe, probe_every;
    uint64_t last_probe; /* ns */
    unsigned wins;       /* probes in a row that beat the route taken */
    unsigned untimed;    /* transfers of the route taken since one was timed */
    int cold_retry;      /* the last probe ran cold and the next one repeats it */
    uint64_t switches, probes;
} class_state;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
/* Transfers of pageable memory in progress in the process. With more than
 * one, the routes slow each other down (the driver's pageable path holds a
 * lock the other threads' copies need for as long as it copies), so what
 * one route achieved says nothing about the other: no probe, no sample,
 * the choice held. */
static _Atomic unsigned in_progress;
static class_state table[2][PS_CLASSES];
static int table_ready;

/* -1: not yet read from the environment. */
static _Atomic int enabled = -1;

uint64_t ps_adapt_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int ps_adapt_enabled(void) {
    int on = atomic_load_explicit(&enabled, memory_order_relaxed);
    if (on >= 0) return on;
    const char *env = getenv("PINSTAGE_ADAPTIVE");
    on = !(env && env[0] == '0' && env[1] == 0);
    int expected = -1;
    atomic_compare_exchange_strong(&enabled, &expected, on); /* pinstage_set_adaptive may have run first */
    return atomic_load_explicit(&enabled, memory_order_relaxed);
}

void pinstage_set_adaptive(int on) { atomic_store_explicit(&enabled, on != 0, memory_order_relaxed); }

static int side_of(int route) { return route != PINSTAGE_ROUTE_PAGEABLE; }

/* lock held */
static void ready(void) {
    if (table_ready) return;
    for (int d = 0; d < 2; d++)
        for (unsigned c = 0; c < PS_CLASSES; c++) {
            table[d][c].chosen = -1;
            table[d][c].probe_every = PROBE_EVERY;
        }
    table_ready = 1;
}

/* The median ns per byte of the fresh samples, or 0 when too few are. */
static float estimate(samples *s, uint64_t now) {
    if (s->known_until && now >= s->known_from && now <= s->known_until) return s->known;
    float v[SAMPLES];
    unsigned n = 0;
    uint64_t oldest = UINT64_MAX;
    int ahead = 0; /* a sample stamped after `now` (read before the lock) turns fresh later */
    for (unsigned i = 0; i < s->count; i++) {
        ahead |= s->at[i] > now;
        if (now - s->at[i] <= FRESH_NS) {
            v[n++] = s->per_byte[i];
            if (s->at[i] < oldest) oldest = s->at[i];
        }
    }
    for (unsigned i = 1; i < n; i++)
        for (unsigned j = i; j > 0 && v[j - 1] > v[j]; j--) {
            float t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    s->known = n < MIN_SAMPLES ? 0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    s->known_from = now;
    /* Samples only age out until the next one comes: too few stay too few. */
    s->known_until = ahead ? 0 : n >= MIN_SAMPLES ? oldest + FRESH_NS : UINT64_MAX;
    return s->known;
}

/* Drops all but the newest `n` samples. */
static void keep_newest(samples *s, unsigned n) {
    samples kept;
    memset(&kept, 0, sizeof kept);
    for (unsigned i = 0; i < n && i < s->count; i++) {
        unsigned from = (s->next + SAMPLES - n + i) % SAMPLES;
        kept.per_byte[i] = s->per_byte[from];
        kept.at[i] = s->at[from];
    }
    kept.count = n < s->count ? n : s->count;
    kept.next = kept.count % SAMPLES;
    *s = kept;
}

/* When the newest sample was taken; 0 when there is none. */
static uint64_t newest(const samples *s) { return s->count ? s->at[(s->next + SAMPLES - 1) % SAMPLES] : 0; }

/* The newest sample's ns per byte, however old; 0 when there is none. */
static float latest(const samples *s) { return s->count ? s->per_byte[(s->next + SAMPLES - 1) % SAMPLES] : 0; }

static unsigned fresh(const samples *s, uint64_t now) {
    unsigned n = 0;
    for (unsigned i = 0; i < s->count; i++) n += now - s->at[i] <= FRESH_NS;
    return n;
}

void ps_adapt_begin(void) { atomic_fetch_add_explicit(&in_progress, 1, memory_order_relaxed); }
void ps_adapt_end(void) { atomic_fetch_sub_explicit(&in_progress, 1, memory_order_relaxed); }

static int alone(void) { return atomic_load_explicit(&in_progress, memory_order_relaxed) <= 1; }

ps_adapt_pick ps_adapt_choose(ps_direction dir, size_t bytes, ps_plan profiled, ps_plan other) {
    ps_adapt_pick pick = {profiled, 0, 0, 0};
    if (!ps_adapt_enabled() || side_of(profiled.route) == side_of(other.route)) return pick;
    uint64_t now = ps_adapt_now_ns();
    int profile_side = side_of(profiled.route);
    pthread_mutex_lock(&lock);
    ready();
    class_state *c = &table[dir][ps_size_class(bytes)];
    float e[2] = {estimate(&c->side[0], now), estimate(&c->side[1], now)};
    int want = c->chosen < 0 ? profile_side : c->chosen;
    if (e[0] > 0 && e[1] > 0) {
        int faster = e[0] < e[1] ? 0 : 1;
        if (faster != want && e[faster] < e[want] * MARGIN) want = faster;
    } else if (want != profile_side && e[want] <= 0) {
        want = profile_side; /* the evidence is gone: back to the profile */
    }
    if (!alone()) {
        /* Beside other transfers: the choice made alone holds (at first, the profile's). */
        want = c->chosen < 0 ? profile_side : c->chosen;
        pthread_mutex_unlock(&lock);
        pick.plan = want == profile_side ? profiled : other;
        pick.overridden = want != profile_side;
        return pick;
    }
    if ((c->chosen >= 0 && want != c->chosen) || (c->chosen < 0 && want != profile_side)) {
        c->switches++;
        c->wins = 0; /* they beat the route no longer taken */
    }
    c->chosen = want;
    int probe_side = !want;
    /* A probe that just won is repeated at once, whether or not its side
     * has an estimate: when that route's transfers are slow, the probes
     * before it (every STALE_PROBE_EVERY, hundreds of ms apart) may have
     * aged out, and waiting for enough fresh ones would keep the slower
     * route for seconds. */
    unsigned every = c->wins ? 1 : e[probe_side] > 0 ? c->probe_every : STALE_PROBE_EVERY;
    ++c->since_probe;
    int due = c->since_probe >= every ||
              (c->since_probe >= STALE_PROBE_EVERY && now - c->last_probe > PROBE_INTERVAL_NS);
    if (due && !c->wins && !c->cold_retry && c->side[probe_side].count) {
        /* The probe's spacing, from its route's newest sample of any age. */
        double spacing = PROBE_SPACING * (double)latest(&c->side[probe_side]) * (double)bytes;
        if (spacing > (double)PROBE_SPACING_MAX_NS) spacing = (double)PROBE_SPACING_MAX_NS;
        if (now - c->last_probe < (uint64_t)spacing) due = 0;
    }
    if (due) {
        c->since_probe = 0;
        c->last_probe = now;
        c->probes++;
        /* A route that keeps measuring far slower is probed less and less. */
        if (e[probe_side] > 0 && e[want] > 0 && e[probe_side] > 1.5f * e[want])
            c->probe_every = c->probe_every * 2 > PROBE_EVERY_MAX ? PROBE_EVERY_MAX : c->probe_every * 2;
        else
            c->probe_every = PROBE_EVERY;
        want = probe_side;
        pick.probe = 1;
    }
    if (pick.probe || ++c->untimed >= TIME_EVERY || now - newest(&c->side[want]) >= TIME_GAP_NS) {
        pick.timed = 1;
        if (!pick.probe) c->untimed = 0;
    }
    pthread_mutex_unlock(&lock);
    pick.plan = want == profile_side ? profiled : other;
    pick.overridden = !pick.probe && want != profile_side;
    return pick;
}

void ps_adapt_record(ps_direction dir, size_t bytes, int route, uint64_t ns) {
    if (!bytes || !ps_adapt_enabled() || !alone()) return;
    pthread_mutex_lock(&lock);
    ready();
    class_state *c = &table[dir][ps_size_class(bytes)];
    int side = side_of(route);
    samples *s = &c->side[side];
    float per_byte = (float)ns / (float)bytes;
    uint64_t now = ps_adapt_now_ns();
    s->per_byte[s->next] = per_byte;
    s->at[s->next] = now;
    s->known_until = 0;
    s->next = (s->next + 1) % SAMPLES;
    if (s->count < SAMPLES) s->count++;
    /* A probe that beat the route taken is tried again at once; MIN_SAMPLES
     * such in a row outvote that side's older, slower samples, which go. So
     * a change of load turns the choice in a few transfers, not hundreds. */
    if (c->chosen >= 0 && side != c->chosen) {
        c->cold_retry = 0;
        float taken = estimate(&c->side[c->chosen], now);
        if (taken > 0 && per_byte < taken * MARGIN) {
            if (++c->wins >= MIN_SAMPLES) {
                keep_newest(s, c->wins);
                c->wins = 0;
            }
        } else {
            c->wins = 0;
        }
    }
    pthread_mutex_unlock(&lock);
}

int ps_adapt_cold_probe(ps_direction dir, size_t bytes) {
    if (!ps_adapt_enabled()) return 0;
    pthread_mutex_lock(&lock);
    ready();
    class_state *c = &table[dir][ps_size_class(bytes)];
    int again = !c->cold_retry;
    c->cold_retry = again;
    if (again) c->since_probe = PROBE_EVERY_MAX; /* the next transfer probes */
    pthread_mutex_unlock(&lock);
    return again;
}

pinstage_status pinstage_route_get_info(pinstage_direction dir, size_t bytes, pinstage_route_info *info) {
    if (!info || (dir != PINSTAGE_H2D && dir != PINSTAGE_D2H) || !bytes)
        return ps_fail(PINSTAGE_ERROR_INVALID_VALUE, "pinstage_route_get_info: %s",
                       !info ? "info is NULL" : !bytes ? "bytes is 0" : "dir is not PINSTAGE_H2D or PINSTAGE_D2H");
    memset(info, 0, sizeof *info);
    uint64_t now = ps_adapt_now_ns();
    pthread_mutex_lock(&lock);
    ready();
    class_state *c = &table[dir][ps_size_class(bytes)];
    info->pageable_us = estimate(&c->side[0], now) * (double)bytes / 1e3;
    info->staging_us = estimate(&c->side[1], now) * (double)bytes / 1e3;
    info->pageable_samples = fresh(&c->side[0], now);
    info->staging_samples = fresh(&c->side[1], now);
    info->chosen = c->chosen < 0 ? PINSTAGE_ADAPT_PROFILE
                   : c->chosen   ? PINSTAGE_ADAPT_STAGING
                                 : PINSTAGE_ADAPT_PAGEABLE;
    info->switches = c->switches;
    info->probes = c->probes;
    pthread_mutex_unlock(&lock);
    ps_governor_info((ps_direction)dir, bytes, &info->engine_threads, &info->thread_changes);
    info->adaptive = ps_adapt_enabled();
    return PINSTAGE_SUCCESS;
}

void pinstage_route_reset(void) {
    pthread_mutex_lock(&lock);
    memset(table, 0, sizeof table);
    table_ready = 0;
    pthread_mutex_unlock(&lock);
    ps_governor_reset();
}
