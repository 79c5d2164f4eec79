#!/usr/bin/env bash
# End-to-end checks of the zt command: training learns and writes metrics, checkpoints
# resume bitwise, activation recomputation changes no loss, NaN stops a run leaving the
# last checkpoint intact, plot/sample/tokenize work, and bad input gets a clear error and
# a non-zero exit code.
set -u
zt="$1"
. "$(dirname "$0")/check_lib.sh"
# no in-step progress lines (a loaded machine makes steps slow; line counts are checked)
export ZT_STEP_PROGRESS_S=100000
# the tensor bytes of a safetensors file (after its header, which holds a per-save id)
tensors() { local hl; hl=$(od -An -t u8 -N8 "$1" | tr -d ' '); tail -c +$((9 + hl)) "$1"; }
small="--batch 4 --seq 32 --eval-batches 2 --log-every 10 --sample-len 20"

out=$("$zt" train $small --steps 40 --eval-every 20 --metrics "$w/m.jsonl" --save "$w/full" 2>&1); rc=$?
check "train runs and exits 0" '[ $rc -eq 0 ]'
check "progress lines show loss, lr, tok/s, mfu, memory" 'grep -q "loss .* lr .* tok/s .* mfu .* mem param" <<<"$out"'
check "metrics: one JSON line per step with mem and val_loss" '[ $(wc -l < "$w/m.jsonl") -eq 40 ] && grep -q "\"mem\":{\"PARAM\"" "$w/m.jsonl" && grep -q "val_loss" "$w/m.jsonl"'
first=$(head -1 "$w/m.jsonl" | sed 's/.*"loss":\([0-9.e+-]*\).*/\1/'); last=$(tail -1 "$w/m.jsonl" | sed 's/.*"loss":\([0-9.e+-]*\).*/\1/')
check "loss goes down" 'awk -v a="$first" -v b="$last" "BEGIN{exit !(b < a - 0.3)}"'
check "checkpoint files written, latest links the newest version" '[ -f "$w/full/latest/model.safetensors" ] && [ -f "$w/full/latest/optim.safetensors" ] && [ -f "$w/full/latest/state.json" ] && [ -f "$w/full/latest/config.json" ] && [ "$(readlink "$w/full/latest")" = step-00000040 ]'

out=$("$zt" train $small --steps 40 --eval-every 20 --stop-at 25 --save "$w/part" 2>&1); rc=$?
check "stop-at stops with a checkpoint" '[ $rc -eq 0 ] && grep -q "\"step\": *25" "$w/part/latest/state.json"'
out=$("$zt" train $small --steps 40 --eval-every 20 --resume "$w/part" --save "$w/part" --metrics "$w/r.jsonl" 2>&1); rc=$?
check "resume runs to the end" '[ $rc -eq 0 ] && [ $(wc -l < "$w/r.jsonl") -eq 15 ]'
check "resumed losses are bitwise those of the uninterrupted run" 'diff <(sed -n "26,40p" "$w/m.jsonl" | grep -o "\"loss\":[^,]*") <(grep -o "\"loss\":[^,]*" "$w/r.jsonl")'
check "resumed parameters are bitwise those of the uninterrupted run" 'cmp -s <(tensors "$w/full/latest/model.safetensors") <(tensors "$w/part/latest/model.safetensors")'
check "resumed optimizer state is bitwise that of the uninterrupted run" 'cmp -s <(tensors "$w/full/latest/optim.safetensors") <(tensors "$w/part/latest/optim.safetensors")'

cp -r "$w/full" "$w/keep"
out=$("$zt" train $small --steps 40 --inject-nan-at 5 --save "$w/full" 2>&1); rc=$?
check "NaN loss stops the run with a clear message" '[ $rc -ne 0 ] && grep -q "loss is nan at step 5" <<<"$out" && grep -q "no checkpoint was written yet" <<<"$out"'
check "NaN run left the last good checkpoint intact" 'cmp -s "$w/full/latest/model.safetensors" "$w/keep/latest/model.safetensors" && cmp -s "$w/full/latest/state.json" "$w/keep/latest/state.json"'

