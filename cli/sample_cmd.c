/* zt sample (text from a checkpoint) and zt tokenize (text files -> token file). Both use
 * the byte-level tokenizer unless GPT-2 encoder/merges files are given (zt tokenize also takes a
 * Hugging Face tokenizer folder, --tokenizer DIR); zt sample takes the
 * checkpoint's own (vocab.json, merges.txt) when none is given, and refuses, before generating,
 * a model whose ids are not bytes when it has none. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static int load_tokenizer(const char *cmd, const char *enc, const char *merges, zt_tokenizer **t) {
  if ((enc != NULL) != (merges != NULL)) {
    fprintf(stderr, "zt %s: give both --encoder and --merges for GPT-2 BPE, or neither for bytes\n", cmd);
    return 2;
  }
  if (enc ? zt_tokenizer_gpt2(enc, merges, t) : zt_tokenizer_byte(t)) return zt_cli_fail(cmd);
  return 0;
}

/* The prompt's logits as JSON into path (zt sample --logits). */
static int write_logits(const zt_model *m, const int32_t *ids, int64_t n, int vocab, const char *path) {
  float *lg = NULL;
  if (zt_lm_logits(m, ids, n, &lg)) return zt_cli_fail("sample");
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "zt sample: cannot write --logits '%s'\n", path);
    free(lg);
    return 2;
  }
  fprintf(f, "{\"tokens\": [");
  for (int64_t i = 0; i < n; i++) fprintf(f, "%s%d", i ? ", " : "", ids[i]);
  fprintf(f, "],\n\"logits\": [");
  for (int64_t i = 0; i < n; i++) {
    fprintf(f, "%s[", i ? ",\n" : "");
    for (int v = 0; v < vocab; v++) fprintf(f, "%s%.9g", v ? ", " : "", lg[i * vocab + v]);
    fprintf(f, "]");
  }
  fprintf(f, "]}\n");
  free(lg);
  if (fclose(f) != 0) {
    fprintf(stderr, "zt sample: writing --logits '%s' failed\n", path);
    return 2;
  }
  return 0;
}

/* What DIR names: a zerotrain checkpoint (series or version: ck its version, c from its
 * state.json), else a Hugging Face model folder (*hf; c from its config.json). */
static zt_status open_source(const char *dir, char *ck, size_t cap, zt_lm_config *c, bool *hf) {
  char cfg[4200];
  snprintf(cfg, sizeof cfg, "%s/config.json", dir);
  *hf = access(cfg, F_OK) == 0 && zt_snapshot_resolve(dir, ck, cap) != ZT_OK;
  if (*hf) {
    zt_clear_error();
    snprintf(ck, cap, "%s", dir);
    return zt_lm_config_from_hf(dir, c);
  }
  zt_train_state st;
  zt_status s = zt_snapshot_resolve(dir, ck, cap);
  if (!s) s = zt_snapshot_read_state(ck, &st);
  if (!s) *c = st.model;
  return s;
}

/* The tokenizer: the one given, else the one the checkpoint ck carries (a Hugging Face
 * tokenizer.json first), else bytes, which only a 256-token model makes. */
static int choose_tokenizer(const char *ck, int vocab, const char *hf, const char *enc, const char *merges,
                            zt_tokenizer **tok) {
  char ck_enc[4200], ck_merges[4200];
  if (hf && (enc || merges)) {
    fprintf(stderr, "zt sample: give --tokenizer DIR or --encoder/--merges, not both\n");
    return 2;
  }
  snprintf(ck_enc, sizeof ck_enc, "%s/tokenizer.json", ck);
  if (!hf && !enc && !merges && access(ck_enc, F_OK) == 0) hf = ck;
  snprintf(ck_enc, sizeof ck_enc, "%s/vocab.json", ck);
  snprintf(ck_merges, sizeof ck_merges, "%s/merges.txt", ck);
  if (!hf && !enc && !merges && access(ck_enc, F_OK) == 0 && access(ck_merges, F_OK) == 0)
    enc = ck_enc, merges = ck_merges;
  if (!hf && !enc && !merges && vocab != 256) {
    fprintf(stderr,
            "zt sample: checkpoint '%s' is of a model with a vocabulary of %d tokens, whose ids are not bytes, and it "
            "holds no tokenizer (tokenizer.json, or vocab.json and merges.txt): give --tokenizer DIR (a Hugging Face "
            "tokenizer folder) or --encoder encoder.json --merges vocab.bpe, the files its training data was tokenized "
            "with\n",
            ck, vocab);
    return 2;
  }
  if (hf) return zt_tokenizer_hf(hf, tok) ? zt_cli_fail("sample") : 0;
  return load_tokenizer("sample", enc, merges, tok);
}

