#!/usr/bin/env python3
"""Writes tests/fixtures/llama/: float64 PyTorch references for four tiny Llama-family models.

Run by developers (not by CI) when a reference itself must change; the fixtures are committed.
Needs PyTorch and transformers from PyPI (CPU is enough):

    python3 -m venv /tmp/ztvenv && /tmp/ztvenv/bin/pip install torch transformers
    /tmp/ztvenv/bin/python scripts/gen_llama_fixture.py          # from the repo root

(made with torch 2.15.0 and transformers 5.24.0 on Python 3.11; re-running it gives
bit-identical files. Another torch version could draw other random weights from the same seed:
the fixtures are then different but just as valid; a test reads everything from them.)

For each case (a tiny LlamaForCausalLM with GQA and Llama 3 rope scaling, untied head; a tiny
Qwen2ForCausalLM with q/k/v biases, tied; a tiny Qwen3ForCausalLM with per-head q/k RMSNorm and
an explicit head_dim != hidden_size / heads, tied; a tiny MistralForCausalLM with one KV head
and a sliding window longer than the sequence, untied) it writes

    tests/fixtures/llama/CASE/model/config.json          what transformers' save_pretrained
    tests/fixtures/llama/CASE/model/model.safetensors    writes (F32 weights; no lm_head.weight
                                                          when tied), for `--init-from`
    tests/fixtures/llama/CASE/reference.safetensors      the expected values

reference.safetensors holds (every stored tensor F32, the f64 results rounded, except):
  input_ids, targets   I32 (batch, seq); targets are the next tokens, one of them -1 (ignored)
  logits               (batch, seq, vocab), from input_ids
  loss, loss_step2     F64 scalars: mean cross-entropy over the targets that are not -1, before
                       the first and before the second AdamW step
  grad.NAME            the gradient of every parameter NAME (Hugging Face names, as in the
                       model folder; a tied head has no lm_head.weight: its gradient is part of
                       grad.model.embed_tokens.weight)
  after2.NAME          every parameter after two AdamW steps on the same batch (grads cleared
                       between); decay on exactly the tensors with >= 2 dims (embeddings, linear
                       weights, an untied lm_head), none on biases and RMSNorm weights
  rope_inv_freq        F64 (head_dim / 2): the rotary inverse frequencies after rope scaling
and __metadata__ (strings): case, model_type, architecture; config: the config.json fields a
loader must honour (LOADER_FIELDS), as JSON; the same as numbers: vocab_size, hidden_size,
intermediate_size, num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim,
rms_norm_eps, rope_theta, rope_type (a word), for llama3 rope_factor, rope_low_freq_factor,
rope_high_freq_factor, rope_original_max_position_embeddings, tie_word_embeddings,
attention_bias (q/k/v biases), qk_norm, sliding_window (0: none); batch, seq, seed,
ignore_index (-1); the AdamW hyper-parameters lr, beta1, beta2, eps, weight_decay (the same
as tests/fixtures/gpt2) and decay; torch_version, transformers_version.

Beside model/, CASE/config_v4.json is the same config in the layout of transformers 4.x, which
most Hub folders carry (rope_theta and rope_scaling at the top level, torch_dtype), where
transformers 5 writes rope_parameters (holding rope_theta) and dtype: a loader should read
both; copied as config.json beside model.safetensors it gives transformers the same model
(checked). Note that Qwen2's config.json has no attention_bias: model_type "qwen2" means
biases on q, k and v.

The reference is a minimal Llama-family decoder written here in float64 (transformers' own
modules compute RMSNorm, softmax and the rotary cos/sin in float32 even in a float64 model, so
they are not an f64 reference). The script then loads each saved folder with transformers
(AutoModelForCausalLM, eager attention, float64), requires no missing or unexpected keys and
the same F32 weights bit for bit, and requires the same logits, loss and gradients to within
transformers' own float32 internals (checked below; measured ~1e-7 relative).

Invariants of the fixtures:
- weights are drawn in float64, rounded to float32, and the reference runs in float64 from
  those rounded values, so zerotrain (loading the F32 folder) starts from the same point;
- the reference is exact to ~1e-12, so a test's tolerances measure zerotrain's own error: the
  GPT-2 golden test's tolerances apply (docs/development.md, tests/test_golden_gpt2.c);
- rows of an untied embedding whose token is not in input_ids have exactly zero gradient (and
  move only by weight decay);
- each case's seed was picked among 1..60 as the one where the same model, loss and AdamW in
  PyTorch's float32 stay furthest inside the GPT-2 golden test's f32 tolerances (printed for
  each case: at most 0.11 of them, logits the largest; after two steps at most 0.034): no
  gradient element is so near zero that f32 rounding turns Adam's first steps;
- all four cases together 1.26 MB (each reference ~0.2 MB, each folder ~0.1 MB).
"""
import json
import math
import os
import shutil
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_gpt2_fixture import write_safetensors  # noqa: E402 (the fixtures' safetensors writer, one home)

