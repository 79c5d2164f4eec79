#!/usr/bin/env python3
"""Writes the Hugging Face tokenizer.json fixtures that tests/test_hf_tokenizer.c checks
zerotrain against (run by developers, not by CI; needs `pip install tokenizers`, in a
virtual environment of your own).

Nothing is downloaded: the script TRAINS two small BPE models itself, with the `tokenizers`
package, on the licence texts of /usr/share/common-licenses (or the files given with --text),
and saves each in the configurations that real models ship, one folder per configuration
under tests/fixtures/hf/, each holding tokenizer.json and tokenizer_config.json:

  byte-level BPE (one trained model, ~500 tokens, all 256 byte tokens):
    gpt2     ByteLevel pre-tokenizer with GPT-2's regex; bos = eos = <|endoftext|>, none added
    llama3   Split with Llama 3's regex (\\p{N}{1,3}) + ByteLevel without regex, ignore_merges,
             <|begin_of_text|> added by a TemplateProcessing post-processor
    qwen2    Split with Qwen2's regex (\\p{N}) + ByteLevel, the NFC normalizer, no bos
    smollm   Digits(individual_digits) + ByteLevel with GPT-2's regex (SmolLM)
  BPE with byte fallback (one trained model, <unk> <s> </s>, then <0x00>..<0xFF>):
    llama2   the Prepend("▁") + Replace(" ", "▁") normalizer, no pre-tokenizer (Llama 2 as
             saved by transformers' legacy converter), add_bos_token in tokenizer_config.json
    mistral  the Metaspace pre-tokenizer (prepend_scheme "first", split false), no normalizer
    llama2_added  llama2 with two added tokens that are not special: "▁software" (normalized),
             "GNU" (not normalized, lstrip, rstrip)
  both with the decoder Replace("▁", " "), ByteFallback, Fuse, Strip(" ", 1, 0)

With --nfc-tables it prints src/data/unicode_nfc_tables.h (the NFC normalizer's Unicode data)
instead. With --check-zt build/zt it writes nothing: it compares `zt tokenize --tokenizer` on random
documents made of tricky fragments against `tokenizers`, for every configuration above.

It writes cases.json: the test strings (unicode of many scripts, digits, contractions, whitespace
runs, newlines, emoji, special tokens inside text) with, for each configuration, the ids that
`tokenizers` gives (encode(s, add_special_tokens=False)), the text its decode gives back for
those ids, and for each the ids of encode(s) with the post-processor's special tokens.
"""
import argparse
import glob
import json
import os

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "tests", "fixtures", "hf")

GPT2_PAT = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3_PAT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
              r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PAT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
             r"|\s*[\r\n]+|\s+(?!\S)|\s+")

STRINGS = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "It's a truth; we've seen it, they'll see it, I'm sure you'd agree. Don't!",
    "DON'T SHOUT, Y'ALL'RE 'S 'T 'Re 'VE 'M 'LL 'D 'ſ rock'n'roll''''s",
    "Numbers: 0 1 12 123 1234 12345 1234567 3.14159 1,000,000 -42 +7 2024-06-01 x86_64",
    "Other digits: \u0663\u0664\u0665\u0666 \u0967\u0968 \u00b2\u00b3 \u00be \u2167 \u2460 \uff11\uff12",
    "ab  \u00b2\n\n\u0661\u0662 \u2167x  \u00bd",
    "two  spaces,   three,\ttab,\t\ttwo tabs, trailing   ",
    "   leading spaces",
    " one leading space",
    "a\nb\n\nc\n\n\nd",
    "CRLF\r\nline\r\n\r\nend\r",
    "mixed \n \t \n  blank lines\n  \n",
    "\n\nstarts with newlines",
    "ends with newline\n",
    "No-break\u00a0space\u00a0\u00a0twice, ideographic\u3000space, line\u2028sep, thin\u2009space",
    "caf\u00e9 na\u00efve \u00fcber Stra\u00dfe fa\u00e7ade \u01c5 \u02b0",
    "not NFC: cafe\u0301 A\u030a \u212b \u2126 a\u0323\u0307 a\u0307\u0323 \u1e9b\u0323 \u0958 "
    "\u1100\u1161\u11a8 \uac00\u11a8 \u0301start e\u0301\u0301 \u00e9\u0300",
    "\u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac \u0440\u0443\u0441\u0441\u043a\u0438\u0439 "
    "\u05e2\u05d1\u05e8\u05d9\u05ea \u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u0939\u093f\u0928\u094d\u0926\u0940",
    "\u65e5\u672c\u8a9e\u306e\u6587\u7ae0\u3002\u4e2d\u6587\uff0c\ud55c\uad6d\uc5b4 \u30ab\u30bf\u30ab\u30ca",
    "Emoji: \U0001f600 \U0001f44d\U0001f3fd \U0001f468\u200d\U0001f469\u200d\U0001f467 \u2764\ufe0f "
    "\U0001f1eb\U0001f1f7 \U0001f680\U0001f680!",
    "Punctuation!!! ??? ... --- *** ((nested)) [x] {y} <tags/> #h @a $5 %50 ^_^ `t`\n\"quoted\"",
    "Control a\x01b c\x1fd e\x7ff \x0b vt",
    "special <|endoftext|> in <|endoftext|><|endoftext|> text <s> and </s> too",
    "free software, the GNU  GPL;GNU\tsoftware and  software",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "                                ",
    " ",
    "\n",
    "x",
    "",
]


