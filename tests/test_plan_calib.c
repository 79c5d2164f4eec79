/* The planner's calibration (src/train/plan_calib.c): ZT_PLAN_CALIBRATION's figures and its
 * refusals, calibration files read back as given, and measuring every figure here (also under
 * mpirun, where every rank must end with the same figures). No check reads a speed: the machine
 * running the tests may be loaded, so only sources, signs and agreement are checked. */
#include <stdlib.h>

#include "zt/plan.h"
#include "zt_test.h"

static zt_comm *g_world;
static int R, N;

#define ENV "ZT_PLAN_CALIBRATION"

static bool same_calibration(const zt_plan_calibration *a, const zt_plan_calibration *b) {
  return memcmp(a, b, sizeof *a) == 0;
}

/* Every key with its value and suffix; the older names; a figure not given stays as it was. */
static void test_env_good(void) {
  zt_plan_calibration c, d;
  zt_plan_calibration_default(&c);
  d = c;
  unsetenv(ENV);
  ZT_CHECK_OK(zt_plan_calibration_env(&c));
  ZT_CHECK(same_calibration(&c, &d));
  setenv(ENV, "", 1);
  ZT_CHECK_OK(zt_plan_calibration_env(&c));
  ZT_CHECK(same_calibration(&c, &d));

  setenv(ENV, "gemm=40,attn=12.5,elem=2G,read=1G,write=512M,lat=2e-5,bw=1.5G,base=24M", 1);
  ZT_CHECK_OK(zt_plan_calibration_env(&c));
  const double want[ZT_PLAN_FIG_COUNT] = {40, 12.5, 2.0 * 1073741824, 1073741824, 512.0 * 1048576,
                                          2e-5, 1.5 * 1073741824, 24.0 * 1048576};
  for (int f = 0; f < ZT_PLAN_FIG_COUNT; f++) {
    ZT_CHECK(c.value[f] == want[f]);
    ZT_CHECK(c.source[f] == ZT_PLAN_SOURCE_GIVEN);
    ZT_CHECK(c.spread[f] == 0);
  }

  zt_plan_calibration_default(&c);
  setenv(ENV, "gflops=30,rss=10M,elem=64K", 1); /* the --mem-limit planner's names */
  ZT_CHECK_OK(zt_plan_calibration_env(&c));
  ZT_CHECK(c.value[ZT_PLAN_FIG_GEMM] == 30 && c.source[ZT_PLAN_FIG_GEMM] == ZT_PLAN_SOURCE_GIVEN);
  ZT_CHECK(c.value[ZT_PLAN_FIG_BASE] == 10.0 * 1048576 && c.source[ZT_PLAN_FIG_BASE] == ZT_PLAN_SOURCE_GIVEN);
  ZT_CHECK(c.value[ZT_PLAN_FIG_ELEM] == 65536 && c.source[ZT_PLAN_FIG_ELEM] == ZT_PLAN_SOURCE_GIVEN);
  for (int f = 0; f < ZT_PLAN_FIG_COUNT; f++)
    if (f != ZT_PLAN_FIG_GEMM && f != ZT_PLAN_FIG_BASE && f != ZT_PLAN_FIG_ELEM)
      ZT_CHECK(c.value[f] == d.value[f] && c.source[f] == ZT_PLAN_SOURCE_DEFAULT);
  /* a later item wins */
  setenv(ENV, "gemm=30,gflops=35", 1);
  ZT_CHECK_OK(zt_plan_calibration_env(&c));
  ZT_CHECK(c.value[ZT_PLAN_FIG_GEMM] == 35);
  unsetenv(ENV);
}

