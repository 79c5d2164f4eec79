#pragma GCC diagnostic ignored "-Wunused-parameter"
/* TEMPORARY (removed before landing): weak placeholders for functions declared in
 * nn.h / optim.h / train.h / ops.h that are being written in parallel, so that every
 * build links meanwhile. A real definition anywhere in libzt overrides these. */
#include "zt/train.h"

#define STUB(ret, name, args) \
  __attribute__((weak)) ret name args { return ZT_ERR(ZT_STATUS_UNSUPPORTED, #name " is not implemented yet"); }
#define STUBV(name, args) \
  __attribute__((weak)) void name args {}
#define STUBX(ret, name, args, val) \
  __attribute__((weak)) ret name args { return val; }

STUB(zt_status, zt_linear_io, (zt_tensor *x, zt_tensor *w, zt_tensor *b, zt_tensor **o))
STUB(zt_status, zt_lm_head_cross_entropy, (zt_tensor *x, zt_tensor *w, zt_tensor *t, int64_t ii, zt_tensor **o))
STUB(zt_status, zt_gpt2_preset, (const char *name, zt_gpt2_config *out))
STUB(zt_status, zt_gpt2_config_validate, (const zt_gpt2_config *c))
STUB(zt_status, zt_gpt2_new, (const zt_gpt2_config *c, zt_gpt2 **out))
STUBV(zt_gpt2_free, (zt_gpt2 * m))
STUBX(const zt_gpt2_config *, zt_gpt2_get_config, (const zt_gpt2 *m), NULL)
STUBX(int, zt_gpt2_params, (zt_gpt2 * m, zt_param **p), 0)
STUBX(int64_t, zt_gpt2_num_params, (const zt_gpt2 *m), 0)
STUBV(zt_gpt2_set_training, (zt_gpt2 * m, bool t))
STUB(zt_status, zt_gpt2_forward, (zt_gpt2 * m, zt_tensor *ids, zt_tensor *t, zt_tensor **l, zt_tensor **loss))
STUBX(double, zt_gpt2_flops_per_step, (const zt_gpt2 *m, int64_t B, int64_t T), 0)
STUBX(zt_optim_config, zt_optim_default, (zt_optim_kind k), (zt_optim_config){0})
STUB(zt_status, zt_optim_new, (const zt_optim_config *c, int n, const zt_param *p, zt_optim **o))
STUBV(zt_optim_free, (zt_optim * o))
STUB(zt_status, zt_optim_step, (zt_optim * o, double lr))
STUBV(zt_optim_zero_grad, (zt_optim * o))
STUBX(int64_t, zt_optim_step_count, (const zt_optim *o), 0)
STUB(zt_status, zt_optim_state, (zt_optim * o, int *n, const char *const **nm, zt_tensor *const **t))
STUBV(zt_optim_set_step_count, (zt_optim * o, int64_t s))
STUB(zt_status, zt_clip_grad_norm, (int n, const zt_param *p, double mx, double *norm))
STUBX(double, zt_lr_cosine, (int64_t s, int64_t w, int64_t t, double a, double b), 0)
STUB(zt_status, zt_tokens_load, (const char *p, zt_tokens **o))
STUB(zt_status, zt_tokens_save, (const char *p, const zt_tokens *t, int w))
STUBV(zt_tokens_free, (zt_tokens * t))
STUB(zt_status, zt_tokens_check_range, (const zt_tokens *t, int32_t v))
STUB(zt_status, zt_tokenizer_byte, (zt_tokenizer **o))
STUB(zt_status, zt_tokenizer_gpt2, (const char *a, const char *b, zt_tokenizer **o))
STUBV(zt_tokenizer_free, (zt_tokenizer * t))
STUBX(int32_t, zt_tokenizer_vocab_size, (const zt_tokenizer *t), 0)
STUB(zt_status, zt_tokenizer_encode, (const zt_tokenizer *t, const char *x, size_t l, int32_t **i, int64_t *n))
STUB(zt_status, zt_tokenizer_decode, (const zt_tokenizer *t, const int32_t *i, int64_t n, char **x, size_t *l))
STUB(zt_status, zt_tokenize_file, (const zt_tokenizer *t, const char *a, const char *b))
STUB(zt_status, zt_default_dataset, (zt_tokens **a, zt_tokens **b))
STUB(zt_status, zt_loader_new, (const zt_tokens *t, const zt_loader_config *c, zt_loader **o))
STUBV(zt_loader_free, (zt_loader * l))
STUB(zt_status, zt_loader_next, (zt_loader * l, zt_tensor *x, zt_tensor *y))
STUBX(zt_loader_pos, zt_loader_get_pos, (const zt_loader *l), (zt_loader_pos){0})
STUB(zt_status, zt_loader_set_pos, (zt_loader * l, zt_loader_pos p))
STUBX(int64_t, zt_loader_windows_per_epoch, (const zt_loader *l), 0)
STUB(zt_status, zt_write_file_atomic, (const char *p, const void *const *c, const size_t *s, int n))
STUB(zt_status, zt_read_file, (const char *p, void **d, size_t *s))
STUB(zt_status, zt_safetensors_save, (const char *p, int n, const char *const *nm, zt_tensor *const *t, int nm2,
                                      const char *const *k, const char *const *v))
STUB(zt_status, zt_safetensors_load_into, (const char *p, int n, const char *const *nm, zt_tensor *const *t, bool s))
STUB(zt_status, zt_safetensors_metadata, (const char *p, const char *k, char **v))
STUB(zt_status, zt_checkpoint_save, (const char *d, zt_gpt2 *m, zt_optim *o, const zt_train_state *s))
STUB(zt_status, zt_checkpoint_load, (const char *d, zt_gpt2 *m, zt_optim *o, zt_train_state *s))
STUB(zt_status, zt_checkpoint_read_state, (const char *d, zt_train_state *s))
STUB(zt_status, zt_gpt2_load_hf, (zt_gpt2 * m, const char *p))
STUB(zt_status, zt_gpt2_save_hf, (zt_gpt2 * m, const char *p))