out=$("$zt" train $small --steps 5 --model gpt2-124m --resume "$w/full" 2>&1); rc=$?
check "resuming a checkpoint of another shape is an error" '[ $rc -ne 0 ] && grep -q "another model shape" <<<"$out"'

out=$("$zt" train $small --steps 2 --init-from "$w/keep/latest/model.safetensors" 2>&1); rc=$?
check "init-from a GPT-2 safetensors file" '[ $rc -eq 0 ]'
out=$("$zt" train $small --steps 2 --dim 64 --init-from "$w/keep/latest/model.safetensors" 2>&1); rc=$?
check "init-from a file of another shape is a clear error" '[ $rc -ne 0 ] && grep -q "model.safetensors" <<<"$out"'
out=$("$zt" train $small --steps 2 --vocab 50 2>&1); rc=$?
check "token ids out of the model's vocab are a clear error" '[ $rc -ne 0 ] && grep -qi "range\|vocab" <<<"$out"'

out=$("$zt" plot "$w/m.jsonl" --out "$w/p.svg" 2>&1); rc=$?
check "plot writes an SVG" '[ $rc -eq 0 ] && grep -q "<svg" "$w/p.svg" && grep -q "polyline" "$w/p.svg"'
out=$("$zt" sample --checkpoint "$w/keep" --len 30 --seed 3 2>&1); rc=$?
check "sample generates text from a checkpoint" '[ $rc -eq 0 ] && [ ${#out} -ge 20 ]'

