/* Pipeline schedules as data (zt/pipeline.h): every generator validates (plain and lowered)
 * at P = 2, 4, 8 and M = P, 2P, 4P or names its minimum M; the text form round-trips; the
 * validator names each broken rule; the simulator reproduces the papers' bubbles and the
 * V-shape families' memory ratios with zero communication. Bad input (issue 25): sizes bounded
 * before allocation, files that are not regular text refused, costs finite, the order check
 * linear; lowering keeps every valid schedule valid (random schedules). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "zt/pipeline.h"
#include "zt_test.h"

static const char *const FAMILIES[] = {"gpipe", "1f1b",  "interleaved", "zb-h1",     "zb-h2",
                                       "zb-v",  "v-half", "v-min",      "dualpipev", "auto"};
enum { N_FAMILIES = sizeof FAMILIES / sizeof *FAMILIES };

static zt_pipeline_schedule *gen(const char *name, int P, int M) {
  zt_pipeline_schedule *s = NULL;
  ZT_CHECK_OK(zt_pipeline_generate(&(zt_pipeline_gen_options){.name = name, .ranks = P, .microbatches = M}, &s));
  return s;
}

static zt_pipeline_sim *sim_of(const zt_pipeline_schedule *s, double f, double b, double w) {
  zt_pipeline_costs c = zt_pipeline_costs_default();
  c.f = f, c.b = b, c.w = w;
  zt_pipeline_sim *sim = NULL;
  ZT_CHECK_OK(zt_pipeline_simulate(s, &c, &sim));
  return sim;
}

static double max_peak(const zt_pipeline_sim *sim) {
  double m = 0;
  for (int r = 0; r < sim->ranks; r++) m = sim->peak_activations[r] > m ? sim->peak_activations[r] : m;
  return m;
}

static void test_every_generator_validates(void) {
  for (int k = 0; k < N_FAMILIES; k++)
    for (int P = 2; P <= 8; P *= 2)
      for (int mul = 1; mul <= 4; mul *= 2) {
        int M = P * mul;
        zt_pipeline_schedule *s = NULL;
        zt_pipeline_gen_options o = {.name = FAMILIES[k], .ranks = P, .microbatches = M};
        if (!strcmp(FAMILIES[k], "dualpipev") && M < 2 * P) {
          char want[64];
          snprintf(want, sizeof want, "at least %d microbatches", 2 * P);
          ZT_CHECK_ERR(zt_pipeline_generate(&o, &s), ZT_STATUS_INVALID_ARG, want);
          continue;
        }
        ZT_CHECK_OK(zt_pipeline_generate(&o, &s));
        if (!s) continue;
        ZT_CHECK_OK(zt_pipeline_validate(s));
        ZT_CHECK(!zt_pipeline_has_comm(s));
        zt_pipeline_schedule *l = NULL;
        ZT_CHECK_OK(zt_pipeline_lower(s, &l));
        if (l) {
          ZT_CHECK(zt_pipeline_has_comm(l));
          ZT_CHECK_OK(zt_pipeline_validate(l));
          /* with free communication the lowered form runs as the compute-only one */
          zt_pipeline_sim *a = sim_of(s, 1, 1, 1), *b = sim_of(l, 1, 1, 1);
          if (a && b) ZT_CHECK_NEAR(a->step_time, b->step_time, 1e-9);
          zt_pipeline_sim_free(a);
          zt_pipeline_sim_free(b);
        }
        zt_pipeline_schedule_free(l);
        zt_pipeline_schedule_free(s);
      }
}

static void test_minimum_microbatches(void) {
  zt_pipeline_schedule *s = NULL;
  ZT_CHECK_ERR(zt_pipeline_generate(&(zt_pipeline_gen_options){.name = "interleaved", .ranks = 4, .microbatches = 2},
                                    &s),
               ZT_STATUS_INVALID_ARG, "at least 4");
  ZT_CHECK_ERR(zt_pipeline_generate(&(zt_pipeline_gen_options){.name = "interleaved", .ranks = 4, .microbatches = 6},
                                    &s),
               ZT_STATUS_INVALID_ARG, "multiple of the ranks");
  ZT_CHECK_ERR(zt_pipeline_generate(&(zt_pipeline_gen_options){.name = "dualpipev", .ranks = 4, .microbatches = 7}, &s),
               ZT_STATUS_INVALID_ARG, "needs at least 8 microbatches");
  ZT_CHECK_ERR(zt_pipeline_generate(&(zt_pipeline_gen_options){.name = "zb-h3", .ranks = 4, .microbatches = 8}, &s),
               ZT_STATUS_INVALID_ARG, "unknown schedule 'zb-h3'");
  ZT_CHECK_ERR(
      zt_pipeline_generate(&(zt_pipeline_gen_options){.name = "zb-v", .ranks = 4, .microbatches = 8, .chunks = 3}, &s),
      ZT_STATUS_INVALID_ARG, "2 chunks");
  ZT_CHECK(s == NULL);
}

static void test_text_round_trip(void) {
  for (int k = 0; k < N_FAMILIES; k++) {
    zt_pipeline_schedule *s = gen(FAMILIES[k], 4, 8), *l = NULL, *back = NULL;
    if (!s) continue;
    ZT_CHECK_OK(zt_pipeline_lower(s, &l));
    const zt_pipeline_schedule *forms[2] = {s, l};
    for (int f = 0; f < 2 && l; f++) {
      char *text = NULL, *again = NULL;
      ZT_CHECK_OK(zt_pipeline_schedule_format(forms[f], &text));
      ZT_CHECK_OK(zt_pipeline_schedule_parse(text, &back));
      if (back) {
        ZT_CHECK(back->ranks == 4 && back->microbatches == 8 && back->chunks == forms[f]->chunks);
        ZT_CHECK(back->placement == forms[f]->placement && !strcmp(back->name, FAMILIES[k]));
        for (int r = 0; r < 4; r++) {
          ZT_CHECK(back->n_actions[r] == forms[f]->n_actions[r]);
          ZT_CHECK(!memcmp(back->actions[r], forms[f]->actions[r], sizeof(zt_pipeline_action) * back->n_actions[r]));
        }
        ZT_CHECK_OK(zt_pipeline_schedule_format(back, &again));
        ZT_CHECK(again && !strcmp(text, again));
      }
      free(text);
      free(again);
      zt_pipeline_schedule_free(back);
      back = NULL;
    }
    zt_pipeline_schedule_free(l);
    zt_pipeline_schedule_free(s);
  }
  /* tokens, comments, blank lines */
  zt_pipeline_action a;
  char buf[32];
  ZT_CHECK_OK(zt_pipeline_action_parse("1SEND_B3", &a));
  ZT_CHECK(a.op == ZT_PIPELINE_OP_SEND_B && a.stage == 1 && a.mb == 3);
  ZT_CHECK(!strcmp(zt_pipeline_action_str(a, buf), "1SEND_B3"));
  ZT_CHECK_OK(zt_pipeline_action_parse("12BW40", &a));
  ZT_CHECK(a.op == ZT_PIPELINE_OP_BW && a.stage == 12 && a.mb == 40);
  zt_pipeline_schedule *s = NULL;
  ZT_CHECK_OK(zt_pipeline_schedule_parse("# mine\n\nzt-pipeline ranks=2 chunks=1 microbatches=1\n0: 0F0 0BW0 # r0\n"
                                         "1: 1F0 1B0 1W0\n",
                                         &s));
  if (s) ZT_CHECK_OK(zt_pipeline_validate(s));
  zt_pipeline_schedule_free(s);
}