B, T = 2, 16
IGNORED = (1, 5)  # (row, position) whose target is -1 (ignore index)
ADAMW = dict(lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)  # as tests/fixtures/gpt2

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "llama")

# The tiny models. `hf` is passed to the transformers config class; the rest drives this script.
CASES = {
    # Llama 3: GQA (4 query heads on 2 KV heads), Llama 3 rope scaling, untied head. With
    # head_dim 8 and rope_theta 5e5 the four wavelengths are 6.3, 167, 4443 and 118800
    # positions; original_max_position_embeddings 256 with low/high_freq_factor 1/4 puts them
    # in all three branches of the llama3 rule (kept < 64, smoothed in 64..256, divided by
    # factor > 256).
    "llama3": dict(
        cls="LlamaForCausalLM", config="LlamaConfig", seed=25,
        hf=dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=2048,
                rms_norm_eps=1e-5, hidden_act="silu", attention_bias=False, mlp_bias=False,
                tie_word_embeddings=False,
                rope_parameters=dict(rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0,
                                     high_freq_factor=4.0, original_max_position_embeddings=256)),
    ),
    # Qwen2 / 2.5: biases on q, k and v (none on o_proj or the MLP), tied embeddings. The key
    # bias only matters through rope (without it, softmax ignores q.b_k), and with head_dim 8
    # the slowest rope frequency is theta^-0.75: rope_theta 1e4 rather than Qwen's 1e6 keeps
    # its gradient away from zero (about 1e-5 of the tensor's largest at 1e6).
    "qwen2": dict(
        cls="Qwen2ForCausalLM", config="Qwen2Config", seed=15,
        hf=dict(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                rms_norm_eps=1e-6, hidden_act="silu", tie_word_embeddings=True, use_sliding_window=False,
                rope_parameters=dict(rope_type="default", rope_theta=10000.0)),
    ),
    # Qwen3: RMSNorm over head_dim on every q and k head (before rope), no biases, and an
    # explicit head_dim (16) that is not hidden_size / num_attention_heads (8), tied.
    "qwen3": dict(
        cls="Qwen3ForCausalLM", config="Qwen3Config", seed=27,
        hf=dict(vocab_size=80, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=512,
                rms_norm_eps=1e-6, hidden_act="silu", attention_bias=False, tie_word_embeddings=True,
                use_sliding_window=False, rope_parameters=dict(rope_type="default", rope_theta=1000000.0)),
    ),
    # Mistral: multi-query attention (one KV head), sliding_window 32 > seq 16 (so the window
    # masks nothing here), untied head.
    "mistral": dict(
        cls="MistralForCausalLM", config="MistralConfig", seed=15,
        hf=dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=1, head_dim=8, max_position_embeddings=1024,
                rms_norm_eps=1e-5, hidden_act="silu", tie_word_embeddings=False, sliding_window=32,
                rope_parameters=dict(rope_type="default", rope_theta=1000000.0)),
    ),
}

# config.json fields a loader must honour, copied into each reference's metadata (as JSON).
LOADER_FIELDS = ["model_type", "architectures", "vocab_size", "hidden_size", "intermediate_size",
                 "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
                 "rms_norm_eps", "rope_parameters", "rope_theta", "rope_scaling", "hidden_act",
                 "tie_word_embeddings", "attention_bias", "mlp_bias", "sliding_window",
                 "use_sliding_window", "max_position_embeddings"]


# ------------------------------------------------------------------ the f64 reference

