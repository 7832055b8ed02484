/* SPDX-License-Identifier: MIT */
/* Buffers and rings bound to devices: their context around their calls
 * from any thread, placement on the GPU's NUMA node (an emulated map and a
 * made-up sysfs on machines of one node), per-node copy threads, several
 * devices at once, and a failing device leaving the others alone.
 *
 * On the emulated driver (PINSTAGE_EMU_DEVICES=4) every part runs; on a
 * real single-GPU machine the parts that need several devices say so and
 * are skipped, the rest run against device 0. This program links the
 * library's objects, for the NUMA and pool internals it checks. */
#include <pthread.h>
#include <sched.h>
#include <sys/stat.h>

#include "check.h"
#include "cpus.h"
#include "numa.h"
#include "pool.h"

#define K 1024u

static int devices;

/* A device's primary context, as the driver knows it (retained here; the
 * caller releases it with pinstage_context_release). */
static CUcontext primary_of(int device) {
    CUcontext saved = NULL, ctx = NULL;
    REQUIRE_OK((pinstage_status)drv.ctx_get_current(&saved));
    REQUIRE_OK(pinstage_context_init(device));
    REQUIRE_OK((pinstage_status)drv.ctx_get_current(&ctx));
    REQUIRE_OK((pinstage_status)drv.ctx_set_current(saved));
    return ctx;
}

static CUcontext current(void) {
    CUcontext ctx = (CUcontext)1;
    REQUIRE_OK((pinstage_status)drv.ctx_get_current(&ctx));
    return ctx;
}

/* The engine route at 64 KiB chunks: transfers use the workers. */
static void use_engine(pinstage_buffer *buf) {
    pinstage_profile *p;
    REQUIRE_OK(pinstage_profile_fixed(&p, PINSTAGE_ROUTE_ENGINE, 64 * K, 0));
    REQUIRE_OK(pinstage_buffer_set_profile(buf, p));
    pinstage_profile_free(p);
}

/* Everything a device's part of a test uses, made in that device's context. */
typedef struct {
    int device;
    CUcontext ctx;
    CUstream stream;
    pinstage_devbuf *dev;
    pinstage_buffer *buf;
    pinstage_ring *ring;
    unsigned char *host, *back;
    size_t bytes;
} device_kit;

static void kit_make(device_kit *k, int device, size_t bytes, int numa_node) {
    memset(k, 0, sizeof *k);
    k->device = device;
    k->bytes = bytes;
    k->ctx = primary_of(device);
    CUcontext saved = current();
    REQUIRE_OK((pinstage_status)drv.ctx_set_current(k->ctx));
    REQUIRE_OK(pinstage_stream_create(&k->stream, PINSTAGE_STREAM_NON_BLOCKING));
    REQUIRE_OK(pinstage_devbuf_alloc_u8(&k->dev, bytes));
    REQUIRE_OK((pinstage_status)drv.ctx_set_current(saved));
    pinstage_binding b = {device, NULL, numa_node};
    REQUIRE_OK(pinstage_buffer_create(&k->buf));
    REQUIRE_OK(pinstage_buffer_bind(k->buf, &b));
    use_engine(k->buf);
    REQUIRE_OK(pinstage_ring_create(&k->ring, 2, 0));
    REQUIRE_OK(pinstage_ring_bind(k->ring, &b));
    k->host = malloc(bytes);
    k->back = malloc(bytes);
}

static void kit_free(device_kit *k) {
    CHECK_OK(pinstage_buffer_free(k->buf));
    CHECK_OK(pinstage_ring_free(k->ring));
    CUcontext saved = current();
    REQUIRE_OK((pinstage_status)drv.ctx_set_current(k->ctx));
    CHECK_OK(pinstage_devbuf_free(k->dev));
    CHECK_OK(pinstage_stream_destroy(k->stream));
    REQUIRE_OK((pinstage_status)drv.ctx_set_current(saved));
    CHECK_OK(pinstage_context_release(k->device));
    free(k->host);
    free(k->back);
}