static void test_parse_errors(void) {
  zt_pipeline_schedule *s = NULL;
  const char *h = "zt-pipeline ranks=2 chunks=1 microbatches=2 placement=loop\n";
  char t[512];
  snprintf(t, sizeof t, "%s0: 0F0 0F1 0X0\n1: 1F0\n", h);
  ZT_CHECK_ERR(zt_pipeline_schedule_parse(t, &s), ZT_STATUS_INVALID_ARG, "line 2, token 3: '0X0' has the unknown kind 'X'");
  snprintf(t, sizeof t, "%s0: 0F0\n1: 1F\n", h);
  ZT_CHECK_ERR(zt_pipeline_schedule_parse(t, &s), ZT_STATUS_INVALID_ARG, "line 3, token 1: '1F' does not end with a microbatch");
  snprintf(t, sizeof t, "%s0: F0\n1: 1F0\n", h);
  ZT_CHECK_ERR(zt_pipeline_schedule_parse(t, &s), ZT_STATUS_INVALID_ARG, "'F0' does not start with a stage number");
  snprintf(t, sizeof t, "%s1: 1F0\n0: 0F0\n", h);
  ZT_CHECK_ERR(zt_pipeline_schedule_parse(t, &s), ZT_STATUS_INVALID_ARG, "line 2: expected rank 0's line");
  snprintf(t, sizeof t, "%s0: 0F0\n", h);
  ZT_CHECK_ERR(zt_pipeline_schedule_parse(t, &s), ZT_STATUS_INVALID_ARG, "1 rank lines, the header says ranks=2");
  ZT_CHECK_ERR(zt_pipeline_schedule_parse("zt-pipeline ranks=2 chunks=1\n", &s), ZT_STATUS_INVALID_ARG, "no microbatches=");
  ZT_CHECK_ERR(zt_pipeline_schedule_parse("zt-pipeline ranks=2 chunks=1 microbatches=2 placement=v\n", &s),
               ZT_STATUS_INVALID_ARG, "chunks=2");
  ZT_CHECK_ERR(zt_pipeline_schedule_parse("0: 0F0\n", &s), ZT_STATUS_INVALID_ARG, "line 1: a schedule file starts with the header");
  ZT_CHECK(s == NULL);
}

/* Parse text (which must parse) and expect the validator's message. */
static void expect_invalid(const char *text, const char *substr) {
  zt_pipeline_schedule *s = NULL;
  ZT_CHECK_OK(zt_pipeline_schedule_parse(text, &s));
  if (!s) return;
  ZT_CHECK_ERR(zt_pipeline_validate(s), ZT_STATUS_INVALID_ARG, substr);
  zt_pipeline_schedule_free(s);
}

/* The same for a 2-rank, 1-chunk, 2-microbatch schedule given by its two rank lines. */
static void expect_invalid2(const char *rank0, const char *rank1, const char *substr) {
  char t[1024];
  snprintf(t, sizeof t, "zt-pipeline ranks=2 chunks=1 microbatches=2\n0: %s\n1: %s\n", rank0, rank1);
  expect_invalid(t, substr);
}

static void test_validator_rules(void) {
  const char *h = "zt-pipeline ranks=2 chunks=1 microbatches=2\n";
  char t[1024];
  /* a missing W */
  expect_invalid2("0F0 0F1 0B0 0W0 0B1", "1F0 1B0 1W0 1F1 1B1 1W1", "rank 0: 0B1 has no 0W1 (W is missing");
  /* a W before its B */
  expect_invalid2("0F0 0F1 0B0 0W0 0W1 0B1", "1F0 1B0 1W0 1F1 1B1 1W1", "rank 0, action 4: 0W1 comes before 0B1 (W runs after the B of its stage and microbatch)");
  /* twice, and on the wrong rank */
  expect_invalid2("0F0 0F1 0BW0 0BW1 0F1", "1F0 1BW0 1F1 1BW1", "rank 0, action 4: 0F1 appears again");
  expect_invalid2("0F0 0F1 0BW0 0BW1 1F0", "1BW0 1F1 1BW1", "rank 0, action 4 (1F0): stage 1 is placed on rank 1, not rank 0");
  expect_invalid2("0F0 0F1 0BW0 0B1 0W1 0BW1", "1F0 1BW0 1F1 1BW1", "has both BW and 0B1");
  expect_invalid2("0F0 0F1 0BW0 0BW1 0F2", "1F0 1BW0 1F1 1BW1", "microbatch 2 is out of range");
  /* a cycle between the ranks: rank 0 waits at 0BW0 for rank 1's backward of microbatch 0,
   * which rank 1 runs after 1F1, which needs 0F1, which rank 0 runs after 0BW0 */
  expect_invalid2("0F0 0BW0 0F1 0BW1", "1F1 1F0 1BW0 1BW1", "the schedule deadlocks: rank 0 waits at 0BW0 for 1BW0 on rank 1 (B of stage s runs after B of "
                    "stage s+1); rank 1 waits at 1F1 for 0F1 on rank 0 (F of stage s runs after F of stage s-1)");
  /* a reordered send/receive pair: rank 0 sends microbatch 1's activations first */
  snprintf(t, sizeof t,
           "%s0: 0F0 0F1 0SEND_F1 0SEND_F0 0RECV_B0 0BW0 0RECV_B1 0BW1\n"
           "1: 1RECV_F0 1F0 1BW0 1SEND_B0 1RECV_F1 1F1 1BW1 1SEND_B1\n",
           h);
  expect_invalid(t, "rank 0, action 2: 0SEND_F1 is send number 1 from rank 0 to rank 1, but rank 1's receive number 1 is "
                    "1RECV_F0, not 1RECV_F1 (sends and receives between two ranks match in order");
  /* the same, in order, is fine; a receive after its consumer and a missing one are not */
  snprintf(t, sizeof t,
           "%s0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0BW0 0RECV_B1 0BW1\n"
           "1: 1RECV_F0 1F0 1BW0 1SEND_B0 1RECV_F1 1F1 1BW1 1SEND_B1\n",
           h);
  zt_pipeline_schedule *s = NULL;
  ZT_CHECK_OK(zt_pipeline_schedule_parse(t, &s));
  if (s) ZT_CHECK_OK(zt_pipeline_validate(s));
  zt_pipeline_schedule_free(s);
  snprintf(t, sizeof t,
           "%s0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0BW0 0RECV_B1 0BW1\n"
           "1: 1F0 1RECV_F0 1BW0 1SEND_B0 1RECV_F1 1F1 1BW1 1SEND_B1\n",
           h);
  expect_invalid(t, "rank 1, action 1: 1RECV_F0 comes after 1F0 (a receive precedes the action that needs it)");
  snprintf(t, sizeof t,
           "%s0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0BW0 0BW1\n"
           "1: 1RECV_F0 1F0 1BW0 1SEND_B0 1RECV_F1 1F1 1BW1 1SEND_B1\n",
           h);
  expect_invalid(t, "rank 0: 0BW1 has no 0RECV_B1");
  /* a receive that waits for a send that comes after a receive of the other rank */
  snprintf(t, sizeof t,
           "%s0: 0F0 0RECV_B0 0SEND_F0 0BW0 0F1 0SEND_F1 0RECV_B1 0BW1\n"
           "1: 1RECV_F0 1F0 1BW0 1SEND_B0 1RECV_F1 1F1 1BW1 1SEND_B1\n",
           h);
  expect_invalid(t, "rank 0 waits at 0RECV_B0 for 1SEND_B0 on rank 1 (a receive waits for its send)");
  /* V placement: rank 1 holds stages 1 and 2 */
  expect_invalid("zt-pipeline ranks=2 chunks=2 microbatches=1 placement=v\n0: 0F0 3F0 3BW0 0BW0\n1: 2F0 1F0 2BW0 1BW0\n",
                 "rank 1 waits at 2F0 for 1F0 on rank 1 (F of stage s runs after F of stage s-1)");
}

