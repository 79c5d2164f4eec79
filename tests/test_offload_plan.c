/* The --mem-limit planner (zt_offload_plan_make / _predict in zt/train.h), without running a
 * model: a plan's bound (its peak, writes in flight, the margin) fits its limit; a larger limit
 * never gives a slower plan; the slices' states
 * shrink as slices are added (more, smaller slices); with the disk's time longer than compute
 * the step is the disk's; with activation offload's I/O past the compute, the slices that
 * recompute instead are chosen per slice; the activation trial's peak counts both ways, and the
 * trial is dropped where only offloading fits; a limit below every plan is ZT_STATUS_OOM naming the smallest peak,
 * which is itself a limit that works; bad input is refused. (Predicted vs measured peaks:
 * tests/cli_offload_states_test.sh.) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/backend.h"
#include "train/offload_plan.h"
#include "zt_test.h"
#include "zt/train.h"

static zt_offload_plan_input input(void) {
  zt_offload_plan_input in = {0};
  in.model = (zt_lm_config){.family = ZT_LM_GPT2, .gpt2 = {12, 12, 768, 50257, 1024, 0.0}}; /* GPT-2 124M */
  in.rows = 8, in.seq = 256, in.microbatches = 1;
  in.fixed_bytes = 64 << 20;
  in.gflops = 150, in.read_bps = 1.5e9, in.write_bps = 1.5e9;
  in.can_offload_activations = true;
  return in;
}

static void test_fits_and_monotone(void) {
  zt_offload_plan_input in = input();
  double last_step = INFINITY;
  for (int64_t mib = 600; mib <= 8192; mib *= 2) {
    zt_offload_plan p;
    zt_status s = zt_offload_plan_make(&in, mib << 20, &p);
    if (s) continue; /* below the smallest plan: checked below */
    ZT_CHECK(p.bound <= mib << 20 && p.peak < p.bound);
    ZT_CHECK(p.peak == p.states_bytes + p.activation_bytes + p.io_bytes + p.cache_bytes + p.fixed_bytes);
    ZT_CHECK(p.bound == p.peak + p.inflight_bytes + ZT_OFFLOAD_PLAN_MARGIN(p.peak) && p.inflight_bytes >= 0);
    ZT_CHECK(p.slices >= 1 && p.slices <= in.model.gpt2.n_layer + 2 && p.resident >= 1 && p.resident <= p.slices);
    ZT_CHECK(p.step_s <= last_step * 1.0001); /* more memory never makes it slower */
    last_step = p.step_s;
  }
  ZT_CHECK(isfinite(last_step));
}

static void test_slices_shrink_states(void) {
  zt_offload_plan_input in = input();
  zt_offload_plan a, b;
  ZT_CHECK_OK(zt_offload_plan_predict(&in, 2, 2, ZT_OFFLOAD_PLAN_RECOMPUTE, &a));
  ZT_CHECK_OK(zt_offload_plan_predict(&in, in.model.gpt2.n_layer + 2, 2, ZT_OFFLOAD_PLAN_RECOMPUTE, &b));
  ZT_CHECK(b.states_bytes < a.states_bytes && b.peak < a.peak); /* the parts are those of the peak's phase */
  /* recompute pays the forward again; keep-graph holds every block's activations */
  zt_offload_plan k;
  ZT_CHECK_OK(zt_offload_plan_predict(&in, 2, 2, ZT_OFFLOAD_PLAN_KEEP, &k));
  ZT_CHECK(k.compute_s < a.compute_s && k.peak > a.peak);
  /* a slow disk: the step is the disk's */
  in.read_bps = in.write_bps = 1e7;
  zt_offload_plan d;
  ZT_CHECK_OK(zt_offload_plan_predict(&in, 2, 2, ZT_OFFLOAD_PLAN_KEEP, &d));
  ZT_CHECK(d.step_s == d.io_s && d.io_s > d.compute_s);
}

/* Activation offload whose disk time passes the compute's: some slices recompute their blocks
 * instead (per slice), faster than offloading every slice's activations or recomputing every
 * slice; with a fast disk none does. */
