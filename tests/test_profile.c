/* SPDX-License-Identifier: MIT */
/* Machine profiles: calibration, the text format (save, load, damaged and
 * foreign files refused with the reason), fixed plans, the process default,
 * a buffer's own profile, and PINSTAGE_PROFILE at start-up. */
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

static char dir[] = "/tmp/pinstage_profile_XXXXXX";

static char *path_in_dir(const char *name) {
    static char path[8][256];
    static int next;
    char *p = path[next++ % 8];
    snprintf(p, 256, "%s/%s", dir, name);
    return p;
}

static char *read_text(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    static char text[16384];
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = 0;
    fclose(f);
    return text;
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

/* Replaces the first occurrence of `from` in the saved profile and writes it out. */
static void write_edited(const char *src_text, const char *from, const char *to, const char *path) {
    char edited[16384];
    const char *at = strstr(src_text, from);
    if (!at) {
        write_text(path, src_text);
        return;
    }
    snprintf(edited, sizeof edited, "%.*s%s%s", (int)(at - src_text), src_text, to, at + strlen(from));
    write_text(path, edited);
}

static pinstage_profile *measured;

static void calibration_measures_every_class(void) {
    if (emu) emu->set_timing(1, 1000); /* fast DMAs: this checks the procedure, not figures */
    CHECK_OK(pinstage_profile_calibrate(&measured, 0));
    if (emu) emu->set_timing(20, 4);
    if (!measured) return;
    size_t len = pinstage_profile_describe(measured, NULL, 0);
    char *text = malloc(len + 1);
    CHECK_EQ(pinstage_profile_describe(measured, text, len + 1), len);
    CHECK(strstr(text, "origin measured\n") != NULL);
    pinstage_device_info info;
    REQUIRE_OK(pinstage_device_get_info(0, &info));
    char device[300];
    snprintf(device, sizeof device, "device %s\n", info.name);
    CHECK(strstr(text, device) != NULL);
    for (int d = 0; d < 2; d++)
        for (size_t bytes = 4096; bytes <= ((size_t)256 << 20); bytes *= 2) {
            pinstage_plan plan;
            CHECK_OK(pinstage_profile_plan(measured, d ? PINSTAGE_D2H : PINSTAGE_H2D, bytes, &plan));
            CHECK(plan.route >= PINSTAGE_ROUTE_PAGEABLE && plan.route <= PINSTAGE_ROUTE_ENGINE);
            /* Downloads run in chunks of at most 2 MiB: a larger candidate
             * would have been timed as a 2 MiB one and named wrongly. */
            CHECK(plan.chunk <= (d ? ((size_t)2 << 20) : ((size_t)8 << 20)));
        }
    /* Neither column of a download row names a chunk above 2 MiB. */
    for (const char *row = strstr(text, "\nd2h "); row; row = strstr(row + 1, "\nd2h ")) {
        unsigned long long bytes, best_chunk, staging_chunk;
        char best[16], staging[16];
        CHECK_EQ(sscanf(row, " d2h %llu %15s %llu %*u %15s %llu", &bytes, best, &best_chunk, staging, &staging_chunk),
                 5);
        CHECK(best_chunk <= ((size_t)2 << 20) && staging_chunk <= ((size_t)2 << 20));
    }
    /* A measured row carries its times. */
    CHECK(strstr(text, "\nh2d        4096  ") != NULL);
    free(text);
    /* snprintf-style: a short buffer gets a terminated prefix. */
    char small[16];
    CHECK_EQ(pinstage_profile_describe(measured, small, sizeof small), len);
    CHECK_EQ(strlen(small), sizeof small - 1);
}

static void save_and_load_round_trip(void) {
    if (!measured) return;
    char *path = path_in_dir("measured.txt");
    CHECK_OK(pinstage_profile_save(measured, path));
    pinstage_profile *loaded = NULL;
    CHECK_OK(pinstage_profile_load(&loaded, path));
    char a[16384], b[16384];
    pinstage_profile_describe(measured, a, sizeof a);
    pinstage_profile_describe(loaded, b, sizeof b);
    CHECK(strcmp(a, b) == 0);
    pinstage_profile_free(loaded);
    CHECK_STATUS(pinstage_profile_save(measured, "/nonexistent-dir/p.txt"), 304);
    CHECK_MESSAGE("cannot write '/nonexistent-dir/p.txt'");
}

static void damaged_and_foreign_files_are_refused(void) {
    if (!measured) return;
    char good[16384];
    pinstage_profile_describe(measured, good, sizeof good);
    pinstage_device_info info;
    REQUIRE_OK(pinstage_device_get_info(0, &info));
    char device[300];
    snprintf(device, sizeof device, "device %s", info.name);
    struct {
        const char *from, *to, *why;
    } edits[] = {
        {"pinstage-profile 1", "pinstage-config 1", "not a pinstage profile"},
        {"pinstage-profile 1", "pinstage-profile 2", "format this version of pinstage does not read"},
        {"origin measured", "origin guessed", "expected 'origin"},
        {"\nh2d        8192", "\nh2d        9999", "expected the row 'h2d 8192'"},
        {"\nd2h        4096  ", "\nd2h        4096  teleport ", "expected 11 columns"},
        {"end\n", "", "expected 'end'"},
        {"end\n", "end\nmore\n", "text after 'end'"},
        {device, "device Some Other GPU", "was measured on a Some Other GPU"},
        {"driver ", "driver 1", "was measured with driver version 1"},
    };
    for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
        char *path = path_in_dir("damaged.txt");
        write_edited(good, edits[i].from, edits[i].to, path);
        pinstage_profile *p = (pinstage_profile *)0x1;
        CHECK_STATUS(pinstage_profile_load(&p, path), PINSTAGE_ERROR_INVALID_VALUE);
        CHECK_MESSAGE(edits[i].why);
        CHECK_MESSAGE(path);
        CHECK(p == NULL);
    }
    /* A truncated file: every prefix is refused. */
    for (size_t cut = 0; cut + 1 < strlen(good); cut += 97) {
        char *path = path_in_dir("cut.txt"), saved = good[cut];
        good[cut] = 0;
        write_text(path, good);
        good[cut] = saved;
        pinstage_profile *p;
        CHECK_STATUS(pinstage_profile_load(&p, path), PINSTAGE_ERROR_INVALID_VALUE);
    }
    pinstage_profile *p;
    CHECK_STATUS(pinstage_profile_load(&p, path_in_dir("missing.txt")), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_MESSAGE("cannot read");
    CHECK_STATUS(pinstage_profile_load(NULL, "x"), PINSTAGE_ERROR_INVALID_VALUE);
}

static void fixed_profiles_and_plans(void) {
    pinstage_profile *p;
    CHECK_STATUS(pinstage_profile_fixed(&p, 7, 0, 0), PINSTAGE_ERROR_INVALID_VALUE);
    CHECK_MESSAGE("route=7");
    CHECK_OK(pinstage_profile_fixed(&p, PINSTAGE_ROUTE_ENGINE, 1 << 20, 4));
    pinstage_plan plan;
    CHECK_OK(pinstage_profile_plan(p, PINSTAGE_D2H, 123456789, &plan));
    CHECK_EQ(plan.route, PINSTAGE_ROUTE_ENGINE);
    CHECK_EQ(plan.chunk, 1 << 20);
    CHECK_EQ(plan.threads, 4);
    CHECK_STATUS(pinstage_profile_plan(p, (pinstage_direction)5, 1, &plan), PINSTAGE_ERROR_INVALID_VALUE);
    /* A fixed profile survives the file format too (no machine check). */
    char *path = path_in_dir("fixed.txt");
    CHECK_OK(pinstage_profile_save(p, path));
    pinstage_profile *back;
    CHECK_OK(pinstage_profile_load(&back, path));
    CHECK_OK(pinstage_profile_plan(back, PINSTAGE_H2D, 4096, &plan));
    CHECK_EQ(plan.route, PINSTAGE_ROUTE_ENGINE);
    pinstage_profile_free(back);
    pinstage_profile_free(p);
    pinstage_profile_free(NULL);
}

/* A transfer takes the plan of the nearest class on a log scale: 4, 6, 8,
 * 12 KiB... Each class here names itself in its thread count. */
static void transfers_use_the_nearest_class(void) {
    char text[16384], *at = text;
    at += sprintf(at, "pinstage-profile 1\norigin builtin\ndevice any\npci any\ndriver 0\nthreads 16\n");
    for (int d = 0; d < 2; d++)
        for (int c = 0; c < 33; c++) {
            size_t bytes = ((size_t)1 << (c / 2 + 12)) + (c % 2 ? ((size_t)1 << (c / 2 + 11)) : 0);
            at += sprintf(at, "%s %zu engine 0 %d engine 0 %d 0 0 0\n", d ? "d2h" : "h2d", bytes, c + 1, c + 1);
        }
    sprintf(at, "end\n");
    char *path = path_in_dir("classes.txt");
    write_text(path, text);
    pinstage_profile *p;
    REQUIRE_OK(pinstage_profile_load(&p, path));
    struct {
        size_t bytes;
        unsigned cls;
    } cases[] = {{1, 0},          {4096, 0},     {5000, 0},        {5100, 1},        {6144, 1},
                 {7000, 1},       {7200, 2},     {150528, 10},     {196608, 11},     {4915200, 20},
                 {64u << 20, 28}, {100u << 20, 29}, {(size_t)1 << 40, 32}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pinstage_plan plan;
        CHECK_OK(pinstage_profile_plan(p, PINSTAGE_D2H, cases[i].bytes, &plan));
        if (plan.threads != cases[i].cls + 1) fprintf(stderr, "  %zu bytes\n", cases[i].bytes);
        CHECK_EQ(plan.threads, cases[i].cls + 1);
    }
    pinstage_profile_free(p);
}

static void counts_for_one_upload(pinstage_buffer *buf, pinstage_stats *st) {
    static unsigned char src[8192];
    pinstage_devbuf *d;
    REQUIRE_OK(pinstage_devbuf_alloc_u8(&d, sizeof src));
    CHECK_OK(pinstage_buffer_upload(buf, d, src, sizeof src, NULL));
    pinstage_buffer_stats(buf, st);
    pinstage_devbuf_free(d);
}

/* The default profile routes every buffer that has none of its own; a
 * buffer's own profile and an explicit threshold win. */
static void default_and_buffer_profiles(void) {
    pinstage_profile *pageable, *staged, *got;
    REQUIRE_OK(pinstage_profile_fixed(&pageable, PINSTAGE_ROUTE_PAGEABLE, 0, 0));
    REQUIRE_OK(pinstage_profile_fixed(&staged, PINSTAGE_ROUTE_STAGED, 0, 1));
    pinstage_buffer *buf;
    pinstage_stats st;
    REQUIRE_OK(pinstage_buffer_create(&buf));
    CHECK_OK(pinstage_profile_set_default(pageable));
    counts_for_one_upload(buf, &st);
    CHECK_EQ(st.pageable_transfers, 1);
    CHECK_OK(pinstage_profile_set_default(staged));
    counts_for_one_upload(buf, &st);
    CHECK_EQ(st.staged_transfers, 1);
    CHECK_OK(pinstage_profile_get_default(&got));
    char a[16384], b[16384];
    pinstage_profile_describe(got, a, sizeof a);
    pinstage_profile_describe(staged, b, sizeof b);
    CHECK(strcmp(a, b) == 0);
    pinstage_profile_free(got);
    /* The buffer's own profile wins over the default. */
    CHECK_OK(pinstage_buffer_set_profile(buf, pageable));
    counts_for_one_upload(buf, &st);
    CHECK_EQ(st.pageable_transfers, 2);
    /* A threshold wins over both: staged at or below it, through the
     * profile's staging route. */
    pinstage_buffer_set_auto_stage_max_bytes(buf, SIZE_MAX);
    counts_for_one_upload(buf, &st);
    CHECK_EQ(st.staged_transfers, 2);
    CHECK_EQ(st.engine_transfers, 1); /* a pageable profile stages through the engine */
    CHECK_OK(pinstage_buffer_set_profile(buf, NULL));
    CHECK_OK(pinstage_profile_set_default(NULL));
    CHECK_OK(pinstage_profile_get_default(&got));
    pinstage_profile_describe(got, a, sizeof a);
    CHECK(strstr(a, "origin builtin\n") != NULL);
    pinstage_profile_free(got);
    CHECK_STATUS(pinstage_buffer_set_profile(NULL, NULL), PINSTAGE_ERROR_INVALID_VALUE);
    pinstage_buffer_free(buf);
    pinstage_profile_free(pageable);
    pinstage_profile_free(staged);
}

/* PINSTAGE_PROFILE is read at the first transfer: a good file routes, a
 * damaged one leaves a warning and the built-in profile. */
static int child(const char *expect) {
    test_setup();
    pinstage_buffer *buf;
    pinstage_stats st;
    REQUIRE_OK(pinstage_buffer_create(&buf));
    counts_for_one_upload(buf, &st);
    pinstage_profile *got;
    REQUIRE_OK(pinstage_profile_get_default(&got));
    char text[16384];
    pinstage_profile_describe(got, text, sizeof text);
    pinstage_profile_free(got);
    pinstage_buffer_free(buf);
    if (!strcmp(expect, "staged")) CHECK(st.staged_transfers == 1 && strstr(text, "origin fixed\n"));
    else CHECK(strstr(text, "origin builtin\n") != NULL);
    return test_finish();
}

static void profile_from_the_environment(void) {
    pinstage_profile *staged;
    REQUIRE_OK(pinstage_profile_fixed(&staged, PINSTAGE_ROUTE_STAGED, 0, 1));
    char *good = path_in_dir("env.txt"), *bad = path_in_dir("env-bad.txt");
    REQUIRE_OK(pinstage_profile_save(staged, good));
    pinstage_profile_free(staged);
    write_text(bad, "pinstage-profile 1\norigin fixed\n");
    const char *cases[][2] = {{good, "staged"}, {bad, "builtin"}};
    for (int i = 0; i < 2; i++) {
        char err[256];
        snprintf(err, sizeof err, "%s/stderr.txt", dir);
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            setenv("PINSTAGE_PROFILE", cases[i][0], 1);
            if (!freopen(err, "w", stderr)) _exit(3);
            execl("/proc/self/exe", "test_profile", "child", cases[i][1], (char *)NULL);
            _exit(3);
        }
        int status = 0;
        waitpid(pid, &status, 0);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        const char *text = read_text(err);
        if (i == 1) CHECK(text && strstr(text, "PINSTAGE_PROFILE not used") && strstr(text, "env-bad.txt"));
        else CHECK(text && !strstr(text, "PINSTAGE_PROFILE"));
    }
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "child")) return child(argv[2]);
    if (!mkdtemp(dir)) return 1;
    test_setup();
    pinstage_emu_live before = live_now();
    RUN(calibration_measures_every_class);
    RUN(save_and_load_round_trip);
    RUN(damaged_and_foreign_files_are_refused);
    RUN(fixed_profiles_and_plans);
    RUN(transfers_use_the_nearest_class);
    RUN(default_and_buffer_profiles);
    RUN(profile_from_the_environment);
    check_current_test = "no_leaks";
    CHECK_NO_LEAK(before);
    pinstage_profile_free(measured);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) return 1;
    return test_finish();
}