def spec_of(cfg):
    """What the reference model needs, from a transformers config object."""
    C, nh = cfg.hidden_size, cfg.num_attention_heads
    rp = dict(cfg.rope_parameters)
    return dict(
        V=cfg.vocab_size, C=C, I=cfg.intermediate_size, L=cfg.num_hidden_layers, nh=nh,
        nkv=cfg.num_key_value_heads, hd=getattr(cfg, "head_dim", None) or C // nh, eps=cfg.rms_norm_eps,
        rope=rp, tied=cfg.tie_word_embeddings,
        qk_norm=cfg.model_type == "qwen3",
        window=getattr(cfg, "sliding_window", None),
    )


def inv_freq_f64(s):
    """Rotary inverse frequencies in float64: theta^(-2i/d), then the llama3 rule if asked."""
    d, rp = s["hd"], s["rope"]
    inv = 1.0 / (rp["rope_theta"] ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    kind = rp.get("rope_type", "default")
    if kind == "default":
        return inv
    assert kind == "llama3", kind
    factor, lo, hi = rp["factor"], rp["low_freq_factor"], rp["high_freq_factor"]
    old = rp["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv
    out = torch.empty_like(inv)
    for i in range(inv.numel()):
        w = wavelen[i].item()
        if w < old / hi:  # high frequency: unchanged
            out[i] = inv[i]
        elif w > old / lo:  # low frequency: divided by factor
            out[i] = inv[i] / factor
        else:  # in between: interpolated
            smooth = (old / w - lo) / (hi - lo)
            out[i] = (1 - smooth) * inv[i] / factor + smooth * inv[i]
    return out


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope(x, cos, sin):
    """Hugging Face's rotate-half layout: pairs (i, i + d/2)."""
    h = x.shape[-1] // 2
    rot = torch.cat((-x[..., h:], x[..., :h]), dim=-1)
    return x * cos + rot * sin


def forward(ps, s, ids, targets=None):
    """Logits (B, T, V) and, with targets, the mean cross-entropy ignoring -1."""
    Bn, Tn = ids.shape
    nh, nkv, hd, eps = s["nh"], s["nkv"], s["hd"], s["eps"]
    freqs = torch.arange(Tn, dtype=torch.float64)[:, None] * inv_freq_f64(s)[None]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()  # (T, hd)
    pos = torch.arange(Tn)
    mask = pos[None, :] <= pos[:, None]  # key j visible from query i
    if s["window"] is not None:  # transformers: i - j < sliding_window
        mask = mask & (pos[:, None] - pos[None, :] < s["window"])
    x = ps["model.embed_tokens.weight"][ids]
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    for i in range(s["L"]):
        p = lambda n: ps[f"model.layers.{i}.{n}"]  # noqa: E731
        b = lambda n: ps.get(f"model.layers.{i}.{n}")  # noqa: E731
        h = rms_norm(x, p("input_layernorm.weight"), eps)
        q = F.linear(h, p("self_attn.q_proj.weight"), b("self_attn.q_proj.bias")).view(Bn, Tn, nh, hd)
        k = F.linear(h, p("self_attn.k_proj.weight"), b("self_attn.k_proj.bias")).view(Bn, Tn, nkv, hd)
        v = F.linear(h, p("self_attn.v_proj.weight"), b("self_attn.v_proj.bias")).view(Bn, Tn, nkv, hd)
        if s["qk_norm"]:
            q = rms_norm(q, p("self_attn.q_norm.weight"), eps)
            k = rms_norm(k, p("self_attn.k_norm.weight"), eps)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        # query head j reads KV head j // (nh / nkv)
        k = k.repeat_interleave(nh // nkv, dim=1)
        v = v.repeat_interleave(nh // nkv, dim=1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(Bn, Tn, nh * hd)
        x = x + F.linear(y, p("self_attn.o_proj.weight"))
        h = rms_norm(x, p("post_attention_layernorm.weight"), eps)
        g = F.silu(F.linear(h, p("mlp.gate_proj.weight"))) * F.linear(h, p("mlp.up_proj.weight"))
        x = x + F.linear(g, p("mlp.down_proj.weight"))
    x = rms_norm(x, ps["model.norm.weight"], eps)
    head = ps["model.embed_tokens.weight"] if s["tied"] else ps["lm_head.weight"]
    logits = x @ head.t()
    loss = None
    if targets is not None:
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-1)
    return logits, loss


def make_params(shapes, gen):
    """Non-trivial deterministic weights (larger than the usual 0.02 init, so that attention is
    not uniform and SiLU not linear), rounded to f32, held in f64."""
    ps = {}
    for name, shape in shapes:
        r = torch.randn(shape, generator=gen, dtype=torch.float64)
        if name.endswith("norm.weight"):
            v = 1.0 + 0.2 * r
        elif name.endswith(".bias"):
            v = 0.1 * r
        elif "embed_tokens" in name:
            v = 0.3 * r
        else:  # linear layers, lm_head: std 0.8 / sqrt(fan_in)
            v = r * (0.8 / math.sqrt(shape[1]))
        ps[name] = v.to(torch.float32).to(torch.float64).requires_grad_(True)
    return ps


# The GPT-2 golden test's f32 tolerances (tests/test_golden_gpt2.c).
TOL_F32 = dict(logit_rtol=1e-4, logit_atol=1e-5, loss_atol=1e-5, grad_rtol=1e-4, grad_atol_scale=2e-5,
               param_atol=2e-5)


def adamw(ps):
    decay = [p for p in ps.values() if p.dim() >= 2]
    no_decay = [p for p in ps.values() if p.dim() < 2]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": ADAMW["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}],
        lr=ADAMW["lr"], betas=ADAMW["betas"], eps=ADAMW["eps"], foreach=False)