/* One round trip through the buffer and one through the ring, exact bytes. */
static void kit_round_trip(device_kit *k, unsigned seed) {
    fill_pattern(k->host, k->bytes, seed);
    memset(k->back, 0, k->bytes);
    CHECK_OK(pinstage_buffer_upload_u8(k->buf, k->dev, k->host, k->bytes, k->stream));
    CHECK_OK(pinstage_buffer_download_u8(k->buf, k->back, k->bytes, k->dev, k->stream));
    CHECK_EQ(pattern_mismatch(k->back, k->bytes, seed), -1);
    fill_pattern(k->host, k->bytes, seed + 1);
    pinstage_ticket t = 0;
    const void *view = NULL;
    CHECK_OK(pinstage_ring_upload_async(k->ring, k->dev, k->host, k->bytes, k->stream));
    CHECK_OK(pinstage_ring_download_async(k->ring, k->dev, k->bytes, k->stream, &t));
    CHECK_OK(pinstage_ring_wait(k->ring, t, &view));
    CHECK(view && pattern_mismatch(view, k->bytes, seed + 1) == -1);
    CHECK_OK(pinstage_ring_release(k->ring, t));
}

static void bad_bindings_change_nothing_and_call_no_driver(void) {
    pinstage_buffer *buf;
    pinstage_ring *ring;
    REQUIRE_OK(pinstage_buffer_create(&buf));
    REQUIRE_OK(pinstage_ring_create(&ring, 2, 0));
    unsigned long calls = driver_calls();
    pinstage_binding b = pinstage_binding_for_device(0);
    CHECK_EQ(b.numa_node, PINSTAGE_NUMA_DEVICE);
    CHECK_STATUS(pinstage_buffer_bind(NULL, &b), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_STATUS(pinstage_ring_bind(NULL, &b), PINSTAGE_ERROR_INVALID_VALUE);
    b.device = -1;
    CHECK_STATUS(pinstage_buffer_bind(buf, &b), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_MESSAGE("device=-1 is negative");
    b.device = 0;
    b.numa_node = -3;
    CHECK_STATUS(pinstage_buffer_bind(buf, &b), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_MESSAGE("numa_node=-3");
    b.numa_node = 64;
    CHECK_STATUS(pinstage_ring_bind(ring, &b), PINSTAGE_ERROR_INVALID_VALUE);
    b.numa_node = ps_numa_node_count(); /* one past the last online node */
    CHECK_STATUS(pinstage_buffer_bind(buf, &b), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_MESSAGE("is not an online node");
    CHECK_EQ(driver_calls(), calls);
    pinstage_placement where;
    CHECK_STATUS(pinstage_buffer_get_placement(buf, NULL), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_STATUS(pinstage_ring_get_placement(NULL, &where), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_OK(pinstage_buffer_get_placement(buf, &where)); /* still unbound */
    CHECK_EQ(where.device, -1);
    CHECK_EQ(where.memory_node, -1);
    CHECK_EQ(where.memory_found, -1);
    CHECK_EQ(where.worker_node, -1);
    CHECK_EQ(where.pinned_bytes, 0);
    /* A device the driver does not have: its error, and still unbound. */
    b = pinstage_binding_for_device(devices);
    CHECK_STATUS(pinstage_buffer_bind(buf, &b), 101);
    CHECK_MESSAGE("does not exist");
    CHECK_OK(pinstage_buffer_get_placement(buf, &where));
    CHECK_EQ(where.device, -1);
    /* A context that is not the device's. */
    if (devices >= 2) {
        CUcontext other = primary_of(1);
        pinstage_binding wrong = {0, other, PINSTAGE_NUMA_NONE};
        CHECK_STATUS(pinstage_buffer_bind(buf, &wrong), PINSTAGE_ERROR_INVALID_VALUE);
        CHECK_MESSAGE("device 1's, not device 0's");
        CHECK_OK(pinstage_context_release(1));
    }
    /* In use: its events and memory are the current context's. */
    pinstage_devbuf *dev;
    unsigned char host[4096];
    fill_pattern(host, sizeof host, 5);
    REQUIRE_OK(pinstage_devbuf_alloc_u8(&dev, sizeof host));
    REQUIRE_OK(pinstage_buffer_upload_u8(buf, dev, host, sizeof host, NULL));
    b = pinstage_binding_for_device(0);
    calls = driver_calls();
    CHECK_STATUS(pinstage_buffer_bind(buf, &b), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_MESSAGE("in use");
    CHECK_EQ(driver_calls(), calls);
    CHECK_OK(pinstage_devbuf_free(dev));
    CHECK_OK(pinstage_buffer_free(buf));
    CHECK_OK(pinstage_ring_free(ring));
}

/* A bound buffer makes its context current for its calls and gives the
 * caller's back, whatever the caller had: another device's, or none. */
static void bound_objects_use_their_own_context(void) {
    int device = devices >= 2 ? 1 : 0;
    device_kit k;
    kit_make(&k, device, 300 * K, PINSTAGE_NUMA_NONE);
    CUcontext mine = current();
    /* The caller's context is another device's (or device 0's own on one GPU). */
    kit_round_trip(&k, 10);
    CHECK(current() == mine);
    /* No context at all. */
    REQUIRE_OK((pinstage_status)drv.ctx_set_current(NULL));
    kit_round_trip(&k, 20);
    CHECK_OK(pinstage_buffer_reserve(k.buf, 600 * K));
    CHECK_OK(pinstage_ring_reserve(k.ring, 400 * K));
    CHECK_OK(pinstage_ring_synchronize(k.ring));
    CHECK(current() == NULL);
    REQUIRE_OK((pinstage_status)drv.ctx_set_current(mine));
    pinstage_placement where;
    CHECK_OK(pinstage_buffer_get_placement(k.buf, &where));
    CHECK_EQ(where.device, device);
    CHECK_EQ(where.memory_node, -1);
    CHECK_EQ(where.pinned_bytes, 640 * K);
    CHECK_OK(pinstage_ring_get_placement(k.ring, &where));
    CHECK_EQ(where.device, device);
    CHECK_EQ(where.pinned_bytes, 2 * 448 * K);
    /* The emulator refuses a stream of another context: an unbound buffer
     * called in the wrong context fails, so the passes above are real. */
    if (emu && devices >= 2) {
        pinstage_buffer *unbound;
        REQUIRE_OK(pinstage_buffer_create(&unbound));
        CHECK_STATUS(pinstage_buffer_upload_u8(unbound, k.dev, k.host, k.bytes, k.stream), 201);
        CHECK_OK(pinstage_buffer_free(unbound));
    }
    kit_free(&k);
}

/* The buffer's retain of the primary context ends with it. */
static void a_binding_holds_the_primary_context_until_freed(void) {
    if (!emu || devices < 4) {
        printf("# skipped: needs the emulator's fourth device, used by nothing else\n");
        return;
    }
    CUresult (*get_state)(CUdevice, unsigned *, int *);
    REQUIRE_OK(pinstage_driver_get_proc("cuDevicePrimaryCtxGetState", 7000, (void **)&get_state));
    unsigned flags;
    int active = 1;
    REQUIRE_OK((pinstage_status)get_state(3, &flags, &active));
    CHECK_EQ(active, 0);
    pinstage_buffer *buf;
    pinstage_ring *ring;
    pinstage_binding b = pinstage_binding_for_device(3);
    REQUIRE_OK(pinstage_buffer_create(&buf));
    REQUIRE_OK(pinstage_ring_create(&ring, 1, 0));
    CHECK_OK(pinstage_buffer_bind(buf, &b));
    CHECK_OK(pinstage_buffer_bind(buf, &b)); /* rebinding gives the first retain back */
    CHECK_OK(pinstage_ring_bind(ring, &b));
    CHECK_OK(pinstage_buffer_reserve(buf, 64 * K));
    REQUIRE_OK((pinstage_status)get_state(3, &flags, &active));
    CHECK_EQ(active, 1);
    CHECK_OK(pinstage_buffer_free(buf));
    REQUIRE_OK((pinstage_status)get_state(3, &flags, &active));
    CHECK_EQ(active, 1); /* the ring's */
    CHECK_OK(pinstage_ring_free(ring));
    REQUIRE_OK((pinstage_status)get_state(3, &flags, &active));
    CHECK_EQ(active, 0);
    /* Unbinding before use gives it back too. */
    REQUIRE_OK(pinstage_buffer_create(&buf));
    CHECK_OK(pinstage_buffer_bind(buf, &b));
    CHECK_OK(pinstage_buffer_bind(buf, NULL));
    REQUIRE_OK((pinstage_status)get_state(3, &flags, &active));
    CHECK_EQ(active, 0);
    CHECK_OK(pinstage_buffer_free(buf));
}

/* A context the program passes is used, not retained. */
static void a_context_the_program_passes(void) {
    int device = devices >= 2 ? 1 : 0;
    CUcontext ctx = primary_of(device);
    pinstage_binding b = {device, ctx, PINSTAGE_NUMA_NONE};
    pinstage_buffer *buf;
    REQUIRE_OK(pinstage_buffer_create(&buf));
    CHECK_OK(pinstage_buffer_bind(buf, &b));
    CHECK_OK(pinstage_buffer_reserve(buf, 64 * K));
    CHECK_EQ(pinstage_buffer_capacity(buf), 64 * K);
    CHECK_OK(pinstage_buffer_free(buf));
    CHECK_OK(pinstage_context_release(device));
}

/* ---- Placement ------------------------------------------------------------------ */

static char sysfs[64];

static void write_text(const char *rel, const char *text) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", sysfs, rel);
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f)) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
}

/* A host of two nodes as sysfs would describe it: node 0 has the first CPU
 * this process may use, node 1 the others. Returns node 1's CPU count. */
static int fake_two_nodes(void) {
    cpu_set_t mine;
    REQUIRE(sched_getaffinity(0, sizeof mine, &mine) == 0);
    int first = -1;
    char rest[1024] = "";
    for (int i = 0; i < CPU_SETSIZE; i++) {
        if (!CPU_ISSET(i, &mine)) continue;
        if (first < 0) {
            first = i;
            continue;
        }
        snprintf(rest + strlen(rest), sizeof rest - strlen(rest), "%s%d", *rest ? "," : "", i);
    }
    snprintf(sysfs, sizeof sysfs, "/tmp/pinstage-sysfs-XXXXXX");
    REQUIRE(mkdtemp(sysfs) != NULL);
    const char *dirs[] = {"devices", "devices/system", "devices/system/node", "devices/system/node/node0",
                          "devices/system/node/node1"};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        char path[256];
        snprintf(path, sizeof path, "%s/%s", sysfs, dirs[i]);
        REQUIRE(mkdir(path, 0700) == 0);
    }
    char text[1100];
    write_text("devices/system/node/online", "0-1\n");
    snprintf(text, sizeof text, "%d\n", first);
    write_text("devices/system/node/node0/cpulist", text);
    snprintf(text, sizeof text, "%s\n", *rest ? rest : "");
    write_text("devices/system/node/node1/cpulist", text);
    ps_numa_set_sysfs_root(sysfs);
    cpu_set_t node1;
    return ps_numa_node_cpus(1, &node1);
}

static void remove_fake_sysfs(void) {
    ps_numa_set_sysfs_root(NULL);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", sysfs);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", sysfs);
}

/* What the kernel says of fresh memory this thread touches: where placed
 * memory must be found when the node asked for has no memory of its own. */
static int node_of_fresh_memory(void) {
    size_t bytes = 64 * K;
    unsigned char *p = malloc(bytes);
    memset(p, 1, bytes);
    int node = ps_numa_where(p, bytes);
    free(p);
    return node;
}

typedef struct {
    cpu_set_t expected;
    _Atomic int worker_blocks, wrong_cpus;
} affinity_probe;

static void record_affinity(void *arg, size_t block) {
    (void)block;
    affinity_probe *a = arg;
    struct timespec ts = {0, 200000}; /* long enough for a worker to join */
    nanosleep(&ts, NULL);
    if (!ps_pool_thread_index()) return;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) || !CPU_EQUAL(&set, &a->expected)) atomic_fetch_add(&a->wrong_cpus, 1);
    atomic_fetch_add(&a->worker_blocks, 1);
}

