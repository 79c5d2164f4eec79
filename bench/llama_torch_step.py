"""The PyTorch side of bench/llama_step.sh: one training step of transformers' LlamaForCausalLM at
SmolLM-135M's shape (HuggingFaceTB/SmolLM-135M's config.json; random init, fp32,
attn_implementation="sdpa"), as bench/bench_llama_step.c times zerotrain's: forward to the mean
cross-entropy of the logits against given targets (no shift: the targets are the next tokens
already, as zerotrain takes them), backward, AdamW (lr 6e-4, betas (0.9, 0.95), eps 1e-8, weight
decay 0.1 on the 2-D tensors only), zero_grad (set to none); each phase timed, medians of the
timed steps after warm-up. --mode eager runs the module as it is; --mode compile runs forward and
loss under torch.compile (default mode; the warm-up steps, where it compiles, are excluded and
reported as warmup_s). Prints one JSON line shaped like bench_llama_step's, with the GFLOP/s of
torch.mm at the same representative GEMM shape measured in the same run.
Run: python bench/llama_torch_step.py --mode eager|compile [--steps 5] [--warmup 1] [--threads 2]
[--batch 4] [--seq 256] [--layers 30] [--adamw fused|foreach|forloop]
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F
import transformers
from transformers import LlamaConfig, LlamaForCausalLM


def smollm_135m(layers):
    c = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=layers,
             num_attention_heads=9, num_key_value_heads=3, head_dim=64, max_position_embeddings=2048,
             rms_norm_eps=1e-5, tie_word_embeddings=True, initializer_range=0.02, use_cache=False,
             attention_bias=False, mlp_bias=False)
    try:  # transformers 5 keeps rope_theta in rope_parameters; 4 at the top level
        return LlamaConfig(rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, **c)
    except TypeError:
        return LlamaConfig(rope_theta=10000.0, **c)


def make_optimizer(model, kind):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}]
    flags = {"fused": dict(fused=True), "foreach": dict(foreach=True), "forloop": dict(foreach=False)}[kind]
    return torch.optim.AdamW(groups, lr=6e-4, betas=(0.9, 0.95), eps=1e-8, **flags)


def flops_per_step(model, cfg, B, T):
    """zt_llama_flops_per_step's count: 6 N B T + 12 L T (heads head_dim) B T (a tied matrix once)."""
    n = sum(p.numel() for p in model.parameters())
    d = cfg.num_attention_heads * cfg.head_dim
    return 6.0 * n * B * T + 12.0 * cfg.num_hidden_layers * T * d * B * T


def mm_gflops(m, n, k, runs=31):
    a, b = torch.rand(m, k), torch.rand(k, n)
    torch.mm(a, b)
    t = []
    for _ in range(runs):
        t0 = time.perf_counter()
        torch.mm(a, b)
        t.append(time.perf_counter() - t0)
    return 2.0 * m * n * k / statistics.median(t) / 1e9


def timed_step(fwd_loss, opt, x, y):
    """One step: returns (loss, forward s, backward s, optimizer s)."""
    t0 = time.perf_counter()
    loss = fwd_loss(x, y)
    t1 = time.perf_counter()
    loss.backward()
    t2 = time.perf_counter()
    opt.step()
    opt.zero_grad(set_to_none=True)
    t3 = time.perf_counter()
    return loss.item(), t1 - t0, t2 - t1, t3 - t2


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", choices=["eager", "compile"], default="eager")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--adamw", choices=["fused", "foreach", "forloop"], default="fused")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    cfg = smollm_135m(a.layers)
    model = LlamaForCausalLM._from_config(cfg, attn_implementation="sdpa", dtype=torch.float32)
    model.train()
    opt = make_optimizer(model, a.adamw)
    V = cfg.vocab_size

    def fwd_loss(x, y):
        logits = model(input_ids=x).logits
        return F.cross_entropy(logits.reshape(-1, V), y.reshape(-1))

    if a.mode == "compile":
        fwd_loss = torch.compile(fwd_loss)
    x = torch.randint(0, V, (a.batch, a.seq))
    y = torch.randint(0, V, (a.batch, a.seq))
    t0 = time.perf_counter()
    for _ in range(a.warmup):
        timed_step(fwd_loss, opt, x, y)
    warm = time.perf_counter() - t0
    runs = [timed_step(fwd_loss, opt, x, y) for _ in range(a.steps)]
    step = [f + b + o for _, f, b, o in runs]
    med = statistics.median(step)
    gf = flops_per_step(model, cfg, a.batch, a.seq) / med / 1e9
    sg = mm_gflops(a.batch * a.seq, cfg.intermediate_size, cfg.hidden_size)
    sg2048 = mm_gflops(2048, 2048, 2048, runs=7)
    out = {"bench": "llama_step", "impl": "torch-" + a.mode, "model": "smollm-135m", "layers": a.layers,
           "params": sum(p.numel() for p in model.parameters()), "batch": a.batch, "seq": a.seq,
           "threads": torch.get_num_threads(), "warmup": a.warmup, "steps": a.steps,
           "ms_per_step": round(1e3 * med, 1), "ms_best": round(1e3 * min(step), 1),
           "fwd_ms": round(1e3 * statistics.median(r[1] for r in runs), 1),
           "bwd_ms": round(1e3 * statistics.median(r[2] for r in runs), 1),
           "optim_ms": round(1e3 * statistics.median(r[3] for r in runs), 1),
           "tokens_per_s": round(a.batch * a.seq / med, 1), "model_gflops": round(gf, 2),
           "sgemm_shape": f"{a.batch * a.seq}x{cfg.intermediate_size}x{cfg.hidden_size}",
           "sgemm_gflops": round(sg, 2), "ratio_to_sgemm": round(gf / sg, 3),
           "sgemm2048_gflops": round(sg2048, 2), "ratio_to_sgemm2048": round(gf / sg2048, 3),
           "loss": round(runs[-1][0], 4), "warmup_s": round(warm, 1), "adamw": a.adamw,
           "attn": model.config._attn_implementation, "torch": torch.__version__,
           "transformers": transformers.__version__}
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