static void test_recompute_per_slice(void) {
  zt_offload_plan_input in = input();
  in.read_bps = in.write_bps = 0.6e9; /* every activation on disk: 12.3 s of I/O against 10.6 s of compute */
  zt_offload_plan p;
  ZT_CHECK_OK(zt_offload_plan_make(&in, 800 << 20, &p)); /* too small to keep the graph */
  ZT_CHECK(p.activations_mode == ZT_OFFLOAD_PLAN_OFFLOAD);
  ZT_CHECK(p.recomputed_slices > 0 && p.recomputed_slices < p.slices);
  ZT_CHECK(strlen(p.recompute_plan) == (size_t)in.model.gpt2.n_layer && strchr(p.recompute_plan, 'f') &&
           strchr(p.recompute_plan, 'n'));
  zt_offload_plan all_off, all_rc;
  ZT_CHECK_OK(zt_offload_plan_predict(&in, p.slices, p.resident, ZT_OFFLOAD_PLAN_OFFLOAD, &all_off));
  ZT_CHECK_OK(zt_offload_plan_predict(&in, p.slices, p.resident, ZT_OFFLOAD_PLAN_RECOMPUTE, &all_rc));
  ZT_CHECK(p.step_s < all_off.step_s && p.step_s < all_rc.step_s);
  ZT_CHECK(p.compute_s > all_off.compute_s && p.io_s < all_off.io_s); /* the trade */
  ZT_CHECK(p.peak >= all_off.peak); /* a recomputed block's activations during its backward */
  in.read_bps = in.write_bps = 1.5e9; /* the I/O hides behind compute: nothing recomputed */
  ZT_CHECK_OK(zt_offload_plan_make(&in, 800 << 20, &p));
  ZT_CHECK(p.activations_mode == ZT_OFFLOAD_PLAN_OFFLOAD && p.recomputed_slices == 0 && !p.recompute_plan[0]);
}

/* With the activation trial (every slice recomputed for a step) the plan's peak counts that
 * step: a recomputed block's activations at backward's start; where only the offloading way fits
 * among the fastest plans, the plan runs none (the prediction's choice stays). */
static void test_trial_counts_both_ways(void) {
  zt_offload_plan_input in = input();
  in.rows = 32; /* a block's activations (670 MB a chunk) weigh in the peak */
  zt_offload_plan p, q, off;
  ZT_CHECK_OK(zt_offload_plan_make(&in, 1250ll << 20, &q)); /* no trial asked */
  ZT_CHECK(!q.trial);
  in.trial = true;
  ZT_CHECK_OK(zt_offload_plan_make(&in, 1250ll << 20, &p));
  ZT_CHECK(p.activations_mode == ZT_OFFLOAD_PLAN_OFFLOAD && p.trial && p.peak <= 1250ll << 20);
  ZT_CHECK_OK(zt_offload_plan_predict(&in, p.slices, p.resident, ZT_OFFLOAD_PLAN_OFFLOAD, &off));
  ZT_CHECK(p.peak > off.peak && p.peak - off.peak <= (int64_t)((16.0 * 768 + 4 + 12) * 32 * 256 * 4));
  ZT_CHECK(p.step_s <= q.step_s * 1.001); /* the trial costs no predicted speed */
  ZT_CHECK_OK(zt_offload_plan_make(&in, 1050ll << 20, &p)); /* room for offloading only */
  ZT_CHECK(p.activations_mode == ZT_OFFLOAD_PLAN_OFFLOAD && !p.trial && p.peak <= 1050ll << 20);
  in.can_offload_activations = false; /* nothing to try */
  ZT_CHECK_OK(zt_offload_plan_make(&in, 1250ll << 20, &p));
  ZT_CHECK(p.activations_mode != ZT_OFFLOAD_PLAN_OFFLOAD && !p.trial);
}

/* The allocator's cache takes what the limit leaves under the 15% margin (cache_max_bytes),
 * bounded by four copies of the largest slice's parameters; ties go to the larger cache, which
 * may mean more slices; without cache_max_bytes the cache is cache_bytes. */
