#!/usr/bin/env bash
# zt train --pp under mpirun: every schedule at 2 and 4 stages trains as one process does (the
# losses of three AdamW steps with clipping, from --metrics, equal to those of one process with
# the same global batch and microbatches within 2e-6 relative: the tied embedding's two grads
# and the grad norm are summed across ranks in another order, float32 rounding); 2 x 2 grids
# (pipeline x DDP) against DDP on 2 ranks; with recompute; a pipeline checkpoint resumed at
# one rank, and a one-rank checkpoint resumed in a pipeline; the measured figures in the
# metrics and the timeline; and the errors, each with its message, none hanging.
# Usage: cli_pipeline_test.sh path/to/zt
set -u
zt=$1
. "$(dirname "$0")/check_lib.sh"
if ! command -v mpirun >/dev/null 2>&1; then
  echo "SKIP no mpirun: the pipeline runs need OpenMPI"
  exit 0
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMP_NUM_THREADS=1
mpi() { local np=$1; shift; timeout 300 mpirun -np "$np" --oversubscribe "$zt" "$@"; }

# 8 blocks (4 ranks x 2 chunks leave every middle stage one), small and fast
base=(train --layers 8 --dim 64 --heads 4 --batch 8 --seq 32 --steps 3 --warmup 1 --lr 3e-3 --dropout 0 --threads 1
  --eval-every 3 --eval-batches 2)
# same FILE_A FILE_B: the same number of losses, each within 2e-6 relative
same() { losses_near "$1" "$2" 2e-6; }

out=$("$zt" "${base[@]}" --microbatches 4 --metrics "$w/one4.jsonl" 2>&1)
check "one process, 4 microbatches" '[ $(losses "$w/one4.jsonl" | wc -l) -eq 3 ]'
out=$("$zt" "${base[@]}" --microbatches 8 --metrics "$w/one8.jsonl" 2>&1)

for s in gpipe 1f1b interleaved zb-h1 zb-h2 zb-v v-half v-min dualpipev auto; do
  out=$(mpi 2 "${base[@]}" --pp 2 --schedule $s --microbatches 4 --metrics "$w/p2-$s.jsonl" 2>&1)
  check "pp 2 $s: the losses of one process" 'same "$w/one4.jsonl" "$w/p2-$s.jsonl"'
done
for s in gpipe 1f1b interleaved zb-h1 zb-h2 zb-v v-half v-min dualpipev auto; do
  out=$(mpi 4 "${base[@]}" --pp 4 --schedule $s --microbatches 8 --metrics "$w/p4-$s.jsonl" 2>&1)
  check "pp 4 $s: the losses of one process" 'same "$w/one8.jsonl" "$w/p4-$s.jsonl"'
done
# a schedule file written by zt schedule runs as the generator's schedule does
"$zt" schedule --schedule zb-v --stages 2 --microbatches 4 --out "$w/zbv.sched" >/dev/null 2>&1
out=$(mpi 2 "${base[@]}" --pp 2 --schedule "$w/zbv.sched" --microbatches 4 --metrics "$w/p2-file.jsonl" 2>&1)
check "pp 2 with a schedule file: the losses of one process" 'same "$w/one4.jsonl" "$w/p2-file.jsonl"'
# a file that zt schedule --check accepts trains (rank 1 takes the activations in the reverse
# of the order they were sent: its lowered form receives them in order)
printf 'zt-pipeline ranks=2 chunks=1 microbatches=4\n0: 0F0 0F1 0F2 0F3 0BW3 0BW2 0BW1 0BW0\n1: 1F3 1BW3 1F2 1BW2 1F1 1BW1 1F0 1BW0\n' >"$w/rev.sched"
out=$(mpi 2 "${base[@]}" --pp 2 --schedule "$w/rev.sched" --microbatches 4 --metrics "$w/p2-rev.jsonl" 2>&1)
check "pp 2 with a file --check accepts: the losses of one process" 'same "$w/one4.jsonl" "$w/p2-rev.jsonl"'
for b in auto 3,5; do
  out=$(mpi 2 "${base[@]}" --pp 2 --schedule zb-h1 --microbatches 4 --pp-balance $b --metrics "$w/bal-$b.jsonl" 2>&1)
  check "pp 2 zb-h1 with --pp-balance $b: the same losses" 'same "$w/one4.jsonl" "$w/bal-$b.jsonl"'