static void test_m_too_small_for_a_file(void) {
  /* a hand-written file that names microbatches the header does not have */
  expect_invalid("zt-pipeline ranks=2 chunks=1 microbatches=1\n0: 0F0 0BW0 0F1 0BW1\n1: 1F0 1BW0 1F1 1BW1\n",
                 "microbatch 1 is out of range (the schedule has microbatches=1)");
}

/* Bubble per rank (step - busy) and rate, with F, B, W costs and no communication. */
static void test_bubbles(void) {
  const double costs[3][3] = {{1, 1, 1}, {1, 2, 1}, {2, 3, 1}};
  for (int P = 2; P <= 8; P *= 2)
    for (int mul = 1; mul <= 4; mul *= 2)
      for (int c = 0; c < 3; c++) {
        int M = P * mul;
        double F = costs[c][0], B = costs[c][1], W = costs[c][2];
        zt_pipeline_schedule *s = gen("1f1b", P, M);
        zt_pipeline_sim *sim = s ? sim_of(s, F, B, W) : NULL;
        if (sim) {
          for (int r = 0; r < P; r++) ZT_CHECK_NEAR(sim->idle[r], (P - 1) * (F + B + W), 1e-9);
          ZT_CHECK_NEAR(sim->step_time, (M + P - 1) * (F + B + W), 1e-9);
          ZT_CHECK_NEAR(sim->bubble_rate, (double)(P - 1) / (M + P - 1), 1e-12);
          ZT_CHECK_NEAR(max_peak(sim), P, 0);
        }
        zt_pipeline_sim_free(sim);
        zt_pipeline_schedule_free(s);
        /* ZB-H1: (P-1)(F+B-W), a third of 1F1B's at F = B = W, with 1F1B's peak */
        s = gen("zb-h1", P, M);
        sim = s ? sim_of(s, F, B, W) : NULL;
        if (sim) {
          for (int r = 0; r < P; r++) ZT_CHECK_NEAR(sim->idle[r], (P - 1) * (F + B - W), 1e-9);
          ZT_CHECK_NEAR(max_peak(sim), P, 0);
        }
        zt_pipeline_sim_free(sim);
        zt_pipeline_schedule_free(s);
      }
  /* ZB-H2, ZB-V and DualPipeV at M >= 2P, F = B = W: no bubble but the fill ramp, (P-1) F/V,
   * which no schedule avoids when all ranks start together; with steps overlapping (no
   * synchronisation between them) all three have none at all */
  const char *zero[] = {"zb-h2", "zb-v", "dualpipev"};
  for (int k = 0; k < 3; k++)
    for (int P = 2; P <= 8; P *= 2)
      for (int mul = 2; mul <= 4; mul *= 2) {
        int M = P * mul;
        zt_pipeline_schedule *s = gen(zero[k], P, M);
        zt_pipeline_sim *sim = s ? sim_of(s, 1, 1, 1) : NULL;
        if (!sim) continue;
        double ramp = (P - 1) * 1.0 / s->chunks;
        ZT_CHECK_NEAR(sim->step_time, M * 3.0 + ramp, 1e-9);
        for (int r = 0; r < P; r++) {
          ZT_CHECK_NEAR(sim->idle[r], ramp, 1e-9);
          ZT_CHECK_NEAR(sim->idle_in_span[r], 0, 1e-9);
        }
        zt_pipeline_sim_free(sim);
        zt_pipeline_schedule_free(s);
      }
}

/* ZB-V built by the paper's construction: at M >= 2P every rank holds at most 1F1B's peak
 * (P, its rank 0's: a V rank holds both ends of the model, so every rank reaches it) and at
 * F = B = W the step is M(F+B+W) plus the fill ramp (P-1)F/2, the same as ZB-H2's test. */
static void test_zbv(void) {
  for (int P = 2; P <= 8; P *= 2)
    for (int mul = 2; mul <= 4; mul *= 2) {
      int M = P * mul;
      zt_pipeline_schedule *s = gen("zb-v", P, M), *b = gen("1f1b", P, M);
      zt_pipeline_sim *v = s ? sim_of(s, 1, 1, 1) : NULL, *base = b ? sim_of(b, 1, 1, 1) : NULL;
      if (v && base) {
        for (int r = 0; r < P; r++)
          if (!(v->peak_activations[r] <= max_peak(base)))
            zt_test_fail(__FILE__, __LINE__, "zb-v P=%d M=%d rank %d holds %g, 1F1B's peak is %g", P, M, r,
                         v->peak_activations[r], max_peak(base));
        ZT_CHECK_NEAR(v->step_time, M * 3.0 + (P - 1) * 0.5, 1e-9);
      }
      zt_pipeline_sim_free(v);
      zt_pipeline_sim_free(base);
      zt_pipeline_schedule_free(s);
      zt_pipeline_schedule_free(b);
    }
}