static void test_cache_fills_the_room(void) {
  zt_offload_plan_input in = input();
  in.cache_bytes = 8 << 20;
  int64_t limits[] = {720ll << 20, 1ll << 30, 2ll << 30, 4ll << 30};
  int64_t total = (int64_t)zt_gpt2_config_num_params(&in.model.gpt2) * 4 + (int64_t)in.model.gpt2.vocab_size * in.model.gpt2.n_embd * 4;
  for (int i = 0; i < 4; i++) {
    int64_t lim = limits[i];
    zt_offload_plan a, b, c;
    in.cache_max_bytes = 0;
    ZT_CHECK_OK(zt_offload_plan_make(&in, lim, &a));
    ZT_CHECK(a.cache_bytes == in.cache_bytes);
    in.cache_max_bytes = 1ll << 30;
    ZT_CHECK_OK(zt_offload_plan_make(&in, lim, &b));
    ZT_CHECK(b.peak == b.states_bytes + b.activation_bytes + b.io_bytes + b.cache_bytes + b.fixed_bytes);
    ZT_CHECK(b.step_s <= a.step_s * 1.001 && b.resident == a.resident && b.bound <= lim);
    if (i == 0) { /* 720 MiB: the plan is past the margin already, no room */
      ZT_CHECK(b.cache_bytes == in.cache_bytes && b.slices == a.slices && b.peak == a.peak);
    } else {
      ZT_CHECK(b.cache_bytes > a.cache_bytes && b.cache_bytes <= in.cache_max_bytes && b.slices >= a.slices);
      ZT_CHECK((double)b.peak <= 0.85 * (double)lim + 1); /* the room under the margin, no more */
      ZT_CHECK(b.cache_bytes <= 4 * total);                /* four copies of a slice at most */
    }
    in.cache_max_bytes = 4 << 20; /* below cache_bytes: cache_bytes */
    ZT_CHECK_OK(zt_offload_plan_make(&in, lim, &c));
    ZT_CHECK(c.cache_bytes == in.cache_bytes && c.slices == a.slices && c.peak == a.peak);
  }
  /* zt_train_plan_memory bounds the allocator's live and cached bytes by the plan's peak (less the
   * rest of the process: the run's held_limit), the cache taking what the plan leaves free */
  zt_train_config cfg;
  zt_train_config_default(&cfg);
  cfg.memory.offload_model = ZT_OFFLOAD_HOST;
  cfg.memory.offload_states = true;
  cfg.memory.mem_limit = 1ll << 30;
  cfg.model.n_layer = 4, cfg.model.n_embd = 512, cfg.model.n_head = 8; /* slices of megabytes: room for a cache */
  int64_t before = zt_mem_cache_limit(); /* 0 under make asan (ZT_ALLOC_CACHE_MB=0): the plan's upper bound set here */
  zt_mem_set_cache_limit(1ll << 30);
  zt_offload_plan tp;
  ZT_CHECK_OK(zt_train_plan_memory(&cfg, 1, &tp));
  ZT_CHECK(tp.cache_bytes > (1ll << 30) / 64 && zt_mem_cache_limit() >= tp.cache_bytes);
  ZT_CHECK(cfg.memory.held_limit == tp.peak - tp.fixed_bytes); /* the run hands it to the allocator */
  zt_mem_set_cache_limit(before);
  /* 2 GiB: the room (over 1.2 GiB with the fewest slices) is more than four copies of a slice
   * take: the cache stops there, below cache_max_bytes */
  in.cache_max_bytes = 1ll << 30;
  zt_offload_plan d;
  ZT_CHECK_OK(zt_offload_plan_make(&in, 2ll << 30, &d));
  ZT_CHECK(d.cache_bytes < in.cache_max_bytes && (double)d.peak < 0.85 * (double)(2ll << 30));
}

/* llama3.2-1b with every state on disk (B=8, T=256, the bench's run): its tied 128256 x 2048
 * embedding (1002 MiB) updated whole holds weight, grad and two moments, 3.9 GiB, and no plan
 * fits 4 GiB; with OffloadModel's update chunk counted (the default, what zt train runs) the
 * update holds weight, grad and one chunk's moments, and a plan fits 4 GiB with its bound,
 * lower by the embedding's moments less a chunk. (Planner only, no run.) */