static unsigned no_runnable(void) { return 0; }

static void placement_follows_the_devices_numa_nodes(void) {
    if (!emu || devices < 4) {
        printf("# skipped: needs the emulator's four devices and its NUMA map\n");
        return;
    }
    int node1_cpus = fake_two_nodes();
    const int map[4] = {0, 0, 1, 1};
    REQUIRE(emu->set_numa(map, 4) == 0);
    int kernel_node = node_of_fresh_memory();
    pinstage_emu_live before = live_now();
    for (int d = 0; d < 4; d++) {
        int node = -2;
        CHECK_OK(pinstage_device_numa_node(d, &node));
        CHECK_EQ(node, map[d]);
        pinstage_device_info info;
        CHECK_OK(pinstage_device_get_info(d, &info));
        CHECK_EQ(info.numa_node, map[d]);
    }
    device_kit kits[4];
    for (int d = 0; d < 4; d++) kit_make(&kits[d], d, 700 * K, PINSTAGE_NUMA_DEVICE);
    for (int d = 0; d < 4; d++) kit_round_trip(&kits[d], 40 + (unsigned)d);
    for (int d = 0; d < 4; d++) {
        pinstage_placement where;
        CHECK_OK(pinstage_buffer_get_placement(kits[d].buf, &where));
        CHECK_EQ(where.device, d);
        CHECK_EQ(where.device_node, map[d]);
        CHECK_EQ(where.memory_node, map[d]);
        /* Where the pages are is asked of the kernel, not assumed: this
         * host's only real node, whatever the map says. */
        CHECK_EQ(where.memory_found, kernel_node);
        CHECK_EQ(where.worker_node, map[d] == 1 && node1_cpus == 0 ? -1 : map[d]);
        CHECK_EQ(where.pinned_bytes, pinstage_buffer_capacity(kits[d].buf));
        CHECK(where.pinned_bytes > 0);
        CHECK_OK(pinstage_ring_get_placement(kits[d].ring, &where));
        CHECK_EQ(where.memory_node, map[d]);
        CHECK_EQ(where.memory_found, kernel_node);
    }
    /* Placed memory is registered, not allocated by the driver. */
    pinstage_emu_live during = live_now();
    size_t blocks = 0;
    for (int d = 0; d < 4; d++) {
        pinstage_stats st;
        pinstage_ring_stats rst;
        pinstage_buffer_stats(kits[d].buf, &st);
        pinstage_ring_get_stats(kits[d].ring, &rst);
        blocks += st.pinned_allocations + rst.pinned_allocations;
    }
    CHECK(blocks >= 8);
    CHECK_EQ(during.pinned_allocations, before.pinned_allocations);
    /* One block live for each of the 4 buffers and 4 rings (a buffer that
     * grew for its download freed the block before). */
    CHECK_EQ(during.registered_ranges, before.registered_ranges + 8);
    pinstage_pool_info info;
    pinstage_pool_get_info(&info);
    CHECK_EQ(info.pools, node1_cpus ? 2u : 1u);
    /* An explicit node wins; PINSTAGE_NUMA_NONE places nothing. */
    pinstage_buffer *buf;
    pinstage_binding b = {2, NULL, 0};
    REQUIRE_OK(pinstage_buffer_create(&buf));
    CHECK_OK(pinstage_buffer_bind(buf, &b));
    CHECK_OK(pinstage_buffer_reserve(buf, 64 * K));
    pinstage_placement where;
    CHECK_OK(pinstage_buffer_get_placement(buf, &where));
    CHECK_EQ(where.device_node, 1);
    CHECK_EQ(where.memory_node, 0);
    CHECK_EQ(where.worker_node, 0);
    CHECK_OK(pinstage_buffer_free(buf));
    b.numa_node = PINSTAGE_NUMA_NONE;
    REQUIRE_OK(pinstage_buffer_create(&buf));
    CHECK_OK(pinstage_buffer_bind(buf, &b));
    CHECK_OK(pinstage_buffer_get_placement(buf, &where));
    CHECK_EQ(where.memory_node, -1);
    CHECK_EQ(where.worker_node, -1);
    CHECK_OK(pinstage_buffer_free(buf));
    for (int d = 0; d < 4; d++) kit_free(&kits[d]);
    CHECK_NO_LEAK(before);
    /* Node 1's workers run on node 1's CPUs only. */
    if (node1_cpus >= 1) {
        cpu_set_t node0;
        affinity_probe a;
        memset(&a, 0, sizeof a);
        ps_numa_node_cpus(1, &a.expected);
        ps_numa_node_cpus(0, &node0);
        REQUIRE(sched_setaffinity(0, sizeof node0, &node0) == 0); /* the poster on node 0 */
        ps_cpus_set_probe(no_runnable);
        CHECK_OK(pinstage_pool_set_threads(2));
        ps_pool *pool = ps_pool_for_node(1);
        CHECK_EQ(ps_pool_node(pool), 1);
        ps_pool_run(pool, 64, 2, record_affinity, &a);
        CHECK(atomic_load(&a.worker_blocks) > 0);
        CHECK_EQ(atomic_load(&a.wrong_cpus), 0);
        CHECK_OK(pinstage_pool_set_threads(PINSTAGE_POOL_AUTO));
        ps_cpus_set_probe(NULL);
        cpu_set_t all;
        CPU_ZERO(&all);
        for (int i = 0; i < CPU_SETSIZE; i++) CPU_SET(i, &all);
        sched_setaffinity(0, sizeof all, &all);
    } else {
        printf("# one CPU: node 1 of the made-up host has none, its workers are not checked\n");
    }
    REQUIRE(emu->set_numa(NULL, 0) == 0);
    remove_fake_sysfs();
}