/* Peak activations: GPipe holds M; 1F1B P on rank 0 (P - r on rank r); V-Half at most half
 * of 1F1B's (at P = 16 its building block holds 6 of 16), V-Min about a third, ZB-V 1F1B's. */
static void test_memory(void) {
  for (int P = 4; P <= 16; P *= 2) {
    int M = 4 * P;
    zt_pipeline_schedule *s = gen("1f1b", P, M);
    zt_pipeline_sim *base = s ? sim_of(s, 1, 1, 1) : NULL;
    if (base)
      for (int r = 0; r < P; r++) ZT_CHECK_NEAR(base->peak_activations[r], P - r, 0);
    zt_pipeline_schedule_free(s);
    s = gen("gpipe", P, M);
    zt_pipeline_sim *g = s ? sim_of(s, 1, 1, 1) : NULL;
    if (g) ZT_CHECK_NEAR(max_peak(g), M, 0);
    zt_pipeline_sim_free(g);
    zt_pipeline_schedule_free(s);
    const char *names[3] = {"v-half", "v-min", "zb-v"};
    const double lo[3] = {0.3, 0.28, 0.99}, hi[3] = {0.5, 0.4, 1.0};
    for (int k = 0; k < 3 && base; k++) {
      s = gen(names[k], P, M);
      zt_pipeline_sim *v = s ? sim_of(s, 1, 1, 1) : NULL;
      if (v) {
        double ratio = max_peak(v) / max_peak(base);
        if (!(ratio >= lo[k] && ratio <= hi[k]))
          zt_test_fail(__FILE__, __LINE__, "%s at P=%d: peak ratio to 1F1B %.3f not in [%.2f, %.2f]", names[k], P, ratio,
                       lo[k], hi[k]);
      }
      zt_pipeline_sim_free(v);
      zt_pipeline_schedule_free(s);
    }
    zt_pipeline_sim_free(base);
  }
  /* bytes when given bytes per unit */
  zt_pipeline_schedule *s = gen("1f1b", 4, 8);
  zt_pipeline_costs c = zt_pipeline_costs_default();
  c.bytes_per_unit = 1 << 20;
  zt_pipeline_sim *sim = NULL;
  if (s) ZT_CHECK_OK(zt_pipeline_simulate(s, &c, &sim));
  if (sim) ZT_CHECK_NEAR(sim->peak_bytes[0], 4.0 * (1 << 20), 0);
  zt_pipeline_sim_free(sim);
  zt_pipeline_schedule_free(s);
}

/* V-Half and V-Min from the building block (generators.c): at F = B = W, M = 4P, V-Half's
 * bubble is below 1F1B's (10.3% vs 15.8% at P = 4, 12.3% vs 17.9% at P = 8, 13.3% vs 19.0%
 * at P = 16) with at most half its peak on every rank; V-Min keeps its cap (floor(2(P+1)/3)
 * chunks) and at P = 8 and 16 takes a block of 3 microbatches every 20 (P = 8: 19.7%, was 30.7%
 * with one every 6; 1F1B 17.9%) or every 22 (P = 16: 27.1%, was 32.7%), at P = 4 one every 10
 * (42.9%, was 47.3% from the list scheduler; no schedule under its cap of 3 chunks goes below
 * 36.8%: docs/pipeline-schedules.md). */
static void test_v_building_block(void) {
  const double vhalf_step[3] = {53.5, 109.5, 221.5};
  for (int i = 0, P = 4; P <= 16; P *= 2, i++) {
    int M = 4 * P;
    zt_pipeline_schedule *h = gen("v-half", P, M), *b = gen("1f1b", P, M), *n = gen("v-min", P, M);
    zt_pipeline_sim *hs = h ? sim_of(h, 1, 1, 1) : NULL, *bs = b ? sim_of(b, 1, 1, 1) : NULL,
                    *ns = n ? sim_of(n, 1, 1, 1) : NULL;
    if (hs && bs && ns) {
      if (!(hs->bubble_rate < bs->bubble_rate))
        zt_test_fail(__FILE__, __LINE__, "v-half P=%d M=%d: bubble %.4f not below 1F1B's %.4f", P, M, hs->bubble_rate,
                     bs->bubble_rate);
      ZT_CHECK_NEAR(hs->step_time, vhalf_step[i], 1e-9);
      for (int r = 0; r < P; r++) {
        ZT_CHECK(hs->peak_activations[r] <= P / 2.0 + 1e-9);
        ZT_CHECK(ns->peak_activations[r] <= ((2 * P + 2) / 3) / 2.0 + 1e-9);
      }
      if (P == 8) ZT_CHECK(ns->bubble_rate < 0.2);
      ZT_CHECK_NEAR(ns->step_time, P == 4 ? 84 : P == 8 ? 119.5 : 263.5, 1e-9);
      ZT_CHECK_NEAR(max_peak(ns), P == 4 ? 1.5 : P == 8 ? 3 : 5, 1e-9);
      if (P == 4) { /* the cap's bound (doc): step >= 76, so V-Min's bubble cannot reach 1F1B's here */
        ZT_CHECK(ns->step_time >= 76 && 1 - 48 / 76.0 > bs->bubble_rate);
      }
    }
    zt_pipeline_sim_free(hs);
    zt_pipeline_sim_free(bs);
    zt_pipeline_sim_free(ns);
    zt_pipeline_schedule_free(h);
    zt_pipeline_schedule_free(b);
    zt_pipeline_schedule_free(n);
  }
}

static void test_interleaved_and_comm(void) {
  /* interleaved: the bubble shrinks by V: (P-1)(F+B+W)/V per rank */
  for (int V = 2; V <= 4; V++) {
    zt_pipeline_schedule *s = NULL;
    ZT_CHECK_OK(zt_pipeline_generate(
        &(zt_pipeline_gen_options){.name = "interleaved", .ranks = 4, .microbatches = 16, .chunks = V}, &s));
    if (!s) continue;
    ZT_CHECK_OK(zt_pipeline_validate(s));
    zt_pipeline_sim *sim = sim_of(s, 1, 1, 1);
    if (sim) ZT_CHECK_NEAR(sim->idle[0], 3 * 3.0 / V, 1e-9);
    zt_pipeline_sim_free(sim);
    zt_pipeline_schedule_free(s);
  }
  /* a hop's cost: 1F1B's step grows by 2(P-1) hops (the first forward and the last backward) */
  zt_pipeline_schedule *s = gen("1f1b", 4, 8), *l = NULL;
  if (s) ZT_CHECK_OK(zt_pipeline_lower(s, &l));
  zt_pipeline_costs c = zt_pipeline_costs_default();
  c.comm = 0.25;
  zt_pipeline_sim *a = NULL, *b = NULL;
  if (l) ZT_CHECK_OK(zt_pipeline_simulate(s, &c, &a));
  if (l) ZT_CHECK_OK(zt_pipeline_simulate(l, &c, &b));
  if (a && b) {
    ZT_CHECK_NEAR(a->step_time, b->step_time, 1e-9);
    ZT_CHECK(a->step_time >= 11 * 3 + 6 * 0.25 - 1e-9);
  }
  zt_pipeline_sim_free(a);
  zt_pipeline_sim_free(b);
  zt_pipeline_schedule_free(l);
  zt_pipeline_schedule_free(s);
}

