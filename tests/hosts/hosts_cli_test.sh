#!/usr/bin/env bash
# zt train across separate hosts (tests/hosts/hosts_lib.sh) against the same layout on one
# host: DDP, FSDP full/grad_op/opt, hybrid (sharded within a host, replicated across), a
# pipeline with its stages on different hosts (zb-h1, zb-v), pipeline x FSDP on 2 hosts x 2
# ranks (each pipeline on a host, or each stage on a host), every state on disk with DDP (each
# host's store on its own disk), 4 hosts. Each pair prints the same losses, validation losses
# and grad norms (all 9 digits) and saves bitwise the same tensors (model, optimizer state;
# each rank's shard under FSDP). Checkpoints saved across hosts: a sharded one in a folder the
# hosts share, resumed at the same layout (the uninterrupted run's losses) and at other layouts
# (a pipeline on 2 hosts; bitwise the same resume on one host); a folder per host (one path,
# each host's own disk): a single-file checkpoint (DDP, pipeline) is written by rank 0 into its
# host's folder, resumed once copied to the other host; a sharded save needs one folder every
# rank sees, and fails on every rank, naming the file, when the hosts have their own.
# ctest label hosts; exit 77 (skipped) where namespaces cannot be made.
# Usage: hosts_cli_test.sh path/to/zt
set -u
zt=$1
. "$(dirname "$0")/../check_lib.sh"
. "$(dirname "$0")/hosts_lib.sh"
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
t_start=$(date +%s)

base=(train --layers 8 --dim 64 --heads 4 --batch 8 --seq 32 --steps 3 --warmup 1 --lr 3e-3 --dropout 0 --threads 1
  --eval-every 3 --eval-batches 2 --sample-len 0 --grad-clip 0.5)
# one host: plain mpirun (shared memory between the ranks, as the other mpi tests run)
one() { local np=$1; shift; timeout 300 mpirun -np "$np" --oversubscribe "$zt" "$@"; }
# every printed figure of a --metrics file: losses, validation losses, grad norms
figures() { echo "$(losses "$1" | tr '\n' ' ')/$(vals "$1" | tr '\n' ' ')/$(norms "$1" | tr '\n' ' ')"; }
same() { [ -n "$(losses "$1")" ] && [ "$(figures "$1")" = "$(figures "$2")" ]; }
# tensors DIR_A DIR_B: the newest checkpoints of two series hold bitwise the same tensors (the
# .safetensors files' headers without their metadata, which carries the save's id, and bytes)
tensors() {
  python3 - "$1/latest" "$2/latest" <<'PY'
import json, os, struct, sys
def read(d):
    out = {}
    for f in sorted(os.listdir(d)):
        if not f.endswith(".safetensors"):
            continue
        b = open(os.path.join(d, f), "rb").read()
        n = struct.unpack("<Q", b[:8])[0]
        h = json.loads(b[8:8 + n])
        h.pop("__metadata__", None)
        out[f] = (h, b[8 + n:])
    return out
a, b = read(sys.argv[1]), read(sys.argv[2])
sys.exit(0 if a and a == b else 1)
PY
}
# pair NAME NP "MPIRUN ARGS" ZT ARGS...: the layout on one host and across the hosts (MPIRUN ARGS
# place the ranks there), saved at the end: the same figures and tensors
pair() {
  local name=$1 np=$2 place=$3 t0 t1 t2
  shift 3
  t0=$(date +%s.%N)
  out=$(one "$np" "${base[@]}" "$@" --metrics "$w/$name-1.jsonl" --save "$w/$name-1" 2>&1)
  t1=$(date +%s.%N)
  # shellcheck disable=SC2086
  out=$(hosts_mpirun -np "$np" $place "$zt" "${base[@]}" "$@" --metrics "$w/$name-h.jsonl" --save "$w/$name-h" 2>&1)
  t2=$(date +%s.%N)
  printf '  %s: one host %.1f s, hosts %.1f s: %s\n' "$name" "$(echo "$t1 - $t0" | bc)" "$(echo "$t2 - $t1" | bc)" \
    "$(figures "$w/$name-h.jsonl")"
  same "$w/$name-1.jsonl" "$w/$name-h.jsonl" && tensors "$w/$name-1" "$w/$name-h"
}

# --- 2 hosts x 2 slots (by slot: ranks 0,1 on the first host, 2,3 on the second)
hosts_up 2 2
check "DDP, 2 hosts x 1 rank: one host's figures and tensors, bitwise" 'pair ddp2 2 "--map-by node"'
check "DDP, 2 hosts x 2 ranks" 'pair ddp4 4 ""'
for sh in full grad_op opt; do
  check "FSDP $sh, 2 hosts x 2 ranks: bitwise (each rank's shard too)" 'pair $sh 4 "" --shard $sh'
done
check "FSDP hybrid:2, sharded within each host, replicated across" 'pair hybrid 4 "" --shard hybrid:2'
check "FSDP hybrid:2 by node: shard groups across the hosts" 'pair hybridn 4 "--map-by node" --shard hybrid:2'
for s in zb-h1 zb-v; do
  check "pipeline $s, a stage per host" 'pair pp-$s 2 "--map-by node" --pp 2 --schedule $s --microbatches 4'
done
check "pipeline x FSDP full, each pipeline on a host, each stage's shards across" \
  'pair ppf 4 "" --pp 2 --schedule zb-h1 --microbatches 2 --shard full'