static void test_llama_chunked_update_fits_4g(void) {
  zt_offload_plan_input in = {0};
  ZT_CHECK_OK(zt_lm_preset("llama3.2-1b", &in.model));
  in.rows = 8, in.seq = 256, in.microbatches = 1;
  in.fixed_bytes = (int64_t)120 << 20; /* what zt train measured before the model (bench: 116 MiB) */
  in.io_bytes = 2 * ZT_STORE_DISK_QUEUE_DEPTH * 4096;
  in.cache_bytes = (4ll << 30) / 64;
  in.cache_max_bytes = 1ll << 30;
  in.write_cap_bytes = (int64_t)ZT_STORE_WRITE_CAP_DEFAULT;
  in.gflops = 200, in.read_bps = 2e9, in.write_bps = 2e9;
  in.can_offload_activations = true;
  zt_offload_plan whole, chunked;
  ZT_CHECK_ERR(zt_offload_plan_make(&in, 4ll << 30, &whole), ZT_STATUS_OOM, "no plan fits");
  ZT_CHECK(whole.smallest_peak > 4ll << 30);
  in.update_chunk_bytes = (int64_t)zt_offload_model_options_default().update_chunk_bytes;
  ZT_CHECK(in.update_chunk_bytes == (int64_t)ZT_OFFLOAD_MODEL_UPDATE_CHUNK);
  ZT_CHECK_OK(zt_offload_plan_make(&in, 4ll << 30, &chunked));
  ZT_CHECK(chunked.bound <= 4ll << 30 && chunked.smallest_peak <= 4ll << 30);
  /* the same plan's states at its peak, whole against chunked: whole, the embedding's update holds
   * its four copies; chunked, at least one embedding's bytes fewer (the peak may move to another
   * phase) */
  zt_offload_plan a, b;
  int64_t emb = (int64_t)128256 * 2048 * 4;
  in.update_chunk_bytes = 0;
  ZT_CHECK_OK(zt_offload_plan_predict(&in, chunked.slices, chunked.resident, chunked.activations_mode, &a));
  in.update_chunk_bytes = (int64_t)ZT_OFFLOAD_MODEL_UPDATE_CHUNK;
  ZT_CHECK_OK(zt_offload_plan_predict(&in, chunked.slices, chunked.resident, chunked.activations_mode, &b));
  if (!(a.states_bytes >= 4 * emb && b.states_bytes <= a.states_bytes - emb))
    zt_test_fail(__FILE__, __LINE__, "states %lld whole, %lld chunked: not an embedding's bytes apart",
                 (long long)a.states_bytes, (long long)b.states_bytes);
  printf("  llama3.2-1b at 4 GiB: %d slices, %d resident, %s: peak %.0f MiB, bound %.0f MiB (whole updates: the "
         "smallest bound %.0f MiB)\n",
         chunked.slices, chunked.resident, zt_offload_plan_activations_name(chunked.activations_mode),
         (double)chunked.peak / 1048576.0, (double)chunked.bound / 1048576.0, (double)whole.smallest_peak / 1048576.0);
}

static void test_refusal_names_the_smallest(void) {
  zt_offload_plan_input in = input();
  zt_offload_plan p;
  zt_status s = zt_offload_plan_make(&in, 100 << 20, &p);
  ZT_CHECK(s == ZT_STATUS_OOM);
  ZT_CHECK(strstr(zt_last_error(), "the smallest plan needs") != NULL);
  ZT_CHECK(p.smallest_peak > 100 << 20);
  zt_offload_plan q; /* the smallest is a limit that works */
  ZT_CHECK_OK(zt_offload_plan_make(&in, p.smallest_peak, &q));
  ZT_CHECK(q.bound <= p.smallest_peak && q.peak < q.bound);
  ZT_CHECK(zt_offload_plan_make(&in, p.smallest_peak - 1, &q) == ZT_STATUS_OOM);
}

static void test_bad_input(void) {
  zt_offload_plan_input in = input();
  zt_offload_plan p;
  in.microbatches = 3; /* 8 rows do not cut into 3 */
  ZT_CHECK(zt_offload_plan_make(&in, 1ll << 34, &p) == ZT_STATUS_INVALID_ARG);
  in = input();
  ZT_CHECK(zt_offload_plan_predict(&in, in.model.gpt2.n_layer + 3, 2, ZT_OFFLOAD_PLAN_KEEP, &p) == ZT_STATUS_INVALID_ARG);
  in.model.gpt2.n_head = 7; /* 768 is not a multiple */
  ZT_CHECK(zt_offload_plan_make(&in, 1ll << 34, &p) == ZT_STATUS_INVALID_ARG);
  zt_train_config c;
  zt_train_config_default(&c);
  c.memory.mem_limit = 1 << 30; /* without offload_states */
  ZT_CHECK(zt_train_plan_memory(&c, 1, &p) == ZT_STATUS_INVALID_ARG);
  ZT_CHECK(strstr(zt_last_error(), "offload_states") != NULL);
}

