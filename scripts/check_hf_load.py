#!/usr/bin/env python3
"""Load a zerotrain checkpoint folder with Hugging Face transformers and print logits.

A developer check (not run by CI) that `zt train --save DIR` writes what transformers
expects, for every family: DIR/model.safetensors (the Hugging Face tensor names of
GPT2LMHeadModel, LlamaForCausalLM, Qwen2/Qwen3ForCausalLM, MistralForCausalLM; metadata
format=pt) and DIR/config.json (their config), loaded with AutoModelForCausalLM: no missing
or unexpected keys, a tied output layer where config.json says so. Needs PyTorch and transformers from PyPI:

    python3 -m venv /tmp/hfvenv && /tmp/hfvenv/bin/pip install torch transformers
    /tmp/hfvenv/bin/python scripts/check_hf_load.py DIR [--tokens 1,5,9] [--expect FILE]

--expect FILE compares with logits computed by zerotrain, a JSON object
{"tokens": [...], "logits": [[V floats] per token]} (`zt sample --checkpoint DIR --prompt TEXT
--logits FILE` writes it), and exits 1 if the largest difference exceeds --tol (default 1e-4;
both sides compute in float32).
"""
import argparse
import json
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir", help="checkpoint folder written by zerotrain (or zt_lm_save_hf)")
    ap.add_argument("--tokens", default="", help="comma-separated token ids (default: from --expect, else 0,1,2,3)")
    ap.add_argument("--expect", help="JSON file with zerotrain's logits for the same tokens")
    ap.add_argument("--tol", type=float, default=1e-4, help="max |difference| allowed with --expect")
    ap.add_argument("--show", type=int, default=5, help="logits shown per position")
    args = ap.parse_args()

    import torch
    from transformers import AutoModelForCausalLM

    # output_loading_info lists tensors the file lacked or had in excess: a correct
    # checkpoint has none except a tied lm_head.weight (and GPT-2's mask buffers on old versions).
    model, info = AutoModelForCausalLM.from_pretrained(args.dir, output_loading_info=True,
                                                       dtype=torch.float32)
    model.eval()
    cfg = model.config
    print(f"loaded {args.dir}: {type(model).__name__} ({cfg.model_type}) layers={cfg.num_hidden_layers} "
          f"hidden={cfg.hidden_size} vocab={cfg.vocab_size} params={sum(p.numel() for p in model.parameters())}")
    want_tied = bool(getattr(cfg, "tie_word_embeddings", True))
    bad = False
    for kind in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        items = [k for k in info.get(kind, [])
                 if not (want_tied and str(k).endswith("lm_head.weight"))
                 and not str(k).endswith(("attn.bias", "attn.masked_bias"))]
        if items:
            print(f"{kind}: {items}")
            bad = True
    tied = model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    print(f"output layer tied to the embedding: {tied} (config.json: {want_tied})")
    bad = bad or tied != want_tied

    expect = None
    if args.expect:
        with open(args.expect) as f:
            expect = json.load(f)
    if args.tokens:
        tokens = [int(t) for t in args.tokens.split(",")]
    elif expect:
        tokens = expect["tokens"]
    else:
        tokens = [0, 1, 2, 3]
    with torch.no_grad():
        logits = model(torch.tensor([tokens])).logits[0]
    for t, row in zip(tokens, logits):
        vals = ", ".join(f"{v:+.6f}" for v in row[: args.show].tolist())
        print(f"token {t:6d}: logits[:{args.show}] = [{vals}]  argmax {int(row.argmax())}")
    if expect:
        ref = torch.tensor(expect["logits"], dtype=torch.float32)
        if ref.shape != logits.shape:
            print(f"FAIL: zerotrain logits have shape {tuple(ref.shape)}, transformers {tuple(logits.shape)}")
            return 1
        diff = (ref - logits).abs().max().item()
        ok = diff <= args.tol
        print(f"max |zerotrain - transformers| = {diff:.3g} (tol {args.tol:g}): {'OK' if ok else 'FAIL'}")
        bad = bad or not ok
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
