#!/usr/bin/env bash
# zt train --offload-model: the losses and validation losses of three AdamW steps with clipping
# and dropout, from --metrics, equal (as printed, all 9 digits) to plain training with the same
# microbatches for the lossless tiers (disk, host) at several slice and resident counts, in both
# modes, with recompute or activation offload inside the slices; bf16 within 1e-3 relative; a checkpoint saved under offload
# resumed under offload (and one saved plainly resumed under offload) continues the
# uninterrupted run; with DDP on 2 ranks (mpirun), DDP's losses; the summary says where the bytes
# lived; the errors, each with its message.
# Usage: cli_offload_model_test.sh path/to/zt
set -u
zt=$1
. "$(dirname "$0")/check_lib.sh"
export OMP_NUM_THREADS=1

base=(train --layers 3 --dim 64 --heads 4 --batch 8 --seq 32 --steps 3 --warmup 1 --lr 3e-3 --dropout 0.1
  --grad-clip 0.5 --threads 1 --eval-every 3 --eval-batches 2 --sample-len 0 --offload-dir "$w")
same() { [ -n "$(losses "$1")" ] && [ "$(losses "$1")" = "$(losses "$2")" ] && [ "$(vals "$1")" = "$(vals "$2")" ] &&
  [ "$(norms "$1")" = "$(norms "$2")" ]; }
# the losses and grad norms only (a run stopped early evaluates at its last step too)
same_steps() { [ -n "$(losses "$1")" ] && [ "$(losses "$1")" = "$(losses "$2")" ] && [ "$(norms "$1")" = "$(norms "$2")" ]; }
near() { losses_near "$1" "$2" 1e-3; }

for M in 1 2; do
  out=$("$zt" "${base[@]}" --microbatches $M --metrics "$w/plain$M.jsonl" 2>&1)
  check "plain, $M microbatches" '[ $(losses "$w/plain$M.jsonl" | wc -l) -eq 3 ]'
done
for M in 1 2; do
  out=$("$zt" "${base[@]}" --offload-model disk --offload-mode keep-graph --offload-slices 3 --offload-resident 1 \
    --microbatches $M --metrics "$w/kg$M.jsonl" 2>&1)
  check "keep-graph mode, $M microbatches: plain's losses, grad norms and val loss" 'same "$w/plain$M.jsonl" "$w/kg$M.jsonl"'
done
for cfg in "disk 2 1 2" "disk 5 2 2" "host 3 2 1" "disk 1 1 1" "host 5 1 2"; do
  read -r tier n k m <<<"$cfg"
  out=$("$zt" "${base[@]}" --offload-model $tier --offload-slices $n --offload-resident $k --microbatches $m \
    --metrics "$w/om-$tier-$n-$k-$m.jsonl" 2>&1)
  check "offload $tier, $n slices, $k resident, $m microbatches: plain's losses, grad norms and val loss" \
    'same "$w/plain$m.jsonl" "$w/om-$tier-$n-$k-$m.jsonl"'
done
check "the summary: slices, loads and the peaks in RAM and in the store (host: cpu)" \
  'echo "$out" | grep -q "model offload: 5 slices, 1 in RAM at once" && echo "$out" | grep -q "PARAM RAM .* cpu "'
out=$("$zt" "${base[@]}" --offload-model disk --offload-slices 3 --microbatches 2 2>&1 | grep "model offload, peaks")
check "the summary names the disk device for the disk tier" 'echo "$out" | grep -q "PARAM RAM .* disk "'

out=$("$zt" "${base[@]}" --microbatches 2 --recompute full --metrics "$w/rc.jsonl" 2>&1)
out=$("$zt" "${base[@]}" --microbatches 2 --recompute full --offload-model disk --offload-slices 3 \
  --metrics "$w/om-rc.jsonl" 2>&1)
check "with recompute inside the slices: plain's losses" 'same "$w/rc.jsonl" "$w/om-rc.jsonl"'
out=$("$zt" "${base[@]}" --microbatches 2 --offload-activations disk --offload-model disk --offload-slices 3 \
  --metrics "$w/om-act.jsonl" 2>&1)