/* A small GPT-2 with every state in host memory (the tier's probe is quick). */
static zt_train_config small_config(void) {
  zt_train_config cfg;
  zt_train_config_default(&cfg);
  cfg.memory.offload_model = ZT_OFFLOAD_HOST;
  cfg.memory.offload_states = true;
  cfg.model.n_layer = 4, cfg.model.n_embd = 256, cfg.model.n_head = 4;
  cfg.data.batch = 4, cfg.data.seq = 64;
  return cfg;
}

/* ZT_PLAN_CALIBRATION gives the sgemm rate, the tier's bandwidth and the RSS at planning: the
 * plan is the same however loaded the machine is, and says so; a bad value is refused naming the
 * variable. */
static void test_calibration(void) {
  int64_t cache = zt_mem_cache_limit();
  setenv("ZT_PLAN_CALIBRATION", "gflops=40,read=1G,write=512M,rss=20M", 1);
  zt_offload_plan a, b;
  zt_train_config c1 = small_config(), c2 = small_config();
  c1.memory.mem_limit = c2.memory.mem_limit = 256 << 20;
  ZT_CHECK_OK(zt_train_plan_memory(&c1, 1, &a));
  ZT_CHECK_OK(zt_train_plan_memory(&c2, 1, &b));
  ZT_CHECK(a.calibrated && a.read_bps == 1073741824.0 && a.write_bps == 536870912.0);
  ZT_CHECK(a.fixed_bytes == (20 << 20) + ZT_OFFLOAD_PLAN_FIXED);
  ZT_CHECK(strstr(a.note, "ZT_PLAN_CALIBRATION") != NULL);
  ZT_CHECK(a.slices == b.slices && a.resident == b.resident && a.activations_mode == b.activations_mode &&
           a.peak == b.peak && a.step_s == b.step_s);
  zt_train_config cfg = small_config(); /* the compute time is the given rate's */
  zt_lm_config lc;
  ZT_CHECK_OK(zt_train_model_config(&cfg, &lc));
  const zt_gpt2_config g = lc.gpt2;
  double n = (double)zt_gpt2_config_num_params(&g), tok = 4.0 * 64;
  double flops = 6.0 * n * tok + 12.0 * g.n_layer * 64.0 * g.n_embd * tok;
  double want = flops / 40e9 * (a.activations_mode == ZT_OFFLOAD_PLAN_RECOMPUTE ? 4.0 / 3.0 : 1.0);
  ZT_CHECK_NEAR(a.compute_s, want, want * 1e-9);
  const char *bad[] = {"gflops=0", "read=fast", "rss=20M,speed=3", "gflops=40,"};
  for (int i = 0; i < 4; i++) {
    setenv("ZT_PLAN_CALIBRATION", bad[i], 1);
    zt_train_config c = small_config();
    c.memory.mem_limit = 256 << 20;
    ZT_CHECK_ERR(zt_train_plan_memory(&c, 1, &a), ZT_STATUS_INVALID_ARG, "ZT_PLAN_CALIBRATION");
  }
  unsetenv("ZT_PLAN_CALIBRATION");
  zt__mem_set_resident_limit(0);
  zt_mem_set_cache_limit(cache);
}

/* Writes text into root/rel, making its folders. */
static void put(const char *root, const char *rel, const char *text) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", root, rel);
  for (char *q = path + 1; (q = strchr(q, '/')) != NULL; q++) {
    *q = '\0';
    mkdir(path, 0755);
    *q = '/';
  }
  FILE *f = fopen(path, "w");
  ZT_CHECK(f != NULL);
  if (f) fputs(text, f), fclose(f);
}

/* The memory available, from fake /proc and /sys trees: v2 takes the least memory.max of the
 * cgroup and those above it, at either mount; v1 its hierarchical limit; no limit (or a larger
 * one) leaves MemAvailable plus the process's RSS; nothing readable is an error. */