printf 'hello world, this is a small text for tokenizing.\n%.0s' $(seq 200) > "$w/t.txt"
out=$("$zt" tokenize "$w/t.txt" "$w/t.tok" 2>&1); rc=$?
check "tokenize writes a token file" '[ $rc -eq 0 ] && [ -s "$w/t.tok" ]'
out=$("$zt" train --data "$w/t.tok" --batch 2 --seq 16 --steps 3 --sample-len 0 2>&1); rc=$?
check "train on a token file" '[ $rc -eq 0 ]'
hf="$(dirname "$0")/fixtures/hf/llama3"
mkdir -p "$w/docs/sub" && printf 'first document\n' > "$w/docs/a.txt" && printf 'second' > "$w/docs/sub/b.txt"
out=$("$zt" tokenize "$w/docs" "$w/t.txt" "$w/hf.tok" --tokenizer "$hf" 2>&1); rc=$?
check "tokenize --tokenizer DIR (Hugging Face): files and folders, each file a document" '[ $rc -eq 0 ] && grep -q "(3 documents, .* vocabulary 522)" <<<"$out"'
out=$("$zt" train --data "$w/hf.tok" --batch 2 --seq 16 --steps 2 --sample-len 0 --save "$w/hfck0" 2>&1); rc=$?
check "train on the tokens of a Hugging Face tokenizer" '[ $rc -eq 0 ] && [ ! -e "$w/hfck0/latest/tokenizer.json" ]'
out=$("$zt" sample --checkpoint "$w/hfck0" --tokenizer "$hf" --prompt "first" --len 20 2>&1); rc=$?
check "sample --tokenizer DIR decodes with the Hugging Face tokenizer" '[ $rc -eq 0 ] && grep -q "^first" <<<"$out"'
out2=$("$zt" train --data "$w/hf.tok" --batch 2 --seq 16 --steps 2 --sample-len 8 --save "$w/hfck" --tokenizer "$hf" 2>&1); rc=$?
check "train --tokenizer DIR: every checkpoint carries its files, and the end-of-run sample is text" '[ $rc -eq 0 ] && cmp -s "$hf/tokenizer.json" "$w/hfck/latest/tokenizer.json" && cmp -s "$hf/tokenizer_config.json" "$w/hfck/latest/tokenizer_config.json" && grep -q "^sample (temperature" <<<"$out2"'
out2=$("$zt" sample --checkpoint "$w/hfck" --prompt "first" --len 20 2>&1); rc=$?
check "sample takes the checkpoint's tokenizer.json" '[ $rc -eq 0 ] && [ "$out" = "$out2" ]'
out=$("$zt" train --data "$w/hf.tok" --batch 2 --seq 16 --steps 2 --tokenizer "$hf" --encoder "$hf/tokenizer.json" --merges "$hf/tokenizer.json" 2>&1); rc=$?
check "train: --tokenizer with --encoder/--merges is refused before step 1" '[ $rc -ne 0 ] && grep -q "give one" <<<"$out" && ! grep -q "^step" <<<"$out"'
out=$("$zt" train --data "$w/hf.tok" --batch 2 --seq 16 --steps 2 --tokenizer "$w/docs" 2>&1); rc=$?
check "train: a --tokenizer folder without tokenizer.json is refused before step 1" '[ $rc -ne 0 ] && grep -q "tokenizer.json" <<<"$out" && ! grep -q "^step" <<<"$out"'
out=$("$zt" train --data "$w/t.tok" --batch 2 --seq 16 --steps 2 --tokenizer "$hf" 2>&1); rc=$?
check "train: a --tokenizer with more tokens than the model's vocabulary is refused" '[ $rc -ne 0 ] && grep -q "more than the model" <<<"$out"'
out=$("$zt" tokenize "$w/t.txt" "$w/x.tok" --tokenizer "$hf" --encoder a --merges b 2>&1); rc=$?
check "tokenize: --tokenizer with --encoder is refused" '[ $rc -eq 2 ] && grep -q "not both" <<<"$out"'
out=$("$zt" tokenize "$w/t.txt" "$w/x.tok" --tokenizer "$w/docs" 2>&1); rc=$?
check "tokenize: a folder without tokenizer.json is a clear error" '[ $rc -ne 0 ] && grep -q "tokenizer.json" <<<"$out"'
out=$("$zt" train --val-data "$w/t.tok" --batch 2 --seq 16 --steps 2 --sample-len 0 2>&1); rc=$?
check "validation file with the built-in training data" '[ $rc -eq 0 ]'
out=$("$zt" train --val-data "$w/missing-val.tok" --steps 2 2>&1); rc=$?
check "a missing validation file is an error, not ignored" '[ $rc -ne 0 ] && grep -q "missing-val.tok" <<<"$out"'
head -c 30 "$w/t.tok" > "$w/trunc.tok"
out=$("$zt" train --data "$w/trunc.tok" --steps 3 2>&1); rc=$?
check "truncated token file is a clear error" '[ $rc -ne 0 ] && grep -qi "trunc" <<<"$out"'
out=$("$zt" train --data "$w/missing.tok" --steps 3 2>&1); rc=$?
check "missing token file is a clear error" '[ $rc -ne 0 ] && grep -q "missing.tok" <<<"$out"'

printf '# a config file\nsteps = 3\nbatch = 2\n' > "$w/cfg"
out=$("$zt" train --config "$w/cfg" --seq 16 --sample-len 0 2>&1); rc=$?
check "config file sets options, flags override" '[ $rc -eq 0 ] && grep -q "batch 2 x seq 16, 3 steps" <<<"$out"'
printf 'steps = many\n' > "$w/badcfg"
out=$("$zt" train --config "$w/badcfg" 2>&1); rc=$?
check "bad config value names file and line" '[ $rc -eq 2 ] && grep -q "badcfg:1" <<<"$out"'