/* On any host: an explicit node places the memory (registered) and the
 * kernel's answer is reported. */
static void an_explicit_node_on_this_host(void) {
    device_kit k;
    kit_make(&k, 0, 2u << 20, 0);
    kit_round_trip(&k, 60);
    pinstage_placement where;
    CHECK_OK(pinstage_buffer_get_placement(k.buf, &where));
    CHECK_EQ(where.memory_node, 0);
    CHECK_EQ(where.memory_found, node_of_fresh_memory());
    printf("# node 0 asked: pages found on node %d (-1: the kernel does not say)\n", where.memory_found);
    kit_free(&k);
}

/* ---- Several devices at once ------------------------------------------------------ */

typedef struct {
    int device;
    unsigned rounds;
    _Atomic int *go;
} runner;

static void *run_device(void *arg) {
    runner *r = arg;
    device_kit k;
    /* Each thread starts with device 0's context current, as threads of a
     * program that set it once do; its objects switch. */
    REQUIRE_OK(pinstage_context_init(0));
    kit_make(&k, r->device, 1u << 20, PINSTAGE_NUMA_DEVICE);
    while (!atomic_load(r->go)) sched_yield();
    for (unsigned i = 0; i < r->rounds; i++) kit_round_trip(&k, 100u * (unsigned)r->device + i);
    kit_free(&k);
    CHECK_OK(pinstage_context_release(0));
    return NULL;
}