def f32_trial(init, s, ids, targets, out):
    """The same model, loss and AdamW steps in float32 (PyTorch's), against the fixture at the
    GPT-2 golden test's f32 tolerances: the largest error / tolerance of each kind. Far below 1
    means the fixture is well conditioned for an f32 implementation (no gradient element so
    near zero that f32 rounding flips Adam's step)."""
    ps = {n: p.to(torch.float32).requires_grad_(True) for n, p in init.items()}
    t = TOL_F32

    def ratio(a, r, rtol, atol):
        return ((a.double() - r.double()).abs() / (atol + rtol * r.double().abs())).max().item()

    res = {}
    with torch.no_grad():
        logits, _ = forward(ps, s, ids)
    res["logits"] = ratio(logits, out["logits"], t["logit_rtol"], t["logit_atol"])
    opt = adamw(ps)
    for step in range(2):
        opt.zero_grad(set_to_none=True)
        _, loss = forward(ps, s, ids, targets)
        loss.backward()
        if step == 0:
            res["loss"] = abs(loss.item() - out["loss"].item()) / t["loss_atol"]
            res["grads"] = max(ratio(p.grad, out["grad." + n], t["grad_rtol"],
                                     t["grad_atol_scale"] * out["grad." + n].abs().max().item())
                               for n, p in ps.items())
        opt.step()
    res["after2"] = max(ratio(p.detach(), out["after2." + n], 0, t["param_atol"]) for n, p in ps.items())
    return res


# ------------------------------------------------------------------ files

def config_v4(cfg_json):
    """The same config in the layout transformers 4.x writes and most Hub folders carry:
    rope_theta at the top, rope_scaling (null for plain rope) instead of rope_parameters,
    torch_dtype instead of dtype."""
    c = dict(cfg_json)
    rp = dict(c.pop("rope_parameters"))
    c["rope_theta"] = rp.pop("rope_theta")
    c["rope_scaling"] = rp if rp.get("rope_type", "default") != "default" else None
    if "dtype" in c:
        c["torch_dtype"] = c.pop("dtype")
    return c


# ------------------------------------------------------------------ one case