/* Receives right before their consumer: in the lowered 1F1B, every RECV is followed by the
 * action that needs it, every SEND follows the action that produced it. */
static void test_lowering_placement(void) {
  zt_pipeline_schedule *s = gen("zb-v", 4, 8), *l = NULL;
  if (s) ZT_CHECK_OK(zt_pipeline_lower(s, &l));
  for (int r = 0; l && r < 4; r++)
    for (int i = 0; i < l->n_actions[r]; i++) {
      zt_pipeline_action a = l->actions[r][i];
      if (a.op == ZT_PIPELINE_OP_RECV_F || a.op == ZT_PIPELINE_OP_RECV_B) {
        ZT_CHECK(i + 1 < l->n_actions[r]);
        zt_pipeline_action n = l->actions[r][i + 1];
        ZT_CHECK(n.stage == a.stage && n.mb == a.mb &&
                 (a.op == ZT_PIPELINE_OP_RECV_F ? n.op == ZT_PIPELINE_OP_F : n.op == ZT_PIPELINE_OP_B));
      }
      if (a.op == ZT_PIPELINE_OP_SEND_F || a.op == ZT_PIPELINE_OP_SEND_B) {
        zt_pipeline_action p = l->actions[r][i - 1];
        ZT_CHECK(p.stage == a.stage && p.mb == a.mb);
      }
      /* the V's turn (stages P-1 and P on rank P-1) needs no message */
      ZT_CHECK(!(r == 3 && (a.op == ZT_PIPELINE_OP_SEND_F && a.stage == 3)));
    }
  zt_pipeline_schedule *again = NULL;
  if (l) ZT_CHECK_ERR(zt_pipeline_lower(l, &again), ZT_STATUS_INVALID_ARG, "has sends and receives already");
  zt_pipeline_schedule_free(l);
  zt_pipeline_schedule_free(s);
}

/* Per-stage costs (GPT-2's first stage has no input grads, its last the head): 1F1B at P = 2,
 * M = 2, stage 0 F 1 B 0 W 2, stage 1 F 2 B 1 W 1. Rank 0: F0 [0,1] F1 [1,2]; rank 1: F0 [1,3]
 * BW0 [3,5] F1 [5,7] BW1 [7,9]; rank 0: BW0 [5,7] BW1 [9,11]: step 11, busy 6 + 8 of 22. */
static void test_stage_costs(void) {
  zt_pipeline_schedule *s = gen("1f1b", 2, 2);
  const double k[6] = {1, 0, 2, 2, 1, 1};
  zt_pipeline_costs c = zt_pipeline_costs_default();
  c.stage = k;
  zt_pipeline_sim *sim = NULL;
  if (s) ZT_CHECK_OK(zt_pipeline_simulate(s, &c, &sim));
  if (sim) {
    ZT_CHECK_NEAR(sim->step_time, 11, 1e-12);
    ZT_CHECK_NEAR(sim->bubble_rate, 1 - 14.0 / 22, 1e-12);
  }
  zt_pipeline_sim_free(sim);
  const double bad[6] = {1, 0, 2, 2, -1, 1};
  c.stage = bad;
  if (s) ZT_CHECK_ERR(zt_pipeline_simulate(s, &c, &sim), ZT_STATUS_INVALID_ARG, "got -1 for B of stage 1");
  zt_pipeline_schedule_free(s);
  /* auto plans with them: with stage 0's W twice the rest, its W's still fill idle time */
  zt_pipeline_gen_options o = {.name = "auto", .ranks = 2, .microbatches = 8, .chunks = 1, .mem_limit = 2};
  const double k2[6] = {1, 0.1, 2, 1, 1, 1};
  o.costs = zt_pipeline_costs_default(), o.costs.stage = k2;
  ZT_CHECK_OK(zt_pipeline_generate(&o, &s));
  if (s) ZT_CHECK_OK(zt_pipeline_validate(s));
  zt_pipeline_schedule_free(s);
}

static void test_auto(void) {
  zt_pipeline_gen_options o = {.name = "auto", .ranks = 4, .microbatches = 16, .costs = {1, 1.5, 1, 0.1, 0}};
  zt_pipeline_schedule *s = NULL;
  ZT_CHECK_OK(zt_pipeline_generate(&o, &s));
  if (s) {
    ZT_CHECK_OK(zt_pipeline_validate(s));
    zt_pipeline_sim *sim = NULL;
    ZT_CHECK_OK(zt_pipeline_simulate(s, &o.costs, &sim));
    /* within 5% of the lower bound M(F+B+W) */
    if (sim) ZT_CHECK(sim->step_time <= 1.05 * 16 * 3.5);
    zt_pipeline_sim_free(sim);
  }
  zt_pipeline_schedule_free(s);
  /* a memory limit is kept */
  for (int lim = 1; lim <= 4; lim++) {
    o.mem_limit = lim;
    ZT_CHECK_OK(zt_pipeline_generate(&o, &s));
    zt_pipeline_sim *sim = NULL;
    if (s) ZT_CHECK_OK(zt_pipeline_simulate(s, &o.costs, &sim));
    if (sim) ZT_CHECK(max_peak(sim) <= lim);
    zt_pipeline_sim_free(sim);
    zt_pipeline_schedule_free(s);
    s = NULL;
  }
  /* chunks restricts the placement: 1 a loop, 2 a V */
  o.mem_limit = 4;
  for (int v = 1; v <= 2; v++) {
    o.chunks = v;
    ZT_CHECK_OK(zt_pipeline_generate(&o, &s));
    if (s) ZT_CHECK(s->chunks == v && s->placement == (v == 1 ? ZT_PIPELINE_PLACEMENT_LOOP : ZT_PIPELINE_PLACEMENT_V));
    zt_pipeline_schedule_free(s);
    s = NULL;
  }
  o.chunks = 3;
  ZT_CHECK_ERR(zt_pipeline_generate(&o, &s), ZT_STATUS_INVALID_ARG, "plans 1 chunk per rank or 2 in a V");
  o.chunks = 0, o.mem_limit = 0.5;
  ZT_CHECK_ERR(zt_pipeline_generate(&o, &s), ZT_STATUS_INVALID_ARG, "must be at least 1");
}

