#!/usr/bin/env python3
"""Writes tests/fixtures/gpt2/fixture.safetensors: the PyTorch reference for tests/test_golden_gpt2.c.

Run by developers (not by CI) when the reference itself must change; the fixture is committed.
Needs only PyTorch from PyPI (CPU is enough; no transformers, no numpy):

    python3 -m venv /tmp/ztvenv && /tmp/ztvenv/bin/pip install torch
    /tmp/ztvenv/bin/python scripts/gen_gpt2_fixture.py          # from the repo root

(--check-hf, after `pip install transformers`, also checks the model below against
transformers' GPT2LMHeadModel on the same weights: equal logits, loss and grads.)

(made with torch 2.15.0 on Python 3.11; re-running it gives a bit-identical file. Another torch
version could draw other random weights from the same seed: the fixture is then different but
just as valid, and the test reads everything it needs from it.)

The model is a minimal GPT-2 written here (same maths as Hugging Face's GPT2LMHeadModel):
pre-LN blocks, Conv1D weights in the (in, out) layout (y = x @ W + b), GELU with the tanh
approximation, causal attention scaled by 1/sqrt(head size), learned positions, output layer
tied to wte (logits = h @ wte^T), mean cross-entropy ignoring targets of -1, no dropout.

Invariants of the fixture:
- weights are drawn in float64, rounded to float32 and the reference runs in float64 from
  those rounded values, so zerotrain (which loads the f32 weights) starts from exactly the
  same point; every stored tensor is F32 (the f64 results rounded), the losses are F64;
- the reference is exact to ~1e-12, so the test's tolerances measure zerotrain's f32 error;
- file < 200 KB (config chosen for that).
"""
import json
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F

CONFIG = dict(n_layer=2, n_head=2, n_embd=16, vocab_size=64, block_size=16)
B, T = 2, 16
SEED = 8  # picked among 1..16: the largest smallest |grad|/max|grad| (Adam is well conditioned)
IGNORED = (1, 5)  # (row, position) whose target is -1 (ignore index)
LN_EPS = 1e-5
ADAMW = dict(lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "gpt2",
                   "fixture.safetensors")


def param_shapes(c):
    """HF GPT2LMHeadModel names and shapes, in zerotrain's order (include/zt/nn.h)."""
    C, V, P = c["n_embd"], c["vocab_size"], c["block_size"]
    out = [("transformer.wte.weight", (V, C)), ("transformer.wpe.weight", (P, C))]
    for i in range(c["n_layer"]):
        h = f"transformer.h.{i}."
        out += [
            (h + "ln_1.weight", (C,)), (h + "ln_1.bias", (C,)),
            (h + "attn.c_attn.weight", (C, 3 * C)), (h + "attn.c_attn.bias", (3 * C,)),
            (h + "attn.c_proj.weight", (C, C)), (h + "attn.c_proj.bias", (C,)),
            (h + "ln_2.weight", (C,)), (h + "ln_2.bias", (C,)),
            (h + "mlp.c_fc.weight", (C, 4 * C)), (h + "mlp.c_fc.bias", (4 * C,)),
            (h + "mlp.c_proj.weight", (4 * C, C)), (h + "mlp.c_proj.bias", (C,)),
        ]
    out += [("transformer.ln_f.weight", (C,)), ("transformer.ln_f.bias", (C,))]
    return out


def make_params(c, gen):
    """Non-trivial deterministic weights (larger than GPT-2's 0.02 init so that attention is
    not uniform and GELU is not linear), rounded to f32, held in f64."""
    ps = {}
    for name, shape in param_shapes(c):
        leaf = name.rsplit(".", 2)[-2] + "." + name.rsplit(".", 1)[-1]
        if name.endswith("wte.weight"):
            v = torch.randn(shape, generator=gen, dtype=torch.float64) * 0.3
        elif name.endswith("wpe.weight"):
            v = torch.randn(shape, generator=gen, dtype=torch.float64) * 0.1
        elif leaf.startswith("ln_") and name.endswith(".weight"):
            v = 1.0 + 0.2 * torch.randn(shape, generator=gen, dtype=torch.float64)
        elif leaf.startswith("ln_"):
            v = 0.1 * torch.randn(shape, generator=gen, dtype=torch.float64)
        elif name.endswith(".weight"):
            v = torch.randn(shape, generator=gen, dtype=torch.float64) * 0.15
        else:  # Conv1D biases
            v = torch.randn(shape, generator=gen, dtype=torch.float64) * 0.05
        ps[name] = v.to(torch.float32).to(torch.float64).requires_grad_(True)
    return ps