def run_case(name, case, seed, out_root, check=True):
    import transformers
    from safetensors.torch import load_file

    torch.manual_seed(0)  # transformers' own init (overwritten below) is then deterministic too
    cfg = getattr(transformers, case["config"])(**case["hf"])
    cfg._attn_implementation = "eager"
    torch.set_default_dtype(torch.float32)  # a float32 model, as a checkpoint would be
    model = getattr(transformers, case["cls"])(cfg).eval()
    torch.set_default_dtype(torch.float64)
    s = spec_of(cfg)
    # Parameter names and shapes come from the transformers model (a tied head appears once,
    # as model.embed_tokens.weight); the maths is the reference's own.
    shapes = [(n, tuple(p.shape)) for n, p in model.named_parameters()]
    assert ("lm_head.weight" in dict(shapes)) == (not s["tied"]), (name, [n for n, _ in shapes][-3:])

    gen = torch.Generator().manual_seed(seed)
    ps = make_params(shapes, gen)
    init = {n: p.detach().clone() for n, p in ps.items()}
    # Targets are the next token of a longer random sequence, as in training.
    seq = torch.randint(0, s["V"], (B, T + 1), generator=gen)
    ids = seq[:, :T].contiguous()
    targets = seq[:, 1:].contiguous().clone()
    targets[IGNORED] = -1

    # The Hugging Face folder, with exactly these F32 weights.
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(ps[n].detach().to(torch.float32))
    folder = os.path.join(out_root, name, "model")
    if os.path.isdir(folder):
        shutil.rmtree(folder)
    model.save_pretrained(folder)
    saved = load_file(os.path.join(folder, "model.safetensors"))
    assert set(saved) == set(ps), (name, set(saved) ^ set(ps))
    for n, t in saved.items():
        assert t.dtype == torch.float32 and torch.equal(t, ps[n].detach().to(torch.float32)), n
    with open(os.path.join(folder, "config.json")) as f:
        cfg_json = json.load(f)
    v4 = config_v4(cfg_json)
    with open(os.path.join(out_root, name, "config_v4.json"), "w") as f:
        json.dump(v4, f, indent=2, sort_keys=True)
        f.write("\n")

    out = {"input_ids": ids.to(torch.int32), "targets": targets.to(torch.int32)}
    with torch.no_grad():
        logits, _ = forward(ps, s, ids)
    out["logits"] = logits.to(torch.float32)

    opt = adamw(ps)
    used = torch.zeros(s["V"], dtype=torch.bool)
    used[ids.reshape(-1)] = True
    losses, min_rel_grad, grads = [], [], {}
    for step in range(2):
        opt.zero_grad(set_to_none=True)
        _, loss = forward(ps, s, ids, targets)
        loss.backward()
        losses.append(loss.detach().clone())
        if step == 0:
            for n, p in ps.items():
                grads[n] = p.grad.detach().clone()
                out["grad." + n] = p.grad.detach().to(torch.float32)
        # Adam's first steps divide g by ~|g|: an element whose grad is tiny next to its
        # tensor's largest would turn f32 rounding into a visible update difference.
        for n, p in ps.items():
            g = p.grad.detach().abs()
            if n == "model.embed_tokens.weight" and not s["tied"]:
                assert g[~used].max().item() == 0.0  # tokens not in the batch: exactly zero
                g = g[used]
            min_rel_grad.append((g.min().item() / g.max().item(), step, n))
        opt.step()
    out["loss"] = losses[0]
    out["loss_step2"] = losses[1]
    for n, p in ps.items():
        out["after2." + n] = p.detach().to(torch.float32)
    out["rope_inv_freq"] = inv_freq_f64(s)

    fields = {k: cfg_json[k] for k in LOADER_FIELDS if k in cfg_json}
    meta = dict(case=name, model_type=cfg_json["model_type"], architecture=case["cls"],
                config=json.dumps(fields, sort_keys=True), vocab_size=s["V"], hidden_size=s["C"],
                intermediate_size=s["I"], num_hidden_layers=s["L"], num_attention_heads=s["nh"],
                num_key_value_heads=s["nkv"], head_dim=s["hd"], rms_norm_eps=repr(s["eps"]),
                rope_theta=repr(s["rope"]["rope_theta"]), rope_type=s["rope"].get("rope_type", "default"),
                rope_scaling=json.dumps({k: v for k, v in s["rope"].items() if k not in ("rope_theta",)}
                                        if s["rope"].get("rope_type", "default") != "default" else None),
                **{"rope_" + k: v for k, v in s["rope"].items() if k not in ("rope_theta", "rope_type")},
                tie_word_embeddings=int(s["tied"]),
                attention_bias=int(any(n.endswith("q_proj.bias") for n in ps)),
                qk_norm=int(s["qk_norm"]),
                sliding_window=s["window"] if s["window"] is not None else 0,
                batch=B, seq=T, seed=seed, ignore_index=-1,
                lr=ADAMW["lr"], beta1=ADAMW["betas"][0], beta2=ADAMW["betas"][1], eps=ADAMW["eps"],
                weight_decay=ADAMW["weight_decay"], decay="tensors with >= 2 dims",
                torch_version=torch.__version__, transformers_version=transformers.__version__)
    ref_path = os.path.join(out_root, name, "reference.safetensors")
    write_safetensors(ref_path, out, meta)

    if check:
        check_hf(name, case, folder, s, out, grads, init)
    trial = f32_trial(init, s, ids, targets, out)
    worst = min(min_rel_grad)
    n_params = sum(p.numel() for p in ps.values())
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(os.path.join(out_root, name)) for f in fs)
    print(f"{name}: {n_params} parameters, {size} bytes; loss {losses[0].item():.12f} loss_step2 "
          f"{losses[1].item():.12f} (ln V = {math.log(s['V']):.4f}); logits std {logits.std().item():.4f}; "
          f"smallest |grad| / max |grad| within a tensor {worst[0]:.2e} (step {worst[1] + 1}, {worst[2]})")
    print("  PyTorch float32 against it, error / the GPT-2 golden test's f32 tolerance: "
          + ", ".join(f"{k} {v:.2g}" for k, v in trial.items()))
    return trial