static void test_render(void) {
  zt_pipeline_schedule *s = gen("zb-h1", 4, 8);
  zt_pipeline_sim *sim = s ? sim_of(s, 1, 1, 1) : NULL;
  char *t = NULL, *svg = NULL;
  if (sim) {
    ZT_CHECK_OK(zt_pipeline_render_text(s, sim, 90, &t));
    ZT_CHECK_OK(zt_pipeline_render_svg(s, sim, &svg));
  }
  if (t) ZT_CHECK(strstr(t, "rank  0 |F0") && strstr(t, "rank  3 |") && strstr(t, "W7"));
  if (svg) ZT_CHECK(!strncmp(svg, "<svg ", 5) && strstr(svg, "</svg>") && strstr(svg, "B stage 2 microbatch 5"));
  free(t);
  free(svg);
  zt_pipeline_sim_free(sim);
  zt_pipeline_schedule_free(s);
}

/* ---- issue 25, item 15: sizes bounded before anything is allocated, files read safely, the
 * checks linear, costs finite ---- */

static void expect_parse_error(const char *text, const char *substr) {
  zt_pipeline_schedule *s = NULL;
  ZT_CHECK_ERR(zt_pipeline_schedule_parse(text, &s), ZT_STATUS_INVALID_ARG, substr);
  ZT_CHECK(s == NULL);
}

static void test_sizes_bounded(void) {
  zt_pipeline_schedule *s = NULL;
  /* used to allocate 16 GB */
  ZT_CHECK_ERR(zt_pipeline_schedule_new(1000000000, 1, 1, ZT_PIPELINE_PLACEMENT_LOOP, &s), ZT_STATUS_INVALID_ARG,
               "ranks in [1, 1024], chunks in [1, 64] and microbatches in [1, 100000]");
  ZT_CHECK_ERR(zt_pipeline_schedule_new(1024, 64, 100000, ZT_PIPELINE_PLACEMENT_LOOP, &s), ZT_STATUS_INVALID_ARG,
               "has 6553600000 (stage, microbatch) pairs");
  ZT_CHECK(s == NULL);
  /* the cap itself is fine */
  ZT_CHECK_OK(zt_pipeline_schedule_new(1024, 1, ZT_PIPELINE_MAX_SLOTS / 1024, ZT_PIPELINE_PLACEMENT_LOOP, &s));
  zt_pipeline_schedule_free(s);
  s = NULL;
  /* headers of a few bytes that used to make the validator touch 6.4 GB, allocate 16 GB, or
   * overflow the stage count ("the schedule has -1294967296 stages") */
  expect_parse_error("zt-pipeline ranks=2 chunks=1 microbatches=100000000\n0: 0F0\n1: 1F0\n",
                     "line 1: header microbatches='100000000' must be an integer in [1, 100000]");
  expect_parse_error("zt-pipeline ranks=1000000000 chunks=1 microbatches=1\n",
                     "line 1: header ranks='1000000000' must be an integer in [1, 1024]");
  expect_parse_error("zt-pipeline ranks=3 chunks=1000000000 microbatches=1\n0: 0F0\n1: 1F0\n2: 2F0\n",
                     "line 1: header chunks='1000000000' must be an integer in [1, 64]");
  expect_parse_error("zt-pipeline ranks=1024 chunks=64 microbatches=100000\n",
                     "line 1: a pipeline schedule of 65536 stages (ranks x chunks) and 100000 microbatches has "
                     "6553600000 (stage, microbatch) pairs; checking and simulating it would take about 1953.1 GiB");
  /* within the CLI's flag ranges, 1f1b at 1024 stages and 100,000 microbatches needed ~10 GB */
  zt_pipeline_gen_options o = {.name = "1f1b", .ranks = 1024, .microbatches = 100000};
  ZT_CHECK_ERR(zt_pipeline_generate(&o, &s), ZT_STATUS_INVALID_ARG, "has 102400000 (stage, microbatch) pairs");
  o.name = "zb-v", o.ranks = 16; /* 2 chunks: 3.2 million pairs */
  ZT_CHECK_ERR(zt_pipeline_generate(&o, &s), ZT_STATUS_INVALID_ARG, "has 3200000 (stage, microbatch) pairs");
  ZT_CHECK(s == NULL);
  /* a rank's list: at most 7 actions per stage and microbatch */
  ZT_CHECK_OK(zt_pipeline_schedule_new(1, 1, 1, ZT_PIPELINE_PLACEMENT_LOOP, &s));
  for (int i = 0; s && i < 7; i++) ZT_CHECK_OK(zt_pipeline_schedule_push(s, 0, (zt_pipeline_action){ZT_PIPELINE_OP_F, 0, 0}));
  if (s)
    ZT_CHECK_ERR(zt_pipeline_schedule_push(s, 0, (zt_pipeline_action){ZT_PIPELINE_OP_F, 0, 0}), ZT_STATUS_INVALID_ARG,
                 "rank 0 has more than 7 actions");
  zt_pipeline_schedule_free(s);
  /* the simulator takes unvalidated schedules: an action out of range is named, never looked up */
  ZT_CHECK_OK(zt_pipeline_schedule_new(2, 1, 1, ZT_PIPELINE_PLACEMENT_LOOP, &s));
  if (s) ZT_CHECK_OK(zt_pipeline_schedule_push(s, 0, (zt_pipeline_action){ZT_PIPELINE_OP_BW, 4, 0}));
  zt_pipeline_sim *sim = NULL;
  if (s) ZT_CHECK_ERR(zt_pipeline_simulate(s, NULL, &sim), ZT_STATUS_INVALID_ARG, "stage 4 is out of range");
  ZT_CHECK(sim == NULL);
  zt_pipeline_schedule_free(s);
}

static void write_bytes(const char *path, const char *data, size_t n) {
  FILE *f = fopen(path, "wb");
  ZT_CHECK(f != NULL);
  if (!f) return;
  ZT_CHECK(fwrite(data, 1, n, f) == n);
  ZT_CHECK(fclose(f) == 0);
}