static void every_device_at_once_from_its_own_thread(void) {
    int threads = devices >= 2 ? 2 * devices : 2;
    pthread_t t[16];
    runner r[16];
    _Atomic int go = 0;
    for (int i = 0; i < threads && i < 16; i++) {
        r[i] = (runner){i % devices, emu ? 6u : 20u, &go};
        REQUIRE(pthread_create(&t[i], NULL, run_device, &r[i]) == 0);
    }
    atomic_store(&go, 1);
    for (int i = 0; i < threads && i < 16; i++) pthread_join(t[i], NULL);
}

/* One thread drives every device, switching nothing itself. */
static void one_thread_drives_every_device(void) {
    device_kit kits[8];
    int n = devices < 8 ? devices : 8;
    for (int d = 0; d < n; d++) kit_make(&kits[d], d, 512 * K, PINSTAGE_NUMA_DEVICE);
    for (unsigned round = 0; round < 3; round++)
        for (int d = 0; d < n; d++) kit_round_trip(&kits[d], 200u + 10u * round + (unsigned)d);
    for (int d = 0; d < n; d++) kit_free(&kits[d]);
}

/* A device that fails (a sticky error) fails its own objects' calls; the
 * others carry on, and the failed one's buffer works once it heals. */
static void a_failing_device_leaves_the_others_alone(void) {
    if (!emu || devices < 2) {
        printf("# skipped: needs two emulated devices\n");
        return;
    }
    device_kit a, b;
    kit_make(&a, 0, 300 * K, PINSTAGE_NUMA_DEVICE);
    kit_make(&b, 1, 300 * K, PINSTAGE_NUMA_DEVICE);
    kit_round_trip(&a, 1);
    kit_round_trip(&b, 2);
    pinstage_stats before, after;
    pinstage_buffer_stats(b.buf, &before);
    REQUIRE(emu->fail_device(1, 700) == 0);
    fill_pattern(b.host, b.bytes, 3);
    CHECK_STATUS(pinstage_buffer_upload_u8(b.buf, b.dev, b.host, b.bytes, b.stream), 700);
    CHECK_STATUS(pinstage_ring_upload_async(b.ring, b.dev, b.host, b.bytes, b.stream), 700);
    pinstage_buffer_stats(b.buf, &after);
    CHECK_EQ(after.staged_transfers, before.staged_transfers);
    for (unsigned i = 0; i < 3; i++) kit_round_trip(&a, 10 + i);
    REQUIRE(emu->fail_device(1, 0) == 0);
    kit_round_trip(&b, 20);
    kit_free(&a);
    kit_free(&b);
}

int main(void) {
    test_setup();
    REQUIRE_OK(pinstage_device_count(&devices));
    printf("# %d device(s), %d NUMA node(s) on this host\n", devices, ps_numa_node_count());
    pinstage_emu_live start = live_now();
    RUN(bad_bindings_change_nothing_and_call_no_driver);
    RUN(bound_objects_use_their_own_context);
    RUN(a_binding_holds_the_primary_context_until_freed);
    RUN(a_context_the_program_passes);
    RUN(placement_follows_the_devices_numa_nodes);
    RUN(an_explicit_node_on_this_host);
    RUN(one_thread_drives_every_device);
    RUN(every_device_at_once_from_its_own_thread);
    RUN(a_failing_device_leaves_the_others_alone);
    check_current_test = "no_leaks";
    CHECK_NO_LEAK(start);
    CHECK_EQ(live_now().registered_ranges, start.registered_ranges);
    size_t held = 1;
    pinstage_get_pinned_usage(&held, NULL);
    CHECK_EQ(held, 0);
    return test_finish();
}
