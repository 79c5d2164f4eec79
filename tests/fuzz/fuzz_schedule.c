/* libFuzzer target: pipeline schedule files (zt_pipeline_schedule_read: the reader, the text
 * form's parser) and what runs on what they give (the validator, lowering, the simulator).
 * Oracles: a parsed schedule formats to text that parses back to the same text; a valid
 * compute-only schedule lowers to a valid schedule that simulates to the same step (the early
 * receives of lowering wait for nothing); an invalid one does not lower. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "zt/pipeline.h"

static void round_trip(const zt_pipeline_schedule *s) {
  char *text = NULL, *again = NULL;
  zt_pipeline_schedule *back = NULL;
  if (zt_pipeline_schedule_format(s, &text)) return; /* out of memory only */
  if (zt_pipeline_schedule_parse(text, &back)) zt_fuzz_fail("a formatted schedule does not parse: %s", zt_last_error());
  if (zt_pipeline_schedule_format(back, &again) == ZT_OK && strcmp(text, again))
    zt_fuzz_fail("format -> parse -> format changed the text");
  free(text);
  free(again);
  zt_pipeline_schedule_free(back);
}

static double step_of(const zt_pipeline_schedule *s, const zt_pipeline_costs *c) {
  zt_pipeline_sim *sim = NULL;
  if (zt_pipeline_simulate(s, c, &sim)) zt_fuzz_fail("a valid schedule does not simulate: %s", zt_last_error());
  double t = sim->step_time;
  char *tl = NULL;
  if (zt_pipeline_render_text(s, sim, 40, &tl) == ZT_OK) free(tl);
  zt_pipeline_sim_free(sim);
  return t;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  zt_fuzz_init();
  const char *path = zt_fuzz_path("fuzz.sched");
  zt_fuzz_write(path, data, size);
  zt_pipeline_schedule *s = NULL;
  if (zt_pipeline_schedule_read(path, &s)) {
    if (s) zt_fuzz_fail("a failed read returned a schedule");
    return 0;
  }
  round_trip(s);
  zt_pipeline_schedule *l = NULL;
  bool comm = zt_pipeline_has_comm(s);
  if (zt_pipeline_validate(s) == ZT_OK) {
    zt_pipeline_costs c = zt_pipeline_costs_default();
    c.comm = 0.25;
    double t = step_of(s, &c);
    if (!comm) {
      if (zt_pipeline_lower(s, &l)) zt_fuzz_fail("a valid schedule does not lower: %s", zt_last_error());
      if (zt_pipeline_validate(l)) zt_fuzz_fail("a valid schedule lowers to an invalid one: %s", zt_last_error());
      if (fabs(step_of(l, &c) - t) > 1e-9 * (1 + t)) zt_fuzz_fail("lowering changed the simulated step");
      round_trip(l);
    }
  } else {
    zt_pipeline_sim *sim = NULL;
    if (zt_pipeline_simulate(s, NULL, &sim) == ZT_OK) zt_pipeline_sim_free(sim); /* may deadlock: an error */
    if (!comm && zt_pipeline_lower(s, &l) == ZT_OK) zt_fuzz_fail("an invalid schedule lowered");
  }
  zt_pipeline_schedule_free(l);
  zt_pipeline_schedule_free(s);
  return 0;
}