/* A model of config c with the weights of ck: a Hugging Face folder (hf) or a checkpoint. */
static zt_status load_model(const zt_lm_config *c, bool hf, const char *ck, zt_model *m) {
  zt_status s = zt_lm_new(c, ZT_DTYPE_F32, NULL, m);
  if (!s) s = hf ? zt_lm_load_hf(m, ck) : zt_snapshot_load(ck, m, NULL, NULL);
  return s;
}

/* zt sample --ids LIST --logits FILE: the logits of those ids, no tokenizer. */
static int logits_of_ids(const zt_lm_config *c, bool hf, const char *ck, const char *list, int vocab, const char *to) {
  if (!to) {
    fprintf(stderr, "zt sample: --ids gives a prompt for --logits; to sample text give --prompt\n");
    return 2;
  }
  int32_t ids[4096];
  int64_t n = 0;
  for (const char *p = list; *p && n < 4096; n++) {
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p || v < 0 || v >= vocab || (*end && *end != ',')) {
      fprintf(stderr, "zt sample: --ids '%s': give comma-separated token ids in [0, %d)\n", list, vocab);
      return 2;
    }
    ids[n] = (int32_t)v;
    p = *end ? end + 1 : end;
  }
  zt_model m = {0};
  int rc = load_model(c, hf, ck, &m) ? zt_cli_fail("sample") : write_logits(&m, ids, n, vocab, to);
  zt_model_free(&m);
  return rc;
}

int zt_cmd_sample(int argc, char **argv) {
  const char *dir = NULL, *prompt = "\n", *enc = NULL, *merges = NULL, *hf = NULL, *logits_to = NULL, *ids_arg = NULL;
  int64_t len = 200, top_k = 0, seed = 1;
  double temp = 0.8;
  if (zt_cli_wants_help(argc, argv)) {
    printf("usage: zt sample --checkpoint DIR (zt train --save's, or a Hugging Face model folder) [--prompt TEXT] [--len N (200, at most %d)]\n"
           "                 [--temperature T (0.8; 0 = greedy; at most 100)] [--top-k K (0 = all)] [--seed S (1)]\n"
           "                 [--tokenizer DIR | --encoder encoder.json --merges vocab.bpe] [--logits FILE.json [--ids 1,2,3]]\n"
           "the tokenizer: --tokenizer (a folder with a Hugging Face tokenizer.json) or --encoder/--merges (GPT-2),\n"
           "else the checkpoint's own (tokenizer.json, else vocab.json and merges.txt), else bytes;\n"
           "--logits writes the prompt's logits, {\"tokens\": [...], \"logits\": [[...] per token]}, instead of sampling;\n"
           "--ids gives that prompt as token ids, no tokenizer needed\n"
           "(scripts/check_hf_load.py --expect compares them with transformers')\n",
           ZT_SAMPLE_MAX_LEN);
    return 0;
  }
  char name[64];
  const char *v;
  int rc;
  for (int i = 0; (rc = zt_cli_option("sample", argc, argv, &i, name, &v)) != 1;) {
    if (rc) return rc;
    if (!strcmp(name, "checkpoint")) dir = v;
    else if (!strcmp(name, "prompt")) prompt = v;
    else if (!strcmp(name, "encoder")) enc = v;
    else if (!strcmp(name, "merges")) merges = v;
    else if (!strcmp(name, "tokenizer")) hf = v;
    else if (!strcmp(name, "logits")) logits_to = v;
    else if (!strcmp(name, "ids")) ids_arg = v;
    else if (!strcmp(name, "len")) rc = zt_cli_i64("sample", name, v, 0, ZT_SAMPLE_MAX_LEN, &len);
    else if (!strcmp(name, "top-k")) rc = zt_cli_i64("sample", name, v, 0, INT32_MAX, &top_k);
    else if (!strcmp(name, "seed")) rc = zt_cli_i64("sample", name, v, 0, INT64_MAX, &seed);
    else if (!strcmp(name, "temperature")) {
      if (zt_config_parse_f64(name, v, 0, 100, &temp)) {
        fprintf(stderr, "zt sample: %s\n", zt_last_error());
        rc = 2;
      }
    } else {
      fprintf(stderr, "zt sample: unknown option '--%s' (see zt sample --help)\n", name);
      rc = 2;
    }
    if (rc) return rc;
  }
  if (!dir) {
    fprintf(stderr, "zt sample: --checkpoint DIR is required (a folder written by zt train --save, or a Hugging Face "
                    "model folder)\n");
    return 2;
  }
  zt_train_state st = {0};
  char ck[4096];
  bool hf_model = false;
  if (open_source(dir, ck, sizeof ck, &st.model, &hf_model)) return zt_cli_fail("sample");
  int vocab = zt_lm_config_dims(&st.model).vocab;
  if (ids_arg) return logits_of_ids(&st.model, hf_model, ck, ids_arg, vocab, logits_to);
  zt_tokenizer *tok = NULL;
  if ((rc = choose_tokenizer(ck, vocab, hf, enc, merges, &tok))) return rc;
  zt_model model = {0}, *m = &model;
  int32_t *ids = NULL, *out = NULL;
  int64_t n = 0, n_out = 0;
  rc = 1;
  if (load_model(&st.model, hf_model, ck, m)) goto fail;
  if (zt_tokenizer_vocab_size(tok) > vocab) {
    fprintf(stderr, "zt sample: the tokenizer has %d tokens but the model only %d\n", zt_tokenizer_vocab_size(tok),
            vocab);
    goto done;
  }
  if (zt_tokenizer_encode(tok, prompt, strlen(prompt), &ids, &n)) goto fail;
  if (logits_to) {
    rc = write_logits(m, ids, n, vocab, logits_to);
    goto done;
  }
  if (zt_lm_sample(m, ids, n, len, temp, (int)top_k, (uint64_t)seed, &out, &n_out)) goto fail;
  char *text = NULL;
  size_t tl = 0;
  if (zt_tokenizer_decode(tok, out, n_out, &text, &tl)) goto fail;
  fwrite(text, 1, tl, stdout);
  printf("\n");
  free(text);
  rc = 0;
  goto done;
fail:
  rc = zt_cli_fail("sample");
done:
  free(ids), free(out);
  zt_model_free(m);
  zt_tokenizer_free(tok);
  return rc;
}