static void test_reader_files(void) {
  if (!zt_test_tmpdir_make("pp_reader")) return;
  zt_pipeline_schedule *s = NULL;
  char fifo[512];
  zt_test_tmp_path_to(fifo, sizeof fifo, "fifo");
  ZT_CHECK(mkfifo(fifo, 0600) == 0);
  /* a FIFO used to block, /dev/zero to be read forever */
  ZT_CHECK_ERR(zt_pipeline_schedule_read(fifo, &s), ZT_STATUS_IO, "it is a FIFO (named pipe), not a regular file");
  ZT_CHECK_ERR(zt_pipeline_schedule_read("/dev/zero", &s), ZT_STATUS_IO, "it is a character device, not a regular file");
  ZT_CHECK_ERR(zt_pipeline_schedule_read(zt_test_tmpdir(), &s), ZT_STATUS_IO, "it is a folder");
  ZT_CHECK_ERR(zt_pipeline_schedule_read(zt_test_tmp_path("missing"), &s), ZT_STATUS_IO, "No such file");
  /* a NUL byte used to drop the rest of its 4 KiB read silently (here: rank 1's line) */
  static const char nul[] = "zt-pipeline ranks=2 chunks=1 microbatches=1\n0: 0F0 0BW0 # \0 x\n1: 1F0 1BW0\n";
  write_bytes(zt_test_tmp_path("nul.sched"), nul, sizeof nul - 1);
  ZT_CHECK_ERR(zt_pipeline_schedule_read(zt_test_tmp_path("nul.sched"), &s), ZT_STATUS_INVALID_ARG,
               "nul.sched', line 2: holds a NUL byte (byte 59 of the file)");
  /* a byte-order mark is named as such */
  static const char bom[] = "\xEF\xBB\xBFzt-pipeline ranks=1 chunks=1 microbatches=1\n0: 0F0 0BW0\n";
  write_bytes(zt_test_tmp_path("bom.sched"), bom, sizeof bom - 1);
  ZT_CHECK_ERR(zt_pipeline_schedule_read(zt_test_tmp_path("bom.sched"), &s), ZT_STATUS_INVALID_ARG,
               "bom.sched', line 1: starts with a UTF-8 byte-order mark (BOM, the bytes EF BB BF");
  expect_parse_error(bom, "byte-order mark");
  /* larger than any schedule's text: refused before it is read (a sparse file) */
  const char *huge = zt_test_tmp_path("huge.sched");
  FILE *f = fopen(huge, "wb");
  ZT_CHECK(f && ftruncate(fileno(f), (off_t)ZT_PIPELINE_MAX_FILE_BYTES + 1) == 0);
  if (f) ZT_CHECK(fclose(f) == 0);
  ZT_CHECK_ERR(zt_pipeline_schedule_read(huge, &s), ZT_STATUS_IO, "it has 268435457 bytes, more than the 268435456");
  ZT_CHECK(s == NULL);
  /* and a good file still reads */
  write_bytes(zt_test_tmp_path("ok.sched"), bom + 3, sizeof bom - 4);
  ZT_CHECK_OK(zt_pipeline_schedule_read(zt_test_tmp_path("ok.sched"), &s));
  if (s) ZT_CHECK_OK(zt_pipeline_validate(s));
  zt_pipeline_schedule_free(s);
  zt_test_tmpdir_remove();
}

static void test_costs_finite(void) {
  zt_pipeline_schedule *s = gen("1f1b", 2, 2);
  const double bad[] = {NAN, INFINITY, 1e308, -1};
  zt_pipeline_sim *sim = NULL;
  for (int k = 0; s && k < 4; k++) {
    zt_pipeline_costs c = zt_pipeline_costs_default();
    c.f = bad[k];
    ZT_CHECK_ERR(zt_pipeline_simulate(s, &c, &sim), ZT_STATUS_INVALID_ARG, "pipeline costs must be finite numbers in [0, 1e+12]");
    c = zt_pipeline_costs_default();
    c.comm = bad[k];
    ZT_CHECK_ERR(zt_pipeline_simulate(s, &c, &sim), ZT_STATUS_INVALID_ARG, "must be finite numbers");
    double stage[6] = {1, 1, 1, 1, 1, bad[k]};
    c = zt_pipeline_costs_default();
    c.stage = stage;
    ZT_CHECK_ERR(zt_pipeline_simulate(s, &c, &sim), ZT_STATUS_INVALID_ARG, "for W of stage 1");
    c = zt_pipeline_costs_default();
    c.bytes_per_unit = bad[k] * 1e12;
    ZT_CHECK_ERR(zt_pipeline_simulate(s, &c, &sim), ZT_STATUS_INVALID_ARG, "bytes must be a finite number");
    /* the generators that plan with costs refuse them too */
    zt_pipeline_schedule *a = NULL;
    zt_pipeline_gen_options o = {.name = "auto", .ranks = 2, .microbatches = 4, .costs = zt_pipeline_costs_default()};
    o.costs.w = bad[k];
    ZT_CHECK_ERR(zt_pipeline_generate(&o, &a), ZT_STATUS_INVALID_ARG, "must be finite numbers");
    ZT_CHECK(a == NULL);
  }
  ZT_CHECK(sim == NULL);
  /* the largest cost, and a memory limit far above M (its chunk count was cast from 2e18) */
  zt_pipeline_costs c = zt_pipeline_costs_default();
  c.f = c.b = c.w = c.comm = ZT_PIPELINE_MAX_COST;
  if (s) ZT_CHECK_OK(zt_pipeline_simulate(s, &c, &sim));
  if (sim) ZT_CHECK(isfinite(sim->step_time) && sim->step_time > 0);
  zt_pipeline_sim_free(sim);
  zt_pipeline_schedule *a = NULL;
  ZT_CHECK_OK(zt_pipeline_generate(
      &(zt_pipeline_gen_options){.name = "auto", .ranks = 2, .microbatches = 4, .mem_limit = 1e18}, &a));
  zt_pipeline_schedule_free(a);
  zt_pipeline_schedule_free(s);
}

/* The send/receive order check at a size where a quadratic one is hopeless (hours): 1F1B at
 * P = 2 and M = 100,000, lowered (600,000 actions), and the same with rank 1's last two
 * receives in the wrong order, found and named. */
static void test_order_check_scales(void) {
  int M = ZT_PIPELINE_MAX_MICROBATCHES;
  zt_pipeline_schedule *s = gen("1f1b", 2, M), *l = NULL;
  if (s) ZT_CHECK_OK(zt_pipeline_lower(s, &l));
  if (l) ZT_CHECK_OK(zt_pipeline_validate(l));
  if (l && l->n_actions[1] == 4 * M) {
    /* ... 1RECV_F(M-2) 1F 1BW 1SEND_B, 1RECV_F(M-1) 1F 1BW 1SEND_B: receive M-1 first */
    zt_pipeline_action *a = l->actions[1] + 4 * (M - 2);
    zt_pipeline_action last[8] = {a[4], a[0], a[1], a[2], a[3], a[5], a[6], a[7]};
    memcpy(a, last, sizeof last);
    char want[256];
    snprintf(want, sizeof want,
             "0SEND_F%d is send number %d from rank 0 to rank 1, but rank 1's receive number %d is 1RECV_F%d, not "
             "1RECV_F%d",
             M - 2, M - 1, M - 1, M - 1, M - 2);
    ZT_CHECK_ERR(zt_pipeline_validate(l), ZT_STATUS_INVALID_ARG, want);
  }
  zt_pipeline_schedule_free(l);
  zt_pipeline_schedule_free(s);
}

/* ---- issue 25, item 16: lowering keeps a valid schedule valid, so zt schedule --check (which
 * validates as zt train does) and zt train agree ---- */

/* A random valid compute-only schedule: a random topological order of every action (per stage
 * and microbatch F, then B and W or BW; F of stage s after F of s-1, the backward of s after
 * that of s+1, W after B), each rank's list its actions in that order. */