def forward(ps, c, ids, targets=None):
    """Returns logits (B, T, V) and, with targets, the mean cross-entropy."""
    Bn, Tn = ids.shape
    C, nh = c["n_embd"], c["n_head"]
    hs = C // nh
    pos = torch.arange(Tn)
    x = ps["transformer.wte.weight"][ids] + ps["transformer.wpe.weight"][pos][None]
    mask = torch.tril(torch.ones(Tn, Tn, dtype=torch.bool))
    for i in range(c["n_layer"]):
        p = lambda n: ps[f"transformer.h.{i}.{n}"]  # noqa: E731
        h = F.layer_norm(x, (C,), p("ln_1.weight"), p("ln_1.bias"), LN_EPS)
        qkv = h @ p("attn.c_attn.weight") + p("attn.c_attn.bias")
        q, k, v = qkv.split(C, dim=2)
        q, k, v = (t.view(Bn, Tn, nh, hs).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(Bn, Tn, C)
        x = x + (y @ p("attn.c_proj.weight") + p("attn.c_proj.bias"))
        h = F.layer_norm(x, (C,), p("ln_2.weight"), p("ln_2.bias"), LN_EPS)
        h = F.gelu(h @ p("mlp.c_fc.weight") + p("mlp.c_fc.bias"), approximate="tanh")
        x = x + (h @ p("mlp.c_proj.weight") + p("mlp.c_proj.bias"))
    x = F.layer_norm(x, (C,), ps["transformer.ln_f.weight"], ps["transformer.ln_f.bias"], LN_EPS)
    logits = x @ ps["transformer.wte.weight"].t()  # tied output layer
    loss = None
    if targets is not None:
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-1)
    return logits, loss


DT = {torch.float32: ("F32", "<f"), torch.float64: ("F64", "<d"), torch.int32: ("I32", "<i")}