def licence_text(paths):
    text = []
    for p in paths:
        if os.path.isfile(p):
            with open(p, encoding="utf-8", errors="replace") as f:
                text.append(f.read())
    if not text:
        raise SystemExit("no training text found: pass --text FILE...")
    return text


def train_byte_level(texts):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    trainer = trainers.BpeTrainer(vocab_size=520, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<|endoftext|>"])
    tok.train_from_iterator(texts, trainer)
    state = json.loads(tok.to_str())
    return state["model"]["vocab"], state["model"]["merges"]


def train_byte_fallback(texts):
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    trainer = trainers.BpeTrainer(vocab_size=700, min_frequency=2, show_progress=False, limit_alphabet=70,
                                  special_tokens=["<unk>", "<s>", "</s>"])
    tok.train_from_iterator(texts, trainer)
    state = json.loads(tok.to_str())
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab["<0x%02X>" % b] = len(vocab)
    for t, _ in sorted(state["model"]["vocab"].items(), key=lambda kv: kv[1]):
        if t not in vocab:
            vocab[t] = len(vocab)
    return vocab, state["model"]["merges"]


def merges_pairs(merges):
    return [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in merges]


def bytelevel_configs(vocab, merges):
    def model(ignore_merges=False):
        return models.BPE(vocab=dict(vocab), merges=merges_pairs(merges), ignore_merges=ignore_merges)

    out = {}
    t = Tokenizer(model())
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    t.post_processor = processors.ByteLevel(trim_offsets=False)
    t.decoder = decoders.ByteLevel()
    out["gpt2"] = (t, {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>",
                       "model_max_length": 1024, "tokenizer_class": "GPT2Tokenizer"})

    t = Tokenizer(model(ignore_merges=True))
    t.add_special_tokens(["<|begin_of_text|>", "<|end_of_text|>"])
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PAT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    t.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                                      special_tokens=[("<|begin_of_text|>", t.token_to_id("<|begin_of_text|>"))])])
    t.decoder = decoders.ByteLevel()
    out["llama3"] = (t, {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>",
                         "model_max_length": 131072, "tokenizer_class": "PreTrainedTokenizerFast"})

    t = Tokenizer(model())
    t.add_special_tokens(["<|im_start|>", "<|im_end|>"])
    t.normalizer = normalizers.NFC()
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PAT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    t.post_processor = processors.ByteLevel(trim_offsets=False)
    t.decoder = decoders.ByteLevel()
    out["qwen2"] = (t, {"bos_token": None, "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
                        "errors": "replace", "model_max_length": 32768, "tokenizer_class": "Qwen2Tokenizer"})

    t = Tokenizer(model())
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)])
    t.post_processor = processors.ByteLevel(trim_offsets=False)
    t.decoder = decoders.ByteLevel()
    out["smollm"] = (t, {"bos_token": {"__type": "AddedToken", "content": "<|endoftext|>", "lstrip": False,
                                       "normalized": False, "rstrip": False, "single_word": False},
                         "eos_token": "<|endoftext|>", "model_max_length": 2048,
                         "tokenizer_class": "GPT2Tokenizer"})
    # the vocabulary's <|endoftext|> is a special token (an added token) in every configuration
    for t, _ in out.values():
        t.add_special_tokens(["<|endoftext|>"])
    return out