done
check "the validation loss through the stages" '[ "$(vals "$w/one4.jsonl")" = "$(vals "$w/p2-zb-v.jsonl")" ]'
check "metrics: the measured bubble and per-rank F/B/W times" \
  'grep -q "\"pp_bubble\":[0-9.]*,\"pp_sim_bubble\":[0-9.]*" "$w/p2-zb-h1.jsonl" && grep -q "\"f_ms\":[0-9.]*,\"b_ms\":[0-9.]*,\"w_ms\":[0-9.]*" "$w/p2-zb-h1.jsonl"'

# pipeline x DDP: 2 replicas of a 2-stage pipeline against DDP on 2 ranks
out=$(mpi 2 "${base[@]}" --microbatches 2 --metrics "$w/ddp2.jsonl" 2>&1)
for s in zb-h1 zb-v 1f1b; do
  out=$(mpi 4 "${base[@]}" --pp 2 --schedule $s --microbatches 2 --metrics "$w/g-$s.jsonl" 2>&1)
  check "2 x 2 grid $s: the losses of DDP on 2 ranks" 'same "$w/ddp2.jsonl" "$w/g-$s.jsonl"'
done
check "the grid's metrics name the layout" 'grep -q "\"shard\":\"pipeline+ddp\"" "$w/g-zb-v.jsonl"'
# pipeline x FSDP: the stages' parameters sharded over the 2 replicas (gathered once per step)
for sh in full grad_op opt; do
  for s in zb-h1 zb-v; do
    out=$(mpi 4 "${base[@]}" --pp 2 --schedule $s --microbatches 2 --shard $sh --metrics "$w/f-$sh-$s.jsonl" 2>&1)
    check "2 x 2 grid $s, shard $sh: the losses of DDP on 2 ranks" 'same "$w/ddp2.jsonl" "$w/f-$sh-$s.jsonl"'
  done
done
# rank 0's peak OPTIM bytes (from its per-rank figures in the last line)
optim_peak() { tail -n 1 "$1" | sed 's/.*"ranks":\[{"rank":0,"mem_peak":{[^}]*"OPTIM":\([0-9]*\).*/\1/'; }
check "shard full: half the optimizer state of DDP's per rank" \
  '[ "$(optim_peak "$w/f-full-zb-v.jsonl")" -lt "$(( $(optim_peak "$w/g-zb-v.jsonl") * 6 / 10 ))" ]'
out=$(mpi 4 "${base[@]}" --pp 2 --schedule zb-v --microbatches 2 --recompute full --metrics "$w/g-rc.jsonl" 2>&1)
check "2 x 2 grid zb-v with recompute: the same losses" 'same "$w/ddp2.jsonl" "$w/g-rc.jsonl"'
out=$(mpi 2 "${base[@]}" --pp 2 --schedule zb-h1 --microbatches 4 --recompute selective --metrics "$w/p2-sel.jsonl" 2>&1)
check "pp 2 zb-h1 with selective recompute: the same losses" 'same "$w/one4.jsonl" "$w/p2-sel.jsonl"'

# checkpoints: a pipeline run stopped at step 2 and resumed at one rank, and the other way
long=("${base[@]}" --steps 4)
out=$("$zt" "${long[@]}" --microbatches 4 --metrics "$w/full.jsonl" 2>&1)
out=$(mpi 2 "${long[@]}" --pp 2 --schedule zb-v --microbatches 4 --stop-at 2 --save "$w/ck" 2>&1)
check "a pipeline run saves a checkpoint" '[ -e "$w/ck/latest/model.safetensors" ] && [ -e "$w/ck/latest/optim.safetensors" ]'
out=$("$zt" "${long[@]}" --microbatches 4 --resume "$w/ck" --metrics "$w/res1.jsonl" 2>&1)
check "resumed at one rank: steps 3 and 4 of the uninterrupted run" \
  '[ "$(losses "$w/res1.jsonl" | wc -l)" -eq 2 ] && same <(tail -n 2 "$w/full.jsonl") "$w/res1.jsonl"'
