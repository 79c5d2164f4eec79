#!/usr/bin/env bash
# Checkpoints that open everywhere. A sharded (FSDP, --shard full) checkpoint, saved at 2 ranks
# (1 without mpirun), is read wherever a plain one is: resumed at 1 rank, under DDP and --pp 2
# (mpirun -np 2), --offload-model and --offload-states, each continuing the uninterrupted FSDP run
# (losses within 1e-4 relative: another rank count sums in another order); sampled from and
# started from (--init-from) like its consolidated copy. --init-from takes a transformers folder
# (the model takes its config.json's shape; contradicting flags are errors naming both values)
# and a zerotrain series or version. zt consolidate refuses a folder that holds a checkpoint
# unless --force. The tokenizer: the vocabulary comes from the token file, zt train --encoder
# --merges checks them before step 1 and copies them into every checkpoint (vocab.json,
# merges.txt), the end-of-run sample and zt sample use them, and a non-byte model without one
# is refused before generating.
# Usage: cli_checkpoint_test.sh path/to/zt
set -u
zt=$1
. "$(dirname "$0")/check_lib.sh"
export ZT_STEP_PROGRESS_S=100000 OMP_NUM_THREADS=1
fx="$(cd "$(dirname "$0")" && pwd)/fixtures/bpe"
np=1
if command -v mpirun >/dev/null 2>&1; then
  np=2
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
  export OMPI_MCA_btl_vader_single_copy_mechanism=none
fi
mpi() { local n=$1; shift; timeout 300 mpirun -np "$n" --oversubscribe "$zt" "$@"; }
on_np() { if [ $np -eq 2 ]; then mpi 2 "$@"; else "$zt" "$@"; fi; }
base=(train --batch 4 --seq 32 --steps 6 --eval-every 3 --eval-batches 2 --threads 1 --sample-len 0)
near() { losses_near "$1" "$2" 1e-4 && [ "$(losses "$1" | wc -l)" -eq 6 ]; }

# ---------------------------------------------------------------- sharded checkpoints, every reader
out=$(on_np "${base[@]}" --shard full --metrics "$w/ref.jsonl" 2>&1)
check "the uninterrupted FSDP run ($np ranks)" '[ "$(losses "$w/ref.jsonl" | wc -l)" -eq 6 ]'
out=$(on_np "${base[@]}" --shard full --stop-at 3 --save "$w/sh" --metrics "$w/part.jsonl" 2>&1)
check "stopped at step 3: a sharded checkpoint (an index, no model.safetensors)" \
  '[ -f "$w/sh/latest/index.json" ] && [ ! -e "$w/sh/latest/model.safetensors" ]'
# resume MODE ARGS...: the partial run's metrics continued by `ARGS --resume sh`
resume() {
  local m=$1
  shift
  cp "$w/part.jsonl" "$w/r-$m.jsonl"
  out=$("$@" --resume "$w/sh" --metrics "$w/r-$m.jsonl" 2>&1)
}
resume plain "$zt" "${base[@]}"
check "resumed at 1 rank without FSDP: the uninterrupted run" 'near "$w/ref.jsonl" "$w/r-plain.jsonl"'
resume om "$zt" "${base[@]}" --offload-model disk --offload-dir "$w"
check "resumed with --offload-model: the uninterrupted run" 'near "$w/ref.jsonl" "$w/r-om.jsonl"'
resume os "$zt" "${base[@]}" --offload-states disk --offload-dir "$w"
check "resumed with --offload-states (streamed into the store): the uninterrupted run" \
  'near "$w/ref.jsonl" "$w/r-os.jsonl"'
if [ $np -eq 2 ]; then
  resume ddp mpi 2 "${base[@]}"
  check "resumed under DDP (2 ranks): the uninterrupted run" 'near "$w/ref.jsonl" "$w/r-ddp.jsonl"'
  resume pp mpi 2 "${base[@]}" --pp 2
  check "resumed under --pp 2: the uninterrupted run" 'near "$w/ref.jsonl" "$w/r-pp.jsonl"'
fi
out=$("$zt" consolidate "$w/sh" "$w/cons" 2>&1); rc=$?
check "zt consolidate into a new folder" '[ $rc -eq 0 ] && [ -f "$w/cons/latest/model.safetensors" ]'
out=$("$zt" sample --checkpoint "$w/sh" --len 40 --seed 3 2>&1); rc=$?
out2=$("$zt" sample --checkpoint "$w/cons" --len 40 --seed 3 2>&1)
check "zt sample reads a sharded checkpoint: its consolidated copy's text" '[ $rc -eq 0 ] && [ "$out" = "$out2" ]'
s2=(train --batch 4 --seq 32 --steps 2 --threads 1 --sample-len 0)
for from in "$w/sh" "$w/sh/step-00000003" "$w/cons"; do
  out=$("$zt" "${s2[@]}" --init-from "$from" --metrics "$w/i-$(basename "$from").jsonl" 2>&1)