def byte_fallback_configs(vocab, merges):
    def model():
        return models.BPE(vocab=dict(vocab), merges=merges_pairs(merges), unk_token="<unk>", byte_fallback=True,
                          fuse_unk=True)

    sp_decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                    decoders.Strip(content=" ", left=1, right=0)])
    out = {}
    t = Tokenizer(model())
    t.add_special_tokens(["<unk>", "<s>", "</s>"])
    t.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    t.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B:1",
                                                     special_tokens=[("<s>", 1)])
    t.decoder = sp_decoder
    out["llama2"] = (t, {"add_bos_token": True, "add_eos_token": False, "bos_token": {
        "__type": "AddedToken", "content": "<s>", "lstrip": False, "normalized": False, "rstrip": False,
        "single_word": False}, "eos_token": "</s>", "unk_token": "<unk>", "legacy": True,
        "model_max_length": 4096, "tokenizer_class": "LlamaTokenizer"})

    t = Tokenizer(model())
    t.add_special_tokens(["<unk>", "<s>", "</s>"])
    t.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=False)
    t.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B:1",
                                                     special_tokens=[("<s>", 1)])
    t.decoder = sp_decoder
    out["mistral"] = (t, {"add_bos_token": True, "add_eos_token": False, "bos_token": "<s>", "eos_token": "</s>",
                          "unk_token": "<unk>", "legacy": False, "model_max_length": 32768,
                          "tokenizer_class": "LlamaTokenizer"})

    # Llama 2's with added tokens that are not special: one matched in the normalized text (by
    # its normalized content, "▁▁software"), one in the text as given with lstrip and rstrip
    t = Tokenizer(model())
    t.add_special_tokens(["<unk>", "<s>", "</s>"])
    t.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    t.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B:1",
                                                     special_tokens=[("<s>", 1)])
    t.decoder = sp_decoder
    t.add_tokens([AddedToken("\u2581software", normalized=True), AddedToken("GNU", normalized=False, lstrip=True,
                                                                            rstrip=True)])
    out["llama2_added"] = (t, dict(out["llama2"][1]))
    return out


FRAGMENTS = ["the", "The", " quick", "fox", "DOG", "'s", "'S", "'ll", "'LL", "'re", "'ve", "'m", "'d", "'t", "'x", "'",
             " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "\r", " \n", "\n ", "0", "1", "12", "123", "4567", "3.14", ",",
             ".", "!", "?!", "--", "...", "(", ")", "\"", "#", "@", "$", "%", "\u00e9", "na\u00efve", "\u00df", "\u03a9",
             "\u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac", "\u65e5\u672c\u8a9e", "\ud55c\uad6d\uc5b4",
             "\u0661\u0662\u0663", "\u00b2", "\u00bd", "\u2167", "\u2460", "\u00a0", "\u3000", "\u2028", "\u2009",
             "\u0085", "\U0001f600", "\U0001f44d\U0001f3fd", "\U0001f468\u200d\U0001f469\u200d\U0001f467",
             "\u2764\ufe0f", "\U0001f1eb\U0001f1f7", "<|endoftext|>", "<s>", "</s>", "<|begin_of_text|>", "<|im_end|>",
             "\u2581", "\u2581\u2581", "\u017f", "'\u017f", "_", "x86_64", "\x01", "\x7f", "aaaa", " License", " GNU",
             " software", " the", " of", " and", "-", "/", "\u0301", "\u0323", "\u0307", "\u0345", "e\u0301", "A\u030a",
             "\u212b", "\u2126", "\u0958", "\u0344", "\u0f73", "\u0b47\u0b3e", "\u1100", "\u1161", "\u11a8",
             "\uac00", "\u1e9b", "\u0390", "\u3099", "\u304b"]


def check_zt(zt, out, n_docs, seed):
    """Random documents through `zt tokenize DIR OUT --tokenizer` against the reference, for
    every configuration: each document is the reference's encode(s) (with its bos) and then eos."""
    import random
    import shutil
    import struct
    import subprocess
    import tempfile
    rng = random.Random(seed)
    failed = 0
    tmp = tempfile.mkdtemp()
    for name in sorted(os.listdir(out)):
        d = os.path.join(out, name)
        if not os.path.isfile(os.path.join(d, "tokenizer.json")):
            continue
        tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        with open(os.path.join(d, "tokenizer_config.json"), encoding="utf-8") as f:
            eos = json.load(f)["eos_token"]
        eos = tok.token_to_id(eos if isinstance(eos, str) else eos["content"])
        docs_dir = os.path.join(tmp, name)
        os.makedirs(docs_dir)
        want = []
        docs = []
        for i in range(n_docs):
            s = "".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(0, 30)))
            docs.append(s)
            with open(os.path.join(docs_dir, "%06d.txt" % i), "w", encoding="utf-8", newline="") as f:
                f.write(s)
            want.append(tok.encode(s, add_special_tokens=True).ids + [eos])
        tok_file = os.path.join(tmp, name + ".tok")
        subprocess.run([zt, "tokenize", docs_dir, tok_file, "--tokenizer", d], check=True, capture_output=True)
        with open(tok_file, "rb") as f:
            raw = f.read()
        _, _, width, _, count = struct.unpack("<4sIIIQ", raw[:24])
        got = list(struct.unpack("<%d%s" % (count, "H" if width == 2 else "I"), raw[24:]))
        pos = 0
        for s, w in zip(docs, want):
            if got[pos:pos + len(w)] != w:
                print("%-8s differs on %r:\n  reference %s\n  zerotrain %s" % (name, s, w, got[pos:pos + len(w)]))
                failed += 1
                break
            pos += len(w)
        else:
            print("%-8s %d documents, %d tokens: identical" % (name, n_docs, count))
    shutil.rmtree(tmp)
    return failed