out=$("$zt" train --batch 4 --seq 16 --steps 2 --microbatches 2 --sample-len 0 2>&1); rc=$?
check "train with microbatches" '[ $rc -eq 0 ]'
out=$("$zt" train --batch 4 --seq 16 --steps 2 --microbatches 3 --sample-len 0 2>&1); rc=$?
check "microbatches that do not divide the batch name the flags" '[ $rc -ne 0 ] && grep -q -- "--microbatches 3 does not divide" <<<"$out" && grep -q -- "--batch" <<<"$out"'

out=$("$zt" bench step --model gpt2-tiny --batch 2 --seq 32 --steps 2 2>&1); rc=$?
check "bench step prints one JSON object" '[ $rc -eq 0 ] && grep -q "\"ms_per_step\"" <<<"$out" && grep -q "\"ratio_to_sgemm\"" <<<"$out"'

out=$("$zt" train $small --steps 6 --dropout 0.1 --metrics "$w/nr.jsonl" 2>&1); rc=$?
out=$("$zt" train $small --steps 6 --dropout 0.1 --recompute full --metrics "$w/fr.jsonl" 2>&1); rc2=$?
check "--recompute full: losses bitwise those without" '[ $rc -eq 0 ] && [ $rc2 -eq 0 ] && [ $(wc -l < "$w/fr.jsonl") -eq 6 ] && diff <(grep -o "\"loss\":[^,]*" "$w/nr.jsonl") <(grep -o "\"loss\":[^,]*" "$w/fr.jsonl")'
out=$("$zt" train $small --steps 6 --dropout 0.1 --recompute full --checkpoint-every 3 --metrics "$w/fr3.jsonl" 2>&1); rc=$?
check "--checkpoint-every 3: losses bitwise those without" '[ $rc -eq 0 ] && diff <(grep -o "\"loss\":[^,]*" "$w/nr.jsonl") <(grep -o "\"loss\":[^,]*" "$w/fr3.jsonl")'
for mode in selective selective:gemm budget=3M; do
  out=$("$zt" train $small --steps 6 --dropout 0.1 --recompute $mode --metrics "$w/sr.jsonl" 2>&1); rc=$?
  check "--recompute $mode: losses bitwise those without; predicted and measured peak printed" '[ $rc -eq 0 ] && diff <(grep -o "\"loss\":[^,]*" "$w/nr.jsonl") <(grep -o "\"loss\":[^,]*" "$w/sr.jsonl") && grep -q "peak .* measured, .* predicted" <<<"$out" && grep -q "act_peak_predicted" "$w/sr.jsonl"'
done
check "--recompute budget=3M: a mixed plan within the budget" 'grep -q "blocks [nsf]*[sf][nsf]* " <<<"$out" && awk "/ACTIVATION/ && \$1==\"cpu\" {exit !(\$4 <= 3*1048576)}" <<<"$out"'
for tier in disk host; do
  out=$("$zt" train $small --steps 6 --dropout 0.1 --recompute selective --offload-activations $tier --offload-dir "$w" --metrics "$w/of.jsonl" 2>&1); rc=$?
  check "--offload-activations $tier: losses bitwise those without" '[ $rc -eq 0 ] && diff <(grep -o "\"loss\":[^,]*" "$w/nr.jsonl") <(grep -o "\"loss\":[^,]*" "$w/of.jsonl") && grep -q "activation offload: peak" <<<"$out"'
done
out=$("$zt" train $small --steps 3 --offload-activations bf16 2>&1); rc=$?
check "--offload-activations bf16 trains" '[ $rc -eq 0 ]'
out=$("$zt" train --recompute some 2>&1); rc=$?
check "bad --recompute is exit 2 naming the choices" '[ $rc -eq 2 ] && grep -q "none, full, selective" <<<"$out"'
out=$("$zt" train --recompute budget=lots 2>&1); rc=$?
check "bad budget size is exit 2 with an example" '[ $rc -eq 2 ] && grep -q "e.g. 300M" <<<"$out"'
out=$("$zt" train $small --recompute budget=10K 2>&1); rc=$?
check "too small a budget names the minimum" '[ $rc -ne 0 ] && grep -q "what recomputing every block needs" <<<"$out"'
out=$("$zt" train --offload-activations tape 2>&1); rc=$?
check "bad offload tier is exit 2 naming the tiers" '[ $rc -eq 2 ] && grep -q "none, bf16, disk or host" <<<"$out"'
out=$("$zt" train $small --steps 2 --offload-activations disk --offload-dir /nonexistent/dir 2>&1); rc=$?
check "unusable offload dir is a clear error naming it" '[ $rc -ne 0 ] && grep -q "/nonexistent/dir" <<<"$out"'