/* Bad text is refused naming the variable and the syntax, and changes nothing. */
static void test_env_bad(void) {
  const char *bad[] = {"gemm=0",   "attn=fast", "lat=1e-5,speed=3", "gemm=40,", "=5",     "gemm",
                       "elem=-1",  "bw=1X",     "read=1G write=1G",  ",gemm=4",  "base=inf", "gemm=nan",
                       "Gemm=40",  "gemm=40,,attn=3"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    zt_plan_calibration c, d;
    zt_plan_calibration_default(&c);
    c.value[ZT_PLAN_FIG_GEMM] = 7, c.source[ZT_PLAN_FIG_GEMM] = ZT_PLAN_SOURCE_MEASURED;
    d = c;
    setenv(ENV, bad[i], 1);
    ZT_CHECK_ERR(zt_plan_calibration_env(&c), ZT_STATUS_INVALID_ARG, ENV);
    ZT_CHECK(strstr(zt_last_error(), "gemm=") != NULL); /* the syntax */
    if (!same_calibration(&c, &d)) zt_test_fail(__FILE__, __LINE__, "'%s' changed the calibration", bad[i]);
  }
  unsetenv(ENV);
}

/* Written and read back: every value exactly, the spreads, world, threads and reps; every figure
 * read becomes given. A file of a few figures changes only those; unknown keys are refused naming
 * the file. */