def nfc_tables():
    """The C tables of src/data/unicode_nfc_tables.h (canonical combining classes, canonical
    decompositions, primary composites) from Python's unicodedata."""
    import unicodedata as u
    out = ["/* Generated by scripts/gen_hf_tokenizer_fixture.py --nfc-tables from Python's unicodedata",
           " * (Unicode %s): the data of the NFC normalizer (src/data/unicode_nfc.c). Do not edit. */" % u.unidata_version,
           "#ifndef ZT_DATA_UNICODE_NFC_TABLES_H", "#define ZT_DATA_UNICODE_NFC_TABLES_H", "", "#include <stdint.h>", ""]

    def table(name, comment, rows):
        out.append("/* %s: %d entries */" % (comment, len(rows)))
        out.append("static const uint32_t %s[][3] = {" % name)
        for i in range(0, len(rows), 5):
            out.append("    " + " ".join("{0x%X,0x%X,0x%X}," % r for r in rows[i:i + 5]))
        out.append("};")
        out.append("")

    ccc = []
    for c in range(0x110000):
        k = u.combining(chr(c))
        if not k:
            continue
        if ccc and ccc[-1][1] == c - 1 and ccc[-1][2] == k:
            ccc[-1][1] = c
        else:
            ccc.append([c, c, k])
    dec, comp = [], []
    for c in range(0x110000):
        d = u.decomposition(chr(c))
        if not d or d.startswith("<"):
            continue
        parts = [int(x, 16) for x in d.split()]
        dec.append((c, parts[0], parts[1] if len(parts) > 1 else 0))
        if len(parts) == 2 and u.normalize("NFC", chr(c)) == chr(c):
            comp.append((parts[0], parts[1], c))
    comp.sort()
    assert all(c >= 0x300 or (u.normalize("NFC", chr(c)) == chr(c) and not u.combining(chr(c))) for c in range(0x300))
    table("nfc_ccc", "canonical combining class (first, last, class) of the code points whose class is not 0",
          [tuple(r) for r in ccc])
    table("nfc_decomp", "canonical decomposition, one level (code point, first, second or 0), by code point", dec)
    table("nfc_comp", "primary composites (first, second, composite), by pair", comp)
    out.append("#endif")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--text", nargs="*", default=sorted(glob.glob("/usr/share/common-licenses/*")),
                    help="training text files (default: /usr/share/common-licenses/*)")
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--check-zt", metavar="ZT",
                    help="instead of writing the fixtures: compare `ZT tokenize --tokenizer` on random documents "
                         "against the reference for every folder under --out")
    ap.add_argument("--docs", type=int, default=400, help="documents per configuration for --check-zt")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--nfc-tables", action="store_true",
                    help="instead of writing the fixtures: print src/data/unicode_nfc_tables.h")
    a = ap.parse_args()
    if a.nfc_tables:
        print(nfc_tables(), end="")
        return
    if a.check_zt:
        raise SystemExit(1 if check_zt(a.check_zt, a.out, a.docs, a.seed) else 0)
    texts = licence_text(a.text)
    configs = {}
    configs.update(bytelevel_configs(*train_byte_level(texts)))
    configs.update(byte_fallback_configs(*train_byte_fallback(texts)))
    cases = {"strings": STRINGS, "tokenizers": {}}
    for name, (tok, config) in configs.items():
        d = os.path.join(a.out, name)
        os.makedirs(d, exist_ok=True)
        tok.save(os.path.join(d, "tokenizer.json"), pretty=False)
        with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(config, f, indent=1, ensure_ascii=False)
            f.write("\n")
        # read back as a user's folder is read
        tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        ids, decoded, with_special = [], [], []
        for s in STRINGS:
            e = tok.encode(s, add_special_tokens=False).ids
            ids.append(e)
            decoded.append(tok.decode(e, skip_special_tokens=False))
            with_special.append(tok.encode(s, add_special_tokens=True).ids)
        cases["tokenizers"][name] = {"vocab_size": tok.get_vocab_size(with_added_tokens=True), "ids": ids,
                                     "decoded": decoded, "with_special": with_special}
        n_rt = sum(d_ == s for d_, s in zip(decoded, STRINGS))
        print("%-8s vocab %4d, %d/%d strings decode back to themselves" % (name, tok.get_vocab_size(), n_rt,
                                                                          len(STRINGS)))
    with open(os.path.join(a.out, "cases.json"), "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=True)
        f.write("\n")


if __name__ == "__main__":
    main()