static zt_pipeline_schedule *random_schedule(unsigned *seed, int P, int V, int M, zt_pipeline_placement pl, bool split) {
  zt_pipeline_schedule *s = NULL;
  ZT_CHECK_OK(zt_pipeline_schedule_new(P, V, M, pl, &s));
  if (!s) return NULL;
  int S = P * V, n = S * M, left = n * (split ? 3 : 2);
  int *state = calloc((size_t)n, sizeof *state), *cand = malloc((size_t)n * sizeof *cand);
  while (state && cand && left > 0) {
    int nc = 0;
    for (int st = 0; st < S; st++)
      for (int m = 0; m < M; m++) {
        int k = st * M + m, x = state[k];
        bool ready = x == 0   ? st == 0 || state[k - M] >= 1
                     : x == 1 ? st == S - 1 || state[k + M] >= 2
                              : x == 2 && split;
        if (ready) cand[nc++] = k;
      }
    *seed = *seed * 1103515245u + 12345u;
    int k = cand[(*seed >> 8) % (unsigned)nc], st = k / M, x = state[k]++;
    zt_pipeline_op op = x == 0 ? ZT_PIPELINE_OP_F : x == 2 ? ZT_PIPELINE_OP_W : split ? ZT_PIPELINE_OP_B : ZT_PIPELINE_OP_BW;
    ZT_CHECK_OK(zt_pipeline_schedule_push(s, zt_pipeline_stage_rank(s, st), (zt_pipeline_action){op, st, k % M}));
    left--;
  }
  free(state);
  free(cand);
  return s;
}

static char *rank_text(const zt_pipeline_schedule *s, int r) {
  static char buf[1024];
  size_t len = 0;
  char t[32];
  buf[0] = '\0';
  for (int i = 0; i < s->n_actions[r] && len < sizeof buf - 40; i++)
    len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%s", i ? " " : "", zt_pipeline_action_str(s->actions[r][i], t));
  return buf;
}

static void test_lowering_keeps_valid(void) {
  /* the file of the issue: rank 1 takes rank 0's activations in the reverse of the order they
   * were sent; it passed the validator, and its lowered form (what zt train runs) did not */
  zt_pipeline_schedule *s = NULL, *l = NULL;
  ZT_CHECK_OK(zt_pipeline_schedule_parse("zt-pipeline ranks=2 chunks=1 microbatches=4\n"
                                         "0: 0F0 0F1 0F2 0F3 0BW3 0BW2 0BW1 0BW0\n"
                                         "1: 1F3 1BW3 1F2 1BW2 1F1 1BW1 1F0 1BW0\n",
                                         &s));
  if (s) ZT_CHECK_OK(zt_pipeline_validate(s));
  if (s) ZT_CHECK_OK(zt_pipeline_lower(s, &l));
  if (l) {
    ZT_CHECK_OK(zt_pipeline_validate(l));
    /* the activations are received in the order sent, all four before 1F3 needs the last */
    ZT_CHECK(!strcmp(rank_text(l, 1), "1RECV_F0 1RECV_F1 1RECV_F2 1RECV_F3 1F3 1BW3 1SEND_B3 1F2 1BW2 1SEND_B2 1F1 1BW1 "
                                      "1SEND_B1 1F0 1BW0 1SEND_B0"));
    ZT_CHECK(!strcmp(rank_text(l, 0), "0F0 0SEND_F0 0F1 0SEND_F1 0F2 0SEND_F2 0F3 0SEND_F3 0RECV_B3 0BW3 0RECV_B2 0BW2 "
                                      "0RECV_B1 0BW1 0RECV_B0 0BW0"));
  }
  zt_pipeline_schedule_free(l);
  zt_pipeline_schedule_free(s);
  /* every valid compute-only schedule lowers to a valid one, which runs as fast (the receives
   * taken early wait for nothing the needed one does not) */
  unsigned seed = 25;
  for (int it = 0; it < 300; it++) {
    int P = 2 + it % 3, M = 1 + (it / 3) % 6;
    bool v = it % 4 == 1, interleaved = it % 4 == 2, split = (it / 7) % 2;
    s = random_schedule(&seed, P, v || interleaved ? 2 : 1, M, v ? ZT_PIPELINE_PLACEMENT_V : ZT_PIPELINE_PLACEMENT_LOOP,
                        split);
    l = NULL;
    if (s) ZT_CHECK_OK(zt_pipeline_validate(s));
    if (s) ZT_CHECK_OK(zt_pipeline_lower(s, &l));
    if (l) ZT_CHECK_OK(zt_pipeline_validate(l));
    zt_pipeline_costs c = zt_pipeline_costs_default();
    c.comm = 0.3;
    zt_pipeline_sim *a = NULL, *b = NULL;
    if (l) ZT_CHECK_OK(zt_pipeline_simulate(s, &c, &a));
    if (l) ZT_CHECK_OK(zt_pipeline_simulate(l, &c, &b));
    if (a && b) ZT_CHECK_NEAR(a->step_time, b->step_time, 1e-9);
    zt_pipeline_sim_free(a);
    zt_pipeline_sim_free(b);
    zt_pipeline_schedule_free(l);
    zt_pipeline_schedule_free(s);
  }
  /* lowering takes a valid schedule only (an invalid one has no well-defined messages) */
  ZT_CHECK_OK(zt_pipeline_schedule_parse("zt-pipeline ranks=2 chunks=1 microbatches=1\n0: 0F0 0B0\n1: 1F0 1BW0\n", &s));
  l = NULL;
  if (s) ZT_CHECK_ERR(zt_pipeline_lower(s, &l), ZT_STATUS_INVALID_ARG, "rank 0: 0B0 has no 0W0 (W is missing");
  ZT_CHECK(l == NULL);
  zt_pipeline_schedule_free(s);
}

int main(void) {
  ZT_RUN(test_every_generator_validates);
  ZT_RUN(test_minimum_microbatches);
  ZT_RUN(test_text_round_trip);
  ZT_RUN(test_parse_errors);
  ZT_RUN(test_validator_rules);
  ZT_RUN(test_m_too_small_for_a_file);
  ZT_RUN(test_bubbles);
  ZT_RUN(test_zbv);
  ZT_RUN(test_memory);
  ZT_RUN(test_v_building_block);
  ZT_RUN(test_interleaved_and_comm);
  ZT_RUN(test_lowering_placement);
  ZT_RUN(test_stage_costs);
  ZT_RUN(test_auto);
  ZT_RUN(test_render);
  ZT_RUN(test_sizes_bounded);
  ZT_RUN(test_reader_files);
  ZT_RUN(test_costs_finite);
  ZT_RUN(test_order_check_scales);
  ZT_RUN(test_lowering_keeps_valid);
  return zt_test_finish();
}