done
check "--init-from a sharded series and version: the weights of its consolidated copy" \
  '[ -n "$(losses "$w/i-sh.jsonl")" ] && [ "$(losses "$w/i-sh.jsonl")" = "$(losses "$w/i-cons.jsonl")" ] &&
   [ "$(losses "$w/i-step-00000003.jsonl")" = "$(losses "$w/i-cons.jsonl")" ]'

# ---------------------------------------------------------------- zt consolidate into a checkpoint
v1=$(readlink "$w/cons/latest")
out=$("$zt" consolidate "$w/sh" "$w/cons" 2>&1); rc=$?
check "consolidate into a folder that holds a checkpoint: refused, naming --force, nothing written" \
  '[ $rc -ne 0 ] && grep -q -- "--force" <<<"$out" && [ "$(readlink "$w/cons/latest")" = "$v1" ] &&
   [ $(ls -d "$w"/cons/step-* | wc -l) -eq 1 ]'
out=$("$zt" consolidate "$w/sh" "$w/sh" 2>&1); rc=$?
check "consolidate into its own series: refused" '[ $rc -ne 0 ] && [ ! -e "$w/sh/latest/model.safetensors" ]'
out=$("$zt" consolidate "$w/sh" "$w/cons" --force 2>&1); rc=$?
check "--force: a new version, latest moves to it" \
  '[ $rc -eq 0 ] && [ "$(readlink "$w/cons/latest")" != "$v1" ] && [ $(ls -d "$w"/cons/step-* | wc -l) -eq 2 ]'

# ---------------------------------------------------------------- --init-from a folder
shape=(--layers 2 --dim 64 --heads 2)
out=$("$zt" "${s2[@]}" "${shape[@]}" --save "$w/shp" 2>&1)
mkdir "$w/hf" && cp "$w/shp/latest/model.safetensors" "$w/shp/latest/config.json" "$w/hf/"
out=$("$zt" "${s2[@]}" "${shape[@]}" --init-from "$w/hf/model.safetensors" --metrics "$w/f-file.jsonl" 2>&1)
out=$("$zt" "${s2[@]}" --init-from "$w/hf" --metrics "$w/f-hf.jsonl" --save "$w/o-hf" 2>&1); rc=$?
check "--init-from a transformers folder: the model takes its config.json's shape" \
  '[ $rc -eq 0 ] && [ -n "$(losses "$w/f-hf.jsonl")" ] && [ "$(losses "$w/f-hf.jsonl")" = "$(losses "$w/f-file.jsonl")" ] &&
   grep -q "\"n_layer\": 2, \"n_head\": 2, \"n_embd\": 64" "$w/o-hf/latest/state.json"'
for from in "$w/shp" "$w/shp/latest"; do
  out=$("$zt" "${s2[@]}" --init-from "$from" --metrics "$w/f-ck.jsonl" 2>&1); rc=$?
  check "--init-from a zerotrain checkpoint ($(basename "$from")): its shape and weights" \
    '[ $rc -eq 0 ] && [ "$(losses "$w/f-ck.jsonl")" = "$(losses "$w/f-file.jsonl")" ]'
done
out=$("$zt" "${s2[@]}" --init-from "$w/hf" --layers 2 --metrics "$w/f-agree.jsonl" 2>&1); rc=$?
check "a shape flag that agrees with config.json" '[ $rc -eq 0 ]'
out=$("$zt" "${s2[@]}" --init-from "$w/hf" --layers 3 2>&1); rc=$?
check "a shape flag that contradicts config.json: an error naming both values" \
  '[ $rc -ne 0 ] && grep -q -- "--layers 3 contradicts layers 2 of .*config.json" <<<"$out"'
out=$("$zt" "${s2[@]}" --init-from "$w/hf" --model gpt2-124m 2>&1); rc=$?
check "a preset that contradicts config.json: an error naming both values" \
  '[ $rc -ne 0 ] && grep -q -- "--model gpt2-124m has layers 12, but .*config.json. has 2" <<<"$out"'
mkdir "$w/empty"
out=$("$zt" "${s2[@]}" --init-from "$w/empty" 2>&1); rc=$?
check "--init-from a folder of neither kind: says what it needs" \
  '[ $rc -ne 0 ] && grep -q "nor a Hugging Face model (config.json with model.safetensors" <<<"$out"'