check "pipeline x FSDP full, each stage on a host (its shards within it)" \
  'pair ppfn 4 "--map-by node" --pp 2 --schedule zb-v --microbatches 2 --shard full'
# every state on disk with DDP, each host's store in its own folder (the same path, zth_local,
# is each host's own disk): DDP's figures on one host
out=$(hosts_mpirun -np 2 --map-by node "$zt" "${base[@]}" --offload-states disk --offload-dir "$zth_local" \
  --metrics "$w/st.jsonl" 2>&1)
check "every state on disk with DDP, 2 hosts, a store on each host's disk: DDP's figures" 'same "$w/ddp2-1.jsonl" "$w/st.jsonl"'

# checkpoints. A sharded FSDP checkpoint is one folder (index.json, a shard file per rank,
# committed by rank 0): it needs a folder every rank sees (a shared filesystem), here $w.
long=("${base[@]}" --steps 4)
out=$(hosts_mpirun -np 4 "$zt" "${long[@]}" --shard full --metrics "$w/full4.jsonl" 2>&1)
out=$(hosts_mpirun -np 4 "$zt" "${long[@]}" --shard full --stop-at 2 --save "$w/ckf" 2>&1)
check "a sharded checkpoint saved across 2 hosts: a shard file per rank" \
  '[ "$(ls "$w/ckf/latest/" | grep -c "^shard-[0-3]-of-4.safetensors$")" -eq 4 ]'
out=$(hosts_mpirun -np 4 "$zt" "${long[@]}" --shard full --resume "$w/ckf" --metrics "$w/resf.jsonl" 2>&1)
tail -n 2 "$w/full4.jsonl" >"$w/full4-34.jsonl"
check "resumed at the same layout: steps 3 and 4 of the uninterrupted run, bitwise" \
  'same "$w/full4-34.jsonl" "$w/resf.jsonl"'
out=$(hosts_mpirun -np 2 --map-by node "$zt" "${long[@]}" --pp 2 --schedule zb-v --microbatches 4 --resume "$w/ckf" \
  --metrics "$w/respp-h.jsonl" 2>&1)
out=$(one 2 "${long[@]}" --pp 2 --schedule zb-v --microbatches 4 --resume "$w/ckf" --metrics "$w/respp-1.jsonl" 2>&1)
check "resumed as a pipeline with a stage per host: the same resume on one host, bitwise" \
  'same "$w/respp-1.jsonl" "$w/respp-h.jsonl" && [ "$(losses "$w/respp-h.jsonl" | wc -l)" -eq 2 ]'
check "... and the uninterrupted run's losses within 1e-5" 'losses_near "$w/full4-34.jsonl" "$w/respp-h.jsonl" 1e-5'
# a folder per host: the sharded save fails on every rank (the shard files of the other host's
# ranks have no staging folder there), naming the file; nothing is committed, no rank hangs
out=$(hosts_mpirun -np 4 "$zt" "${long[@]}" --shard full --stop-at 2 --save "$zth_local/ck" 2>&1)
rc=$?
check "a sharded save into a folder per host fails, naming the missing staging folder, and ends the job" \
  '[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "shard-[23]-of-4.safetensors.*No such file or directory" <<<"$out" &&
   grep -q "failed on another rank" <<<"$out" && [ ! -e "$zth_work/h1/ck/latest" ]'
# a single-file checkpoint (DDP) into a folder per host: rank 0 writes it on the first host
out=$(hosts_mpirun -np 2 --map-by node "$zt" "${long[@]}" --stop-at 2 --save "$zth_local/ckd" 2>&1)
check "a DDP checkpoint into a folder per host: written by rank 0 on its host only" \
  '[ -e "$zth_work/h1/ckd/latest/model.safetensors" ] && [ ! -e "$zth_work/h2/ckd" ]'
out=$(hosts_mpirun -np 4 --map-by node "$zt" "${long[@]}" --shard hybrid:2 --resume "$zth_local/ckd" 2>&1)
rc=$?
check "resumed where another host lacks the checkpoint: an error naming it, no hang" \
  '[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "ckd" <<<"$out"'
cp -a "$zth_work/h1/ckd" "$zth_work/h2/ckd"
out=$(hosts_mpirun -np 4 "$zt" "${long[@]}" --shard hybrid:2 --resume "$zth_local/ckd" --metrics "$w/resd-h.jsonl" 2>&1)
out=$(one 4 "${long[@]}" --shard hybrid:2 --resume "$zth_work/h1/ckd" --metrics "$w/resd-1.jsonl" 2>&1)
check "copied to the other host, resumed as hybrid:2 on 2 hosts x 2: the same resume on one host, bitwise" \
  'same "$w/resd-1.jsonl" "$w/resd-h.jsonl" && [ "$(losses "$w/resd-h.jsonl" | wc -l)" -eq 2 ]'

# --- 4 hosts x 1 slot
hosts_down
hosts_up 4 1
check "DDP, 4 hosts" 'pair ddp4h 4 ""'
check "FSDP full, 4 hosts" 'pair full4h 4 "" --shard full'
check "pipeline zb-h1, 4 stages on 4 hosts" 'pair pp4h 4 "" --pp 4 --schedule zb-h1 --microbatches 8'
echo "hosts_cli: $(( $(date +%s) - t_start )) s"
check_summary hosts_cli