out=$(mpi 4 "${long[@]}" --pp 2 --schedule zb-h1 --microbatches 2 --shard full --stop-at 2 --save "$w/ckf" 2>&1)
out=$("$zt" "${long[@]}" --microbatches 4 --resume "$w/ckf" --metrics "$w/resf.jsonl" 2>&1)
check "a pipeline x FSDP checkpoint resumed at one rank" 'same <(tail -n 2 "$w/full.jsonl") "$w/resf.jsonl"'
out=$("$zt" "${long[@]}" --microbatches 4 --stop-at 2 --save "$w/ck1" 2>&1)
out=$(mpi 4 "${long[@]}" --pp 4 --schedule 1f1b --microbatches 4 --resume "$w/ck1" --metrics "$w/res4.jsonl" 2>&1)
check "a one-rank checkpoint resumed in a 4-stage pipeline" 'same <(tail -n 2 "$w/full.jsonl") "$w/res4.jsonl"'

# the timeline
out=$(mpi 2 "${base[@]}" --pp 2 --schedule zb-h1 --microbatches 4 --timeline "$w/tl.svg" 2>&1)
check "--timeline: the measured step above the simulated one" \
  'grep -q "measured: zb-h1" "$w/tl.svg" && grep -q "simulated from the measured costs" "$w/tl.svg"'
check "the progress line shows the bubble" 'echo "$out" | grep -q "bubble [0-9.]*% (sim [0-9.]*%)"'

# errors: clear messages, on every rank, no hang
out=$(mpi 2 "${base[@]}" --pp 2 --schedule dualpipev --microbatches 2 2>&1)
check "M below the schedule's minimum" 'echo "$out" | grep -q "schedule dualpipev needs at least 4 microbatches"'
out=$(mpi 2 "${base[@]}" --pp 2 --microbatches 4 --pp-balance 1,2 2>&1)
check "a balance that does not cover the blocks" 'echo "$out" | grep -q "gives 2 stages 3 blocks; the run has 2 stages"'
out=$(mpi 2 "${base[@]}" --layers 2 --pp 2 --schedule zb-v --microbatches 4 2>&1)
check "more stages than blocks" 'echo "$out" | grep -q "gets no block"'
printf 'zt-pipeline ranks=2 chunks=1 microbatches=4 placement=loop\n0: 0F0 0F1 0F2 0F3 0BW0 0BW1 0BW2\n1: 1F0 1BW0 1F1 1BW1 1F2 1BW2 1F3 1BW3\n' >"$w/bad.sched"
out=$(mpi 2 "${base[@]}" --pp 2 --schedule "$w/bad.sched" --microbatches 4 2>&1)
check "a schedule file that fails validation names the rule" 'echo "$out" | grep -q "bad.sched" && echo "$out" | grep -qi "stage 0 microbatch 3"'
out=$(mpi 2 "${base[@]}" --pp 2 --schedule /dev/zero --microbatches 4 2>&1)
check "a schedule that is not a regular file (it hung every rank)" 'echo "$out" | grep -q "/dev/zero.: it is a character device, not a regular file"'
out=$(mpi 3 "${base[@]}" --pp 2 --microbatches 4 2>&1)
check "pp not dividing the ranks" 'echo "$out" | grep -q "pp 2 does not divide the 3 ranks"'
out=$("$zt" "${base[@]}" --timeline "$w/x.svg" 2>&1)
check "--timeline without a pipeline" 'echo "$out" | grep -q "timeline" && echo "$out" | grep -q "pp"'
check_summary cli_pipeline