# ---------------------------------------------------------------- the tokenizer
for i in 1 2 3 4 5 6 7 8; do cat "$fx/text.txt"; done >"$w/text.txt"
bpe=(--encoder "$fx/encoder.json" --merges "$fx/vocab.bpe")
out=$("$zt" tokenize "$w/text.txt" "$w/b.tok" "${bpe[@]}" 2>&1)
t3=(train --data "$w/b.tok" --batch 2 --seq 16 --steps 3 --eval-batches 1 --threads 1)
out=$("$zt" "${t3[@]}" --sample-len 0 --metrics "$w/v.jsonl" 2>&1); rc=$?
check "the vocabulary is the token file's (556) without --vocab" '[ $rc -eq 0 ] && [ "$(losses "$w/v.jsonl" | wc -l)" -eq 3 ]'
out=$("$zt" "${t3[@]}" --vocab 300 2>&1); rc=$?
check "a --vocab smaller than the token file's: an error naming both" \
  '[ $rc -ne 0 ] && grep -q -- "--vocab 300 is smaller than the vocabulary of the token file .* (556 tokens" <<<"$out"'
out=$("$zt" "${t3[@]}" --sample-len 8 2>&1); rc=$?
check "no tokenizer, a non-byte vocabulary: the summary says why there is no sample" \
  '[ $rc -eq 0 ] && grep -q "^no sample: the model.s 556 token ids are not bytes" <<<"$out"'
out=$("$zt" "${t3[@]}" --sample-len 8 "${bpe[@]}" --save "$w/tk" --save-every 1 --keep-checkpoints 1 2>&1); rc=$?
check "--encoder --merges: the end-of-run sample is the tokenizer's text" '[ $rc -eq 0 ] && grep -q "^sample (temperature" <<<"$out"'
check "every checkpoint carries the tokenizer as vocab.json and merges.txt" \
  'cmp -s "$w/tk/latest/vocab.json" "$fx/encoder.json" && cmp -s "$w/tk/latest/merges.txt" "$fx/vocab.bpe"'
check "older versions are pruned, tokenizer files and all" '[ $(ls -d "$w"/tk/step-* | wc -l) -eq 1 ] && [ -z "$(ls -A "$w/tk" | grep "^\.")" ]'
out=$("$zt" sample --checkpoint "$w/tk" --len 8 2>&1); rc=$?
out2=$("$zt" sample --checkpoint "$w/tk" --len 8 "${bpe[@]}" 2>&1)
check "zt sample takes the checkpoint's tokenizer" '[ $rc -eq 0 ] && [ -n "$out" ] && [ "$out" = "$out2" ]'
out=$("$zt" "${t3[@]}" --sample-len 0 --save "$w/notk" 2>&1)
out=$("$zt" sample --checkpoint "$w/notk" --len 1000000 2>&1); rc=$?
check "zt sample of a non-byte model without a tokenizer: refused, saying what to give" \
  '[ $rc -ne 0 ] && grep -q "vocabulary of 556 tokens, whose ids are not bytes" <<<"$out" && grep -q -- "--encoder" <<<"$out"'
out=$("$zt" "${t3[@]}" --encoder "$fx/encoder.json" 2>&1); rc=$?
check "--encoder without --merges: an error before step 1" \
  '[ $rc -ne 0 ] && grep -q -- "--encoder and --merges go together" <<<"$out" && ! grep -q "^step " <<<"$out"'
out=$("$zt" "${t3[@]}" --encoder "$w/missing.json" --merges "$fx/vocab.bpe" --save "$w/tm" 2>&1); rc=$?
check "a tokenizer file that cannot be read: an error before step 1 naming it" \
  '[ $rc -ne 0 ] && grep -q "missing.json" <<<"$out" && ! grep -q "^step " <<<"$out"'
out=$("$zt" "${base[@]}" --shard full --encoder "$fx/encoder.json" --merges "$fx/vocab.bpe" --vocab 556 --steps 2 \
  --save "$w/shk" 2>&1); rc=$?
out2=$("$zt" consolidate "$w/shk" "$w/shk-cons" 2>&1)
check "a sharded checkpoint carries the tokenizer, and its consolidated copy too" \
  '[ $rc -eq 0 ] && cmp -s "$w/shk/latest/vocab.json" "$fx/encoder.json" && cmp -s "$w/shk-cons/latest/merges.txt" "$fx/vocab.bpe"'