static void test_file(void) {
  if (!zt_test_tmpdir_make("plan_calib")) return;
  zt_plan_calibration c, d;
  zt_plan_calibration_default(&c);
  c.world = 4, c.threads = 3, c.reps = 5;
  const double vals[ZT_PLAN_FIG_COUNT] = {0.1, 1.0 / 3.0, 123456789.25, 1e9 + 0.5, 7e8, 1.25e-5, 3.3e9, 201326592};
  for (int f = 0; f < ZT_PLAN_FIG_COUNT; f++) {
    c.value[f] = vals[f];
    c.source[f] = (zt_plan_source)(f % 3);
    c.spread[f] = f * 0.01;
  }
  char path[512];
  zt_test_tmp_path_to(path, sizeof path, "cal.json");
  ZT_CHECK_OK(zt_plan_calibration_write(&c, path));
  zt_plan_calibration_default(&d);
  ZT_CHECK_OK(zt_plan_calibration_read(path, &d));
  ZT_CHECK(d.world == 4 && d.threads == 3 && d.reps == 5);
  for (int f = 0; f < ZT_PLAN_FIG_COUNT; f++) {
    if (d.value[f] != vals[f]) zt_test_fail(__FILE__, __LINE__, "%s read %.17g, wrote %.17g", zt_plan_figure_name(f), d.value[f], vals[f]);
    ZT_CHECK(d.source[f] == ZT_PLAN_SOURCE_GIVEN);
    ZT_CHECK(d.spread[f] == c.spread[f]);
  }

  /* a few figures: the rest stay as they were */
  const char *part = "{\"figures\": {\"attn_gflops\": {\"value\": 9.5}}}";
  zt_test_write_file(path, part, strlen(part));
  zt_plan_calibration_default(&d);
  zt_plan_calibration e = d;
  ZT_CHECK_OK(zt_plan_calibration_read(path, &d));
  for (int f = 0; f < ZT_PLAN_FIG_COUNT; f++)
    if (f == ZT_PLAN_FIG_ATTN) ZT_CHECK(d.value[f] == 9.5 && d.source[f] == ZT_PLAN_SOURCE_GIVEN);
    else ZT_CHECK(d.value[f] == e.value[f] && d.source[f] == ZT_PLAN_SOURCE_DEFAULT);

  const struct {
    const char *text, *says;
  } bad[] = {
      {"{\"world\": 1, \"speed\": 3}", "unknown key 'speed'"},
      {"{\"figures\": {\"gemm\": {\"value\": 3}}}", "unknown figure 'gemm'"},
      {"{\"figures\": {\"gemm_gflops\": {\"value\": 3, \"unit\": \"G\"}}}", "unknown key 'unit'"},
      {"{\"figures\": {\"gemm_gflops\": {\"value\": 0}}}", "above 0"},
      {"{\"figures\": {\"gemm_gflops\": {\"spread\": 0}}}", "no value"},
      {"{\"figures\": {\"gemm_gflops\": {\"value\": 1, \"source\": \"guessed\"}}}", "source"},
      {"{\"world\": 0}", "world"},
      {"[1, 2]", "not a JSON object"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    zt_test_write_file(path, bad[i].text, strlen(bad[i].text));
    zt_plan_calibration_default(&d);
    e = d;
    ZT_CHECK_ERR(zt_plan_calibration_read(path, &d), ZT_STATUS_INVALID_ARG, bad[i].says);
    if (!strstr(zt_last_error(), path)) zt_test_fail(__FILE__, __LINE__, "'%s': the message does not name the file", bad[i].text);
    ZT_CHECK(same_calibration(&d, &e)); /* nothing read from a refused file */
  }
  /* not JSON: the reader's own error (ZT_STATUS_IO), naming the file */
  zt_test_write_file(path, "{\"figures\": ", strlen("{\"figures\": "));
  zt_clear_error();
  ZT_CHECK(zt_plan_calibration_read(path, &d) != ZT_OK && strstr(zt_last_error(), path));
  zt_clear_error();
  ZT_CHECK(zt_plan_calibration_read(zt_test_tmp_path("missing.json"), &d) != ZT_OK);
  zt_test_tmpdir_remove();
}

/* Every rank's calibration the same as rank 0's, bit for bit. */
static void check_same_on_ranks(const zt_plan_calibration *c) {
  if (N <= 1) return;
  double mine[2 * ZT_PLAN_FIG_COUNT + 3];
  for (int f = 0; f < ZT_PLAN_FIG_COUNT; f++) mine[2 * f] = c->value[f], mine[2 * f + 1] = c->source[f];
  mine[2 * ZT_PLAN_FIG_COUNT] = c->world, mine[2 * ZT_PLAN_FIG_COUNT + 1] = c->threads;
  mine[2 * ZT_PLAN_FIG_COUNT + 2] = c->reps;
  int n = 2 * ZT_PLAN_FIG_COUNT + 3;
  zt_tensor *in = NULL, *out = NULL;
  ZT_CHECK_OK(zt_tensor_from_data(1, (int64_t[]){n}, ZT_DTYPE_F64, mine, &in));
  ZT_CHECK_OK(zt_tensor_zeros(1, (int64_t[]){(int64_t)N * n}, ZT_DTYPE_F64, ZT_CPU, &out));
  ZT_CHECK_OK(zt_all_gather(g_world, in, out));
  for (int r = 1; r < N; r++)
    for (int i = 0; i < n; i++)
      if (zt_tensor_get(out, (int64_t)r * n + i) != zt_tensor_get(out, i))
        zt_test_fail(__FILE__, __LINE__, "rank %d's slot %d is %.17g, rank 0's %.17g", r, i,
                     zt_tensor_get(out, (int64_t)r * n + i), zt_tensor_get(out, i));
  zt_tensor_free(in), zt_tensor_free(out);
}

static void calibrate_preset(const char *preset, int reps) {
  char dir[512];
  zt_test_shared_tmpdir(g_world, "plan_calib_disk", dir, sizeof dir);
  zt_plan_space sp;
  zt_plan_space_default(&sp);
  ZT_CHECK_OK(zt_lm_preset(preset, &sp.model));
  sp.batch = 4 * N, sp.seq = 64, sp.world = N;
  int64_t live = zt_test_live_bytes();
  zt_rng_state rng = zt_rng_get_state();
  zt_plan_calibration c;
  ZT_CHECK_OK(zt_plan_calibrate(g_world, &sp, dir, reps, &c));
  zt_rng_state after = zt_rng_get_state();
  ZT_CHECK(after.seed == rng.seed && after.offset == rng.offset); /* a later run draws the same */
  ZT_CHECK(zt_test_live_bytes() == live);
  ZT_CHECK(c.world == N && c.reps == reps && c.threads >= 1);
  const zt_plan_figure compute[] = {ZT_PLAN_FIG_GEMM, ZT_PLAN_FIG_ATTN, ZT_PLAN_FIG_ELEM,
                                    ZT_PLAN_FIG_READ, ZT_PLAN_FIG_WRITE, ZT_PLAN_FIG_BASE};
  for (size_t i = 0; i < sizeof compute / sizeof *compute; i++) {
    zt_plan_figure f = compute[i];
    if (c.source[f] != ZT_PLAN_SOURCE_MEASURED || !(c.value[f] > 0) || !isfinite(c.value[f]) || !(c.spread[f] >= 0) ||
        !isfinite(c.spread[f]))
      zt_test_fail(__FILE__, __LINE__, "%s %s: %s %.6g, spread %.3g", preset, zt_plan_figure_name(f),
                   zt_plan_source_name(c.source[f]), c.value[f], c.spread[f]);
  }
  zt_plan_calibration d;
  zt_plan_calibration_default(&d);
  for (int f = ZT_PLAN_FIG_COMM_LAT; f <= ZT_PLAN_FIG_COMM_BW; f++) {
    if (N > 1)
      ZT_CHECK(c.source[f] == ZT_PLAN_SOURCE_MEASURED && c.value[f] > 0 && isfinite(c.value[f]));
    else
      ZT_CHECK(c.source[f] == ZT_PLAN_SOURCE_DEFAULT && c.value[f] == d.value[f]);
  }
  check_same_on_ranks(&c);
  if (R == 0) {
    char line[1024]; /* one write, so that the ranks' and the runner's lines do not interleave */
    int n = snprintf(line, sizeof line, "%s at %d rank(s):", preset, N);
    for (int f = 0; f < ZT_PLAN_FIG_COUNT && n > 0 && (size_t)n < sizeof line; f++)
      n += snprintf(line + n, sizeof line - (size_t)n, " %s %.4g (%s, spread %.2f)", zt_plan_figure_name(f), c.value[f],
                    zt_plan_source_name(c.source[f]), c.spread[f]);
    fprintf(stderr, "%s\n", line);
  }
  ZT_CHECK_OK(zt_barrier(g_world));
  if (R == 0) zt_test_tmpdir_remove();
}

static void test_calibrate_gpt2(void) { calibrate_preset("gpt2-tiny", 3); }
static void test_calibrate_llama(void) { calibrate_preset("llama-tiny", 1); }

/* Without a group the communication figures stay defaults; bad arguments fail on every rank. */
static void test_calibrate_alone_and_bad(void) {
  zt_plan_space sp;
  zt_plan_space_default(&sp);
  sp.batch = 2, sp.seq = 32;
  zt_plan_calibration c;
  ZT_CHECK_OK(zt_plan_calibrate(NULL, &sp, NULL, 1, &c));
  ZT_CHECK(c.world == 1 && c.source[ZT_PLAN_FIG_GEMM] == ZT_PLAN_SOURCE_MEASURED);
  ZT_CHECK(c.source[ZT_PLAN_FIG_COMM_LAT] == ZT_PLAN_SOURCE_DEFAULT && c.source[ZT_PLAN_FIG_COMM_BW] == ZT_PLAN_SOURCE_DEFAULT);
  ZT_CHECK_ERR(zt_plan_calibrate(g_world, &sp, NULL, 0, &c), ZT_STATUS_INVALID_ARG, "reps");
  sp.seq = 0;
  ZT_CHECK_ERR(zt_plan_calibrate(g_world, &sp, NULL, 1, &c), ZT_STATUS_INVALID_ARG, "seq");
  sp.seq = 32;
  ZT_CHECK(zt_plan_calibrate(g_world, &sp, "/nonexistent/zt_plan_calib", 1, &c) != ZT_OK);
}

int main(int argc, char **argv) {
  (void)argc, (void)argv;
  if (!(g_world = zt_test_world(&R, &N))) return 1;
  ZT_RUN(test_env_good);
  ZT_RUN(test_env_bad);
  ZT_RUN(test_file);
  ZT_RUN(test_calibrate_gpt2);
  ZT_RUN(test_calibrate_llama);
  ZT_RUN(test_calibrate_alone_and_bad);
  int rc = zt_test_finish();
  zt_comm_free(g_world);
  return rc;
}