check "with activation offload inside the slices: plain's losses" 'same "$w/plain2.jsonl" "$w/om-act.jsonl"'

out=$("$zt" "${base[@]}" --offload-model bf16 --offload-slices 3 --microbatches 2 --metrics "$w/om-bf16.jsonl" 2>&1)
check "bf16: losses within 1e-3 relative" 'near "$w/plain2.jsonl" "$w/om-bf16.jsonl"'

# checkpoints: saved under offload at step 2, resumed under offload (and plainly)
off=(--offload-model disk --offload-slices 3 --offload-resident 1 --microbatches 2)
out=$("$zt" "${base[@]}" "${off[@]}" --save "$w/ck" --save-every 2 --stop-at 2 --metrics "$w/part.jsonl" 2>&1)
check "saved at step 2 under offload" '[ -d "$w/ck/step-00000002" ]'
out=$("$zt" "${base[@]}" "${off[@]}" --resume "$w/ck" --metrics "$w/part.jsonl" 2>&1)
check "resumed under offload: the uninterrupted run's losses" 'same_steps "$w/plain2.jsonl" "$w/part.jsonl"'
out=$("$zt" "${base[@]}" --microbatches 2 --resume "$w/ck/step-00000002" --metrics "$w/part2.jsonl" 2>&1)
check "an offload checkpoint resumed plainly: step 3's loss" \
  '[ "$(losses "$w/part2.jsonl" | tail -1)" = "$(losses "$w/plain2.jsonl" | tail -1)" ]'
out=$("$zt" "${base[@]}" --microbatches 2 --save "$w/ck2" --stop-at 2 2>&1)
out=$("$zt" "${base[@]}" "${off[@]}" --resume "$w/ck2" --metrics "$w/part3.jsonl" 2>&1)
check "a plain checkpoint resumed under offload: step 3's loss" \
  '[ "$(losses "$w/part3.jsonl" | tail -1)" = "$(losses "$w/plain2.jsonl" | tail -1)" ]'

# with DDP across 2 ranks (mpirun): DDP's losses, each rank its rows, the grads averaged slice by slice
if command -v mpirun >/dev/null 2>&1; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
  export OMPI_MCA_btl_vader_single_copy_mechanism=none
  mpi() { local np=$1; shift; timeout 300 mpirun -np "$np" --oversubscribe "$zt" "$@"; }
  out=$(mpi 2 "${base[@]}" --microbatches 2 --metrics "$w/ddp.jsonl" 2>&1)
  out=$(mpi 2 "${base[@]}" --microbatches 2 "${off[@]:0:6}" --metrics "$w/om-ddp.jsonl" 2>&1)
  check "offload x DDP on 2 ranks: DDP's losses and grad norms" 'same_steps "$w/ddp.jsonl" "$w/om-ddp.jsonl"'
  check "offload x DDP: the metrics say so" 'grep -q "\"shard\":\"offload+ddp\"" "$w/om-ddp.jsonl"'
else
  echo "SKIP offload x DDP: no mpirun"
fi

# errors
out=$("$zt" "${base[@]}" --offload-model tape 2>&1)
check "an unknown tier" 'echo "$out" | grep -q "offload-model.*none, bf16, disk or host"'
out=$("$zt" "${base[@]}" --offload-model disk --offload-slices 6 2>&1)
check "more slices than units" 'echo "$out" | grep -q "has 5 units to slice" && echo "$out" | grep -q "offload-slices"'
out=$("$zt" "${base[@]}" --offload-model disk --offload-dir "$w/none/such" 2>&1)
check "an unwritable offload dir" 'echo "$out" | grep -q "$w/none/such"'
out=$("$zt" "${base[@]}" --offload-model disk --offload-mode replay 2>&1)
check "an unknown mode" 'echo "$out" | grep -q "recompute or keep-graph"'
out=$("$zt" "${base[@]}" --offload-model disk --shard full 2>&1)
check "with FSDP: refused" 'echo "$out" | grep -q "does not run with.*shard"'
check_summary cli_offload_model