hf="$(dirname "$0")/fixtures/hf/llama3"
out=$("$zt" "${base[@]}" --shard full --tokenizer "$hf" --vocab 556 --steps 2 --save "$w/shh" 2>&1); rc=$?
out2=$("$zt" consolidate "$w/shh" "$w/shh-cons" 2>&1)
check "a sharded checkpoint carries a Hugging Face tokenizer's files, and its consolidated copy too" \
  '[ $rc -eq 0 ] && cmp -s "$w/shh/latest/tokenizer.json" "$hf/tokenizer.json" && cmp -s "$w/shh-cons/latest/tokenizer.json" "$hf/tokenizer.json" && cmp -s "$w/shh-cons/latest/tokenizer_config.json" "$hf/tokenizer_config.json"'

# ---------------------------------------------------------------- the Llama family's Hugging Face folders
# A tiny Llama 3 (GQA, llama3 rope scaling, untied head; vocab 128, so token ids that are not
# bytes) trains from its folder on a token file of its vocabulary (written here: ZTOK header,
# 4096 two-byte ids), and its checkpoint is a Hugging Face folder again; a resume with another
# model shape is refused, naming both shapes. Sampling needs text: a vocab of 128 has no
# tokenizer here, so zt sample refuses it (from the checkpoint and from the fixture folder alike),
# naming what to give; a byte-level Llama (llama-tiny, vocab 256) samples from its checkpoint
# and from a plain Hugging Face folder (its config.json and model.safetensors alone), which
# --init-from takes too.
l3="$(dirname "$0")/fixtures/llama/llama3/model"
ids=""
for ((i = 0; i < 4096; i++)); do printf -v b '\\x%02x\\x00' $(((i * 37 + i / 5) % 128)); ids+=$b; done
printf 'ZTOK\x01\x00\x00\x00\x02\x00\x00\x00\x80\x00\x00\x00\x00\x10\x00\x00\x00\x00\x00\x00'"$ids" >"$w/l3.tok"
l3t=(train --data "$w/l3.tok" --batch 4 --seq 16 --eval-batches 1 --threads 1 --sample-len 0)
out=$("$zt" "${l3t[@]}" --init-from "$l3" --steps 3 --save "$w/l3" 2>&1); rc=$?
check "zt train --init-from a Llama 3 folder: trains, and saves a Hugging Face folder" \
  '[ $rc -eq 0 ] && grep -q "llama from .*(2 layers, 4 heads, dim 32, vocab 128" <<<"$out" && [ -f "$w/l3/latest/config.json" ] && [ -f "$w/l3/latest/model.safetensors" ] && grep -q "\"model_type\": *\"llama\"" "$w/l3/latest/config.json"'
out=$("$zt" "${l3t[@]}" --init-from "$w/l3" --steps 2 2>&1); rc=$?
check "--init-from the Llama checkpoint" '[ $rc -eq 0 ] && grep -q "vocab 128" <<<"$out"'
out=$("$zt" "${l3t[@]}" --model llama-tiny --vocab 128 --steps 5 --resume "$w/l3" 2>&1); rc=$?
check "a resume with another model shape: refused, naming both shapes" \
  '[ $rc -ne 0 ] && grep -q "is of another model shape (llama: 2 layers, 32 wide.*than asked (llama: 4 layers, 128 wide" <<<"$out"'
for ck in "$w/l3" "$l3"; do
  out=$("$zt" sample --checkpoint "$ck" --len 8 2>&1); rc=$?
  check "zt sample of a vocab-128 Llama without a tokenizer ($(basename "$ck")): refused, saying what to give" \
    '[ $rc -ne 0 ] && grep -q "vocabulary of 128 tokens, whose ids are not bytes, and it holds no tokenizer" <<<"$out"'
done
out=$("$zt" train --model llama-tiny --layers 2 --dim 32 --batch 2 --seq 16 --steps 2 --eval-batches 1 --threads 1 \
  --sample-len 0 --save "$w/lt" 2>&1)
mkdir -p "$w/lt-hf" && cp "$w/lt/latest/config.json" "$w/lt/latest/model.safetensors" "$w/lt-hf/"
out=$("$zt" sample --checkpoint "$w/lt" --len 8 --temperature 0 2>&1); rc=$?
out2=$("$zt" sample --checkpoint "$w/lt-hf" --len 8 --temperature 0 2>&1); rc2=$?
check "zt sample of a byte-level Llama: from its checkpoint and from its Hugging Face folder alike" \
  '[ $rc -eq 0 ] && [ $rc2 -eq 0 ] && [ -n "$out" ] && [ "$out" = "$out2" ]'
out=$("$zt" train --init-from "$w/lt-hf" --batch 2 --seq 16 --steps 1 --eval-batches 1 --threads 1 --sample-len 0 2>&1); rc=$?
check "--init-from that Hugging Face folder" '[ $rc -eq 0 ] && grep -q "llama from .*(2 layers" <<<"$out"'
check_summary
