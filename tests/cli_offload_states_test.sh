#!/usr/bin/env bash
# zt train --offload-states: every model state (parameters, grads, AdamW's moments) in the
# store, the model built straight into it: three AdamW steps with clipping and dropout give
# plain training's losses, grad norms and validation losses (as printed, all 9 digits) in both
# modes at several slice and resident counts; checkpoints stream from and into the store (saved
# under it, resumed under it and plainly, and a plain one resumed under it: the uninterrupted
# run); the memory planner (--mem-limit) prints its plan and refuses a limit too small naming the
# smallest that works; under a kernel-enforced memory cgroup (bench/mem_limit.sh, as root) a
# model whose plain training does not fit trains with its states on disk; the errors.
# Usage: cli_offload_states_test.sh path/to/zt
set -u
zt=$1
. "$(dirname "$0")/check_lib.sh"
export OMP_NUM_THREADS=1
root=$(cd "$(dirname "$0")/.." && pwd)

base=(train --layers 3 --dim 64 --heads 4 --batch 8 --seq 32 --steps 3 --warmup 1 --lr 3e-3 --dropout 0.1
  --grad-clip 0.5 --threads 1 --eval-every 3 --eval-batches 2 --sample-len 0 --offload-dir "$w")
same() { [ -n "$(losses "$1")" ] && [ "$(losses "$1")" = "$(losses "$2")" ] && [ "$(vals "$1")" = "$(vals "$2")" ] &&
  [ "$(norms "$1")" = "$(norms "$2")" ]; }
same_steps() { [ -n "$(losses "$1")" ] && [ "$(losses "$1")" = "$(losses "$2")" ] && [ "$(norms "$1")" = "$(norms "$2")" ]; }

for M in 1 2; do
  out=$("$zt" "${base[@]}" --microbatches $M --metrics "$w/plain$M.jsonl" 2>&1)
  check "plain, $M microbatches" '[ $(losses "$w/plain$M.jsonl" | wc -l) -eq 3 ]'
done
for cfg in "recompute 3 1 2" "recompute 5 2 1" "keep-graph 5 2 2" "keep-graph 2 1 1"; do
  read -r mode n k m <<<"$cfg"
  out=$("$zt" "${base[@]}" --offload-states disk --offload-mode $mode --offload-slices $n --offload-resident $k \
    --microbatches $m --metrics "$w/st-$mode-$n-$k-$m.jsonl" 2>&1)
  check "states on disk, $mode, $n slices, $k resident, $m microbatches: plain's losses, grad norms, val loss" \
    'same "$w/plain$m.jsonl" "$w/st-$mode-$n-$k-$m.jsonl"'
done
check "the start line and the summary say every state is in the store, AdamW's on disk" \
  'echo "$out" | grep -q "model offload disk with every state" && echo "$out" | grep -q "OPTIM RAM .* disk "'

# checkpoints streamed from and into the store
st=(--offload-states disk --offload-slices 3 --offload-resident 1 --microbatches 2)
out=$("$zt" "${base[@]}" "${st[@]}" --save "$w/ck" --save-every 2 --stop-at 2 --metrics "$w/part.jsonl" 2>&1)
check "saved at step 2 from the store" '[ -f "$w/ck/step-00000002/optim.safetensors" ]'
cp "$w/part.jsonl" "$w/part1.jsonl"
out=$("$zt" "${base[@]}" "${st[@]}" --resume "$w/ck" --metrics "$w/part.jsonl" 2>&1)
check "resumed into the store: the uninterrupted run's losses" 'same_steps "$w/plain2.jsonl" "$w/part.jsonl"'
cp "$w/part1.jsonl" "$w/part2.jsonl"
out=$("$zt" "${base[@]}" --microbatches 2 --resume "$w/ck/step-00000002" --metrics "$w/part2.jsonl" 2>&1)
check "a checkpoint saved from the store resumed plainly: the uninterrupted run" 'same_steps "$w/plain2.jsonl" "$w/part2.jsonl"'
out=$("$zt" "${base[@]}" --microbatches 2 --save "$w/ckp" --save-every 2 --stop-at 2 --metrics "$w/part3.jsonl" 2>&1)
out=$("$zt" "${base[@]}" "${st[@]}" --resume "$w/ckp" --metrics "$w/part3.jsonl" 2>&1)
check "a plain checkpoint resumed into the store: the uninterrupted run" 'same_steps "$w/plain2.jsonl" "$w/part3.jsonl"'

# errors
out=$("$zt" "${base[@]}" --offload-states disk --shard full 2>&1)
check "with FSDP: refused, naming it" 'echo "$out" | grep -q "shard"'
out=$("$zt" "${base[@]}" --mem-limit 1G 2>&1)
check "--mem-limit without --offload-states: refused" 'echo "$out" | grep -q "offload-states"'
out=$("$zt" "${base[@]}" --offload-states nvme 2>&1)
check "an unknown tier: refused" 'echo "$out" | grep -q "offload-states"'
check_summary cli_offload_states