def check_hf(name, case, folder, s, out, grads, init):
    """transformers on the saved folder: no missing or unexpected keys, the same weights, and the
    same logits, loss and grads to within its own float32 internals (RMSNorm, softmax and the
    rotary cos/sin run in float32 there even for a float64 model)."""
    import transformers
    m, info = transformers.AutoModelForCausalLM.from_pretrained(
        folder, dtype=torch.float64, attn_implementation="eager", output_loading_info=True)
    assert type(m).__name__ == case["cls"], type(m).__name__
    bad = {k: v for k, v in info.items() if v}
    assert not bad, (name, bad)
    m.eval()
    hp = dict(m.named_parameters())
    assert set(hp) == set(init), (name, set(hp) ^ set(init))
    for n, p in hp.items():
        assert torch.equal(p.detach(), init[n]), n
    # HF's own inverse frequencies (computed in f32) against the reference's.
    hf_inv = m.model.rotary_emb.inv_freq.double()
    d_inv = ((hf_inv - out["rope_inv_freq"]).abs() / out["rope_inv_freq"]).max().item()
    logits = m(out["input_ids"].long()).logits
    loss = F.cross_entropy(logits.reshape(-1, s["V"]), out["targets"].reshape(-1).long(), ignore_index=-1)
    loss.backward()
    ref_logits = out["logits"].double()
    dl = (logits - ref_logits).abs().max().item() / ref_logits.abs().max().item()
    dloss = abs(loss.item() - out["loss"].item())
    dg = max((p.grad - grads[n]).abs().max().item() / grads[n].abs().max().item() for n, p in hp.items())
    # config_v4.json beside model.safetensors: transformers reads the same model from it.
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(os.path.join(folder, "model.safetensors"), tmp)
        shutil.copy(os.path.join(os.path.dirname(folder), "config_v4.json"), os.path.join(tmp, "config.json"))
        m4, info4 = transformers.AutoModelForCausalLM.from_pretrained(
            tmp, dtype=torch.float64, attn_implementation="eager", output_loading_info=True)
        assert not {k: v for k, v in info4.items() if v}, (name, info4)
        assert type(m4).__name__ == case["cls"], type(m4).__name__
        with torch.no_grad():
            assert torch.equal(m4(out["input_ids"].long()).logits, logits.detach()), (name, "config_v4.json")
    print(f"  transformers {case['cls']} on {os.path.relpath(folder)} (and with config_v4.json): "
          f"no missing/unexpected keys; rel diff: "
          f"inv_freq {d_inv:.1e}, logits {dl:.1e}, loss {dloss:.1e}, grads {dg:.1e}")
    assert d_inv < 1e-6 and dl < 1e-5 and dloss < 1e-6 and dg < 1e-4, (name, d_inv, dl, dloss, dg)


def main():
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--case", action="append", choices=sorted(CASES), help="only this case (repeatable)")
    ap.add_argument("--seed", type=int, help="weights and tokens (default: each case's own)")
    ap.add_argument("--out", default=ROOT, help="output folder (default: the committed fixtures)")
    ap.add_argument("--no-check", action="store_true", help="skip the check against transformers")
    args = ap.parse_args()
    torch.set_default_dtype(torch.float64)
    for name in args.case or list(CASES):
        run_case(name, CASES[name], args.seed if args.seed is not None else CASES[name]["seed"], args.out,
                 check=not args.no_check)
    return 0


if __name__ == "__main__":
    sys.exit(main())