int zt_cmd_tokenize(int argc, char **argv) {
  const char *enc = NULL, *merges = NULL, *hf = NULL;
  if (zt_cli_wants_help(argc, argv)) {
    printf("usage: zt tokenize INPUT... OUTPUT.tok [--tokenizer DIR | --encoder encoder.json --merges vocab.bpe]\n"
           "INPUT: text files and folders (a folder: the files under it, at any depth, sorted; names starting with\n"
           "'.' skipped); each file is one document.\n"
           "--tokenizer DIR: a Hugging Face tokenizer (DIR/tokenizer.json and DIR/tokenizer_config.json, as in a\n"
           "model folder): each document gets the bos the tokenizer adds and ends with its eos token.\n"
           "--encoder/--merges: GPT-2 byte-pair encoding. Neither: byte-level tokens. These two have no special\n"
           "tokens: the documents' tokens follow each other.\n");
    return 0;
  }
  char name[64];
  const char *v;
  int rc, n_pos = 0;
  const char **pos = calloc((size_t)argc + 1, sizeof *pos);
  if (!pos) return zt_cli_fail("tokenize");
  for (int i = 0; (rc = zt_cli_arg("tokenize", argc, argv, &i, NULL, name, &v)) != 1;) {
    if (rc) goto done;
    if (!strcmp(name, "encoder")) enc = v;
    else if (!strcmp(name, "merges")) merges = v;
    else if (!strcmp(name, "tokenizer")) hf = v;
    else if (name[0]) {
      fprintf(stderr, "zt tokenize: unknown option '--%s'\n", name);
      rc = 2;
      goto done;
    } else pos[n_pos++] = v;
  }
  rc = 2;
  if (n_pos < 2) {
    fprintf(stderr, "zt tokenize: usage: zt tokenize INPUT... OUTPUT.tok [--tokenizer DIR | --encoder F --merges F]\n");
    goto done;
  }
  if (hf && (enc || merges)) {
    fprintf(stderr, "zt tokenize: give --tokenizer DIR or --encoder/--merges, not both\n");
    goto done;
  }
  zt_tokenizer *tok = NULL;
  if (hf) rc = zt_tokenizer_hf(hf, &tok) ? zt_cli_fail("tokenize") : 0;
  else rc = load_tokenizer("tokenize", enc, merges, &tok);
  if (rc) goto done;
  const char *out = pos[n_pos - 1];
  int64_t docs = 0, count = 0;
  if (hf && n_pos > 2 && zt_tokenizer_eos_id(tok) < 0) {
    fprintf(stderr, "zt tokenize: the tokenizer of '%s' has no eos token (tokenizer_config.json's eos_token) to "
                    "separate the documents with\n", hf);
    rc = 2;
  } else if (zt_tokenize_files(tok, pos, n_pos - 1, out, &docs, &count)) {
    rc = zt_cli_fail("tokenize");
  } else {
    printf("zt tokenize: wrote %s (%lld document%s, %lld tokens, vocabulary %d)\n", out, (long long)docs,
           docs == 1 ? "" : "s", (long long)count, zt_tokenizer_vocab_size(tok));
  }
  zt_tokenizer_free(tok);
done:
  free(pos);
  return rc;
}