# Data parallel under mpirun (when OpenMPI is installed): --batch is global, so 2 ranks
# compute what 1 computes (up to reduction-order rounding, 1e-4 on the loss here).
if command -v mpirun >/dev/null 2>&1; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1
  mpi() { local np=$1; shift; OMP_NUM_THREADS=1 mpirun -np "$np" --oversubscribe "$zt" "$@"; }
  losses() { grep -o '"loss":[^,]*' "$1" | cut -d: -f2; }
  close() { paste <(losses "$1") <(losses "$2") | awk -v t="${3:-1e-4}" '{d=$1-$2; if (d<0) d=-d; if (d > t * ($2<0?-$2:$2) + 1e-6) bad=1; n++} END{exit bad || n < 1}'; }
  dp="$small --steps 6 --eval-every 3 --threads 1"
  out=$("$zt" train $dp --metrics "$w/d1.jsonl" 2>&1); rc=$?
  check "1-rank reference run" '[ $rc -eq 0 ]'
  nlines=$(grep -c "^step " <<<"$out")
  for mode in none full grad_op opt hybrid:1; do
    out=$(mpi 2 train $dp --shard $mode --metrics "$w/d2_$mode.jsonl" --save "$w/ck_$mode" 2>&1); rc=$?
    check "2 ranks, --shard $mode: runs, rank 0 alone prints" '[ $rc -eq 0 ] && [ $(grep -c "^step " <<<"$out") -eq $nlines ]'
    check "2 ranks, --shard $mode: losses are the 1-rank run's" 'close "$w/d2_$mode.jsonl" "$w/d1.jsonl"'
  done
  check "metrics carry per-rank memory and communication" 'grep -q "\"world\":2,\"shard\":\"full\",\"ranks\":\[{\"rank\":0,\"mem_peak\":{\"PARAM\"" "$w/d2_full.jsonl" && grep -q "{\"rank\":1," "$w/d2_full.jsonl" && grep -q "\"comm_bytes\":[1-9]" "$w/d2_full.jsonl"'
  check "sharded checkpoint: a file per rank and an index" '[ -f "$w/ck_full/latest/index.json" ] && ls "$w/ck_full/latest/" | grep -q "shard-1-of-2"'
  out=$("$zt" train $dp --steps 8 --shard full --resume "$w/ck_full" --metrics "$w/r1.jsonl" 2>&1); rc=$?
  out2=$(mpi 2 train $dp --steps 8 --shard full --resume "$w/ck_full" --metrics "$w/r2.jsonl" 2>&1); rc2=$?
  check "a 2-rank sharded checkpoint resumes at 1 rank like at 2" '[ $rc -eq 0 ] && [ $rc2 -eq 0 ] && close "$w/r1.jsonl" "$w/r2.jsonl"'
  out=$("$zt" consolidate "$w/ck_full" "$w/cons" 2>&1); rc=$?
  check "zt consolidate makes a single-process checkpoint" '[ $rc -eq 0 ] && [ -f "$w/cons/latest/model.safetensors" ] && [ -f "$w/cons/latest/optim.safetensors" ]'
  out=$("$zt" train $dp --steps 8 --resume "$w/cons" --metrics "$w/r3.jsonl" 2>&1); rc=$?
  check "the consolidated checkpoint resumes in plain training like the sharded one" '[ $rc -eq 0 ] && close "$w/r3.jsonl" "$w/r1.jsonl"'
  # mixed precision: 2 ranks against 1 rank in the same precision (bf16 gradient rounding: 1e-3)
  for mp in bf16 fp16; do
    out=$("$zt" train $dp --shard full --mixed-precision $mp --metrics "$w/m1_$mp.jsonl" 2>&1); rc=$?
    out2=$(mpi 2 train $dp --shard full --mixed-precision $mp --metrics "$w/m2_$mp.jsonl" 2>&1); rc2=$?
    check "--mixed-precision $mp: 2 ranks match 1 rank in $mp" '[ $rc -eq 0 ] && [ $rc2 -eq 0 ] && close "$w/m2_$mp.jsonl" "$w/m1_$mp.jsonl" 1e-3'
    check "--mixed-precision $mp: the loss is not the f32 one" '! close "$w/m1_$mp.jsonl" "$w/d1.jsonl" 1e-7'
  done
  check "fp16 logs its loss scale" 'grep -q "\"loss_scale\":65536,\"skipped\":false" "$w/m2_fp16.jsonl"'
  out=$(mpi 2 train $small --batch 3 --steps 2 2>&1); rc=$?
  check "a global batch that does not divide over the ranks is a clear error" '[ $rc -ne 0 ] && grep -q "divide evenly over the 2 ranks" <<<"$out"'