static void test_mem_available(void) {
  char root[512];
  snprintf(root, sizeof root, "%s/zt_mem_available_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  ZT_CHECK(mkdtemp(root) != NULL);
  zt_mem_available_info av;
  char r[600];
  snprintf(r, sizeof r, "%s/v2", root);
  put(r, "proc/self/cgroup", "0::/a/b\n");
  put(r, "proc/meminfo", "MemTotal: 8000000 kB\nMemAvailable: 4000000 kB\n");
  put(r, "sys/fs/cgroup/cgroup.controllers", "cpu memory\n");
  put(r, "sys/fs/cgroup/a/memory.max", "300000000\n");
  put(r, "sys/fs/cgroup/a/b/memory.max", "max\n");
  ZT_CHECK_OK(zt__mem_available_at(r, 1 << 20, &av));
  ZT_CHECK(av.bytes == 300000000 && strstr(av.source, "v2 /sys/fs/cgroup/a/memory.max"));
  put(r, "sys/fs/cgroup/a/b/memory.max", "200003584\n"); /* the cgroup's own, lower */
  ZT_CHECK_OK(zt__mem_available_at(r, 1 << 20, &av));
  ZT_CHECK(av.bytes == 200003584 && strstr(av.source, "/sys/fs/cgroup/a/b/memory.max"));
  put(r, "sys/fs/cgroup/a/memory.max", "max\n"), put(r, "sys/fs/cgroup/a/b/memory.max", "max\n");
  ZT_CHECK_OK(zt__mem_available_at(r, 1 << 20, &av)); /* no limit: MemAvailable and the RSS */
  ZT_CHECK(av.bytes == 4000000ll * 1024 + (1 << 20) && strstr(av.source, "MemAvailable"));
  put(r, "sys/fs/cgroup/a/b/memory.max", "99999999999\n"); /* more than MemAvailable */
  ZT_CHECK_OK(zt__mem_available_at(r, 0, &av));
  ZT_CHECK(av.bytes == 4000000ll * 1024 && strstr(av.source, "MemAvailable"));
  snprintf(r, sizeof r, "%s/hybrid", root); /* v2 at /sys/fs/cgroup/unified */
  put(r, "proc/self/cgroup", "0::/u\n4:memory:/m\n");
  put(r, "proc/meminfo", "MemAvailable: 4000000 kB\n");
  put(r, "sys/fs/cgroup/unified/cgroup.controllers", "memory\n");
  put(r, "sys/fs/cgroup/unified/u/memory.max", "150000000\n");
  ZT_CHECK_OK(zt__mem_available_at(r, 0, &av));
  ZT_CHECK(av.bytes == 150000000 && strstr(av.source, "v2 /sys/fs/cgroup/unified/u/memory.max"));
  snprintf(r, sizeof r, "%s/v1", root);
  put(r, "proc/self/cgroup", "5:cpu,cpuacct:/x\n4:memory:/m/n\n0::/\n");
  put(r, "proc/meminfo", "MemAvailable: 4000000 kB\n");
  put(r, "sys/fs/cgroup/memory/m/n/memory.stat", "cache 0\nhierarchical_memory_limit 123456789\nrss 1\n");
  ZT_CHECK_OK(zt__mem_available_at(r, 0, &av));
  ZT_CHECK(av.bytes == 123456789 && strstr(av.source, "v1 /sys/fs/cgroup/memory/m/n/memory.stat"));
  put(r, "sys/fs/cgroup/memory/m/n/memory.stat", "hierarchical_memory_limit 9223372036854771712\n"); /* none */
  ZT_CHECK_OK(zt__mem_available_at(r, 0, &av));
  ZT_CHECK(av.bytes == 4000000ll * 1024 && strstr(av.source, "MemAvailable"));
  snprintf(r, sizeof r, "%s/none", root); /* nothing to read */
  ZT_CHECK(mkdir(r, 0755) == 0);
  ZT_CHECK_ERR(zt__mem_available_at(r, 0, &av), ZT_STATUS_UNSUPPORTED, "mem_limit");
  ZT_CHECK_OK(zt_mem_available(&av)); /* this machine's */
  ZT_CHECK(av.bytes > 0 && av.source[0]);
  char cmd[700];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  ZT_CHECK(system(cmd) == 0);
}

/* Every state in the store without a limit: one process plans for the memory available and says
 * which limit that was; slices given are predicted, not chosen (the one not given becomes 2);
 * under several processes (or without offload_states) OffloadModel keeps its 2 and 2. */
static void test_plan_without_limit(void) {
  int64_t cache = zt_mem_cache_limit();
  setenv("ZT_PLAN_CALIBRATION", "gflops=40,read=1G,write=1G,rss=20M", 1);
  zt_mem_available_info av;
  ZT_CHECK_OK(zt_mem_available(&av));
  zt_train_config c = small_config();
  zt_offload_plan p;
  ZT_CHECK_OK(zt_train_plan_memory(&c, 1, &p));
  /* (MemAvailable moves between two reads) */
  ZT_CHECK(p.peak > 0 && !p.given && fabs((double)p.limit / (double)av.bytes - 1) < 0.05 &&
           !strcmp(p.limit_source, av.source));
  ZT_CHECK(c.memory.offload_slices == p.slices && c.memory.offload_resident == p.resident && p.bound <= p.limit);
  ZT_CHECK(strstr(p.note, "planned for") && strstr(p.note, av.source));
  c = small_config();
  c.memory.offload_slices = 3;
  ZT_CHECK_OK(zt_train_plan_memory(&c, 1, &p));
  ZT_CHECK(p.given && p.slices == 3 && p.resident == 2 && c.memory.offload_slices == 3 &&
           c.memory.offload_resident == 2 && p.peak > 0 && strstr(p.note, "the plan given"));
  zt_offload_plan q; /* the prediction is zt_offload_plan_predict's, with the cache the plan leaves room for */
  zt_offload_plan_input in = {0};
  ZT_CHECK_OK(zt_train_model_config(&c, &in.model));
  in.rows = 4, in.seq = 64, in.microbatches = 1, in.fixed_bytes = (20 << 20) + ZT_OFFLOAD_PLAN_FIXED;
  in.write_cap_bytes = (int64_t)ZT_STORE_WRITE_CAP_DEFAULT, in.gflops = 40, in.read_bps = in.write_bps = 1 << 30;
  ZT_CHECK_OK(zt_offload_plan_predict(&in, 3, 2, ZT_OFFLOAD_PLAN_RECOMPUTE, &q));
  ZT_CHECK(p.states_bytes == q.states_bytes && p.activation_bytes == q.activation_bytes);
  c = small_config();
  ZT_CHECK_OK(zt_train_plan_memory(&c, 2, &p)); /* DDP: each rank would plan alone */
  ZT_CHECK(p.peak == 0 && c.memory.offload_slices == 2 && c.memory.offload_resident == 2);
  c = small_config();
  c.memory.offload_states = false; /* OffloadModel alone */
  ZT_CHECK_OK(zt_train_plan_memory(&c, 1, &p));
  ZT_CHECK(p.peak == 0 && c.memory.offload_slices == 2 && c.memory.offload_resident == 2);
  c = small_config(); /* a limit past what the process can have names it */
  c.memory.mem_limit = av.bytes + (1ll << 30);
  ZT_CHECK_ERR(zt_train_plan_memory(&c, 1, &p), ZT_STATUS_INVALID_ARG, "more than this process can have");
  ZT_CHECK(strstr(zt_last_error(), av.source) != NULL);
  unsetenv("ZT_PLAN_CALIBRATION");
  zt__mem_set_resident_limit(0);
  zt_mem_set_cache_limit(cache);
}

int main(void) {
  ZT_RUN(test_fits_and_monotone);
  ZT_RUN(test_slices_shrink_states);
  ZT_RUN(test_recompute_per_slice);
  ZT_RUN(test_trial_counts_both_ways);
  ZT_RUN(test_cache_fills_the_room);
  ZT_RUN(test_llama_chunked_update_fits_4g);
  ZT_RUN(test_refusal_names_the_smallest);
  ZT_RUN(test_bad_input);
  ZT_RUN(test_calibration);
  ZT_RUN(test_mem_available);
  ZT_RUN(test_plan_without_limit);
  return zt_test_finish();
}