def write_safetensors(path, tensors, metadata):
    """The safetensors format: u64 LE header length, JSON header (names, dtypes, shapes, byte
    ranges, __metadata__ of strings), then the raw little-endian data."""
    header = {"__metadata__": {k: str(v) for k, v in metadata.items()}}
    blobs, off = [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous().cpu()
        code, fmt = DT[t.dtype]
        vals = t.reshape(-1).tolist()
        b = struct.pack("<%d%s" % (len(vals), fmt[1]), *vals)
        header[name] = {"dtype": code, "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)  # data starts 8-byte aligned
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def check_hf(c, out):
    """Cross-check of the minimal model above against Hugging Face's GPT2LMHeadModel."""
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(n_layer=c["n_layer"], n_head=c["n_head"], n_embd=c["n_embd"], vocab_size=c["vocab_size"],
                     n_positions=c["block_size"], resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                     activation_function="gelu_new", layer_norm_epsilon=LN_EPS)
    m = GPT2LMHeadModel(cfg).double().eval()
    sd = {k: v.double() for k, v in out.items() if k.startswith("transformer.")}
    missing, unexpected = m.load_state_dict(sd, strict=False)
    assert missing == ["lm_head.weight"] and not unexpected, (missing, unexpected)  # lm_head is tied
    logits = m(out["input_ids"].long()).logits
    loss = F.cross_entropy(logits.reshape(-1, c["vocab_size"]), out["targets"].reshape(-1).long(), ignore_index=-1)
    loss.backward()
    # The fixture holds f32-rounded results: agreement to f32 rounding is exact agreement.
    dl = (logits - out["logits"].double()).abs().max().item() / out["logits"].abs().max().item()
    dg = max((p.grad - out["grad." + n].double()).abs().max().item() / out["grad." + n].abs().max().item()
             for n, p in m.named_parameters())
    print(f"transformers GPT2LMHeadModel: logits rel diff {dl:.1e}, loss diff {abs(loss.item() - out['loss'].item()):.1e}, "
          f"grads rel diff {dg:.1e}")
    assert dl < 1e-6 and abs(loss.item() - out["loss"].item()) < 1e-12 and dg < 1e-6


def main():
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=SEED, help="weights and tokens (default %(default)s)")
    ap.add_argument("--out", default=OUT, help="output file (default: the committed fixture)")
    ap.add_argument("--check-hf", action="store_true",
                    help="also run transformers' GPT2LMHeadModel (pip install transformers) on the same "
                         "weights and check that it gives the same logits, loss and grads")
    args = ap.parse_args()
    torch.set_default_dtype(torch.float64)
    c = CONFIG
    gen = torch.Generator().manual_seed(args.seed)
    ps = make_params(c, gen)
    # Targets are the next token of a longer random sequence, as in training.
    seq = torch.randint(0, c["vocab_size"], (B, T + 1), generator=gen)
    ids = seq[:, :T].contiguous()
    targets = seq[:, 1:].contiguous().clone()
    targets[IGNORED] = -1

    out = {}
    for name, p in ps.items():
        out[name] = p.detach().to(torch.float32)
    out["input_ids"] = ids.to(torch.int32)
    out["targets"] = targets.to(torch.int32)
    with torch.no_grad():
        logits, _ = forward(ps, c, ids)
    out["logits"] = logits.to(torch.float32)

    # nanoGPT's param groups: decay for every tensor with dim >= 2 (Conv1D weights and both
    # embeddings), none for biases and layer-norm parameters.
    decay = [p for p in ps.values() if p.dim() >= 2]
    no_decay = [p for p in ps.values() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": ADAMW["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}],
        lr=ADAMW["lr"], betas=ADAMW["betas"], eps=ADAMW["eps"], foreach=False)

    losses = []
    min_rel_grad = []
    for step in range(2):
        opt.zero_grad(set_to_none=True)
        _, loss = forward(ps, c, ids, targets)
        loss.backward()
        losses.append(loss.detach().clone())
        if step == 0:
            for name, p in ps.items():
                out["grad." + name] = p.grad.detach().to(torch.float32)
        # Adam's first steps divide g by ~|g|: an element whose grad is tiny next to the
        # tensor's typical grad would turn zerotrain's f32 rounding into a visible update
        # difference. Report how far from that the fixture is.
        # The key bias gets no gradient at all (softmax is invariant to adding q.b_k to every
        # score of a row): its grad is rounding noise in both, and the test treats it apart.
        for name, p in ps.items():
            g = p.grad.detach().abs().clone()
            if name.endswith("c_attn.bias"):
                C = c["n_embd"]
                assert g[C:2 * C].max().item() < 1e-12 * g.max().item()
                g = torch.cat([g[:C], g[2 * C:]])
            min_rel_grad.append((g.min().item() / g.max().item(), step, name))
        opt.step()
    out["loss"] = losses[0]
    out["loss_step2"] = losses[1]
    for name, p in ps.items():
        out["after2." + name] = p.detach().to(torch.float32)

    meta = dict(c)
    meta.update(batch=B, seq=T, seed=args.seed, ln_eps=LN_EPS, lr=ADAMW["lr"], beta1=ADAMW["betas"][0],
                beta2=ADAMW["betas"][1], eps=ADAMW["eps"], weight_decay=ADAMW["weight_decay"],
                torch_version=torch.__version__)
    write_safetensors(args.out, out, meta)

    if args.check_hf:
        check_hf(c, out)
    worst = min(min_rel_grad)
    n_params = sum(p.numel() for p in ps.values())
    print(f"wrote {os.path.normpath(args.out)} ({os.path.getsize(args.out)} bytes), {n_params} parameters")
    print(f"loss {losses[0].item():.12f}  loss_step2 {losses[1].item():.12f}  (ln V = {math.log(c['vocab_size']):.4f})")
    print(f"logits std {logits.std().item():.4f}; smallest |grad| / max |grad| within a tensor: {worst[0]:.2e} "
          f"(step {worst[1] + 1}, {worst[2]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