fi
out=$("$zt" train --shard quarter 2>&1); rc=$?
check "bad --shard is exit 2 naming the modes" '[ $rc -eq 2 ] && grep -q "hybrid" <<<"$out"'
out=$("$zt" train --mixed-precision bf16 --steps 1 2>&1); rc=$?
check "--mixed-precision without an FSDP strategy says what to add" '[ $rc -ne 0 ] && grep -q "needs an FSDP strategy" <<<"$out"'
out=$("$zt" train --mixed-precision fp8 2>&1); rc=$?
check "bad --mixed-precision is exit 2 naming the choices" '[ $rc -eq 2 ] && grep -q "bf16, fp16 or none" <<<"$out"'

out=$("$zt" train --bogus 1 2>&1); rc=$?
check "unknown flag is exit 2 with a message" '[ $rc -eq 2 ] && grep -q "unknown option .bogus." <<<"$out"'
out=$("$zt" train --steps -3 2>&1); rc=$?
check "bad value is exit 2 with a message" '[ $rc -eq 2 ] && grep -q "needs an integer" <<<"$out"'
out=$("$zt" train --model gpt2-huge 2>&1); rc=$?
check "unknown preset lists the presets" '[ $rc -eq 2 ] && grep -q "gpt2-124m" <<<"$out"'
out=$("$zt" train --heads 3 --dim 128 2>&1); rc=$?
check "impossible shape is a clear error" '[ $rc -ne 0 ] && grep -qi "divisible" <<<"$out"'
out=$("$zt" train --seq 100000 2>&1); rc=$?
check "seq longer than the context is a clear error" '[ $rc -ne 0 ] && grep -q "longer than the model" <<<"$out"'
out=$("$zt" frobnicate 2>&1); rc=$?
check "unknown command is exit 2" '[ $rc -eq 2 ] && grep -q "unknown command" <<<"$out"'
out=$("$zt" train --help 2>&1); rc=$?
check "help lists every flag" '[ $rc -eq 0 ] && for f in config model layers heads dim vocab ctx dropout init-from data val-data batch seq steps lr min-lr warmup optimizer weight-decay beta1 beta2 momentum grad-clip seed threads log-every eval-every eval-batches metrics save save-every resume stop-at sample-len recompute checkpoint-every offload-activations offload-dir shard prefetch save-format mixed-precision tensorboard keep-checkpoints allow-config-change comm-timeout; do grep -q -- "--$f" <<<"$out" || exit 1; done'
check_summary
