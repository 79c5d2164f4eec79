#!/usr/bin/env bash
# No lost work: a signal stops zt train at a safe point with a final checkpoint and the command
# that resumes it (bitwise the uninterrupted run), a second signal exits at once, the ranks of
# an mpirun job stop together; output paths are checked before step 1, and a figure or a log
# that cannot be written at the end is a warning that costs no checkpoint; a run extended on
# resume keeps its warm-up and says how the learning rate changes; options that would be
# silently ignored are refused.
set -u
zt="$1"
. "$(dirname "$0")/check_lib.sh"
export ZT_STEP_PROGRESS_S=100000
small="--batch 4 --seq 32 --eval-batches 1 --eval-every 0 --sample-len 0 --log-every 1"

# wait_lines FILE N [SECONDS]: until FILE has N lines (a metrics file: N steps done)
wait_lines() {
  local i
  for i in $(seq $((${3:-120} * 10))); do
    [ -f "$1" ] && [ "$(wc -l <"$1")" -ge "$2" ] && return 0
    sleep 0.1
  done
  return 1
}
# the pids of this test's zt processes whose command line holds $1
zt_pids() { pgrep -f -- "$1" | while read -r p; do grep -q "train" /proc/$p/cmdline 2>/dev/null && echo "$p"; done; }

# 1. SIGTERM in one process: the last complete step saved, the resume command printed, and the
# resumed run continues the uninterrupted one bitwise
("$zt" train $small --steps 100000 --save "$w/s1" --metrics "$w/s1.jsonl" >"$w/s1.out" 2>&1; echo $? >"$w/s1.rc") &
wait_lines "$w/s1.jsonl" 8
pid=$(zt_pids "$w/s1.jsonl" | head -1)
kill -TERM "$pid"
wait
out=$(cat "$w/s1.out")
N=$(sed -n 's/.*"step": *\([0-9]*\).*/\1/p' "$w/s1/latest/state.json")
check "SIGTERM: exit status 143 after saving the last complete step" '[ "$(cat "$w/s1.rc")" = 143 ] && [ -n "$N" ] && [ "$N" -ge 8 ]'
check "SIGTERM: the message names the signal, the checkpoint and how to resume" \
  'grep -q "SIGTERM received: stopping" <<<"$out" && grep -q "stopped by SIGTERM after step $N of 100000" <<<"$out" && grep -q "saved $w/s1/step-0*$N$" <<<"$out" && grep -q "resume with: .* --resume $w/s1$" <<<"$out"'
check "SIGTERM: the metrics file has every step up to the checkpoint" '[ "$(wc -l <"$w/s1.jsonl")" -ge "$N" ]'
hint=$(sed -n 's/^zt train: resume with: //p' <<<"$out")
out=$(eval "$hint --stop-at $((N + 5))" 2>&1); rc=$?
"$zt" train $small --steps 100000 --stop-at $((N + 5)) --metrics "$w/ref.jsonl" >/dev/null 2>&1
check "the printed command resumes the run, bitwise the uninterrupted one" \
  '[ $rc -eq 0 ] && [ "$(losses "$w/s1.jsonl" | wc -l)" -eq $((N + 5)) ] && diff <(losses "$w/s1.jsonl") <(losses "$w/ref.jsonl")'

# stopped between microbatches (a signal mid-step): resumes bitwise too, wherever it landed
("$zt" train $small --microbatches 4 --steps 100000 --save "$w/s2" --metrics "$w/s2.jsonl" >"$w/s2.out" 2>&1; echo $? >"$w/s2.rc") &
wait_lines "$w/s2.jsonl" 5
kill -INT "$(zt_pids "$w/s2.jsonl" | head -1)"
wait
N=$(sed -n 's/.*"step": *\([0-9]*\).*/\1/p' "$w/s2/latest/state.json")
"$zt" train $small --microbatches 4 --steps 100000 --resume "$w/s2" --stop-at $((N + 3)) --metrics "$w/s2.jsonl" >/dev/null 2>&1
"$zt" train $small --microbatches 4 --steps 100000 --stop-at $((N + 3)) --metrics "$w/ref2.jsonl" >/dev/null 2>&1
check "SIGINT with microbatches: exit 130, saved, resumed bitwise" \
  '[ "$(cat "$w/s2.rc")" = 130 ] && diff <(losses "$w/s2.jsonl") <(losses "$w/ref2.jsonl")'

# without --save: said so
("$zt" train $small --steps 100000 --metrics "$w/s3.jsonl" >"$w/s3.out" 2>&1; echo $? >"$w/s3.rc") &
wait_lines "$w/s3.jsonl" 2
kill -HUP "$(zt_pids "$w/s3.jsonl" | head -1)"
wait
check "SIGHUP without --save: stops, saying nothing was saved" '[ "$(cat "$w/s3.rc")" = 129 ] && grep -q "nothing was saved (no --save DIR)" "$w/s3.out"'

# a second signal (a second or more after the first) ends the process at once: the first comes
# during a long step (a 124M model's first step on one thread), which would run to its end
("$zt" train --model gpt2-124m --batch 4 --seq 256 --threads 1 --steps 3 --save "$w/s4" --sample-len 0 --eval-batches 1 >"$w/s4.out" 2>&1; echo $? >"$w/s4.rc") &
for i in $(seq 600); do grep -q "^zt train: gpt2-124m" "$w/s4.out" 2>/dev/null && break; sleep 0.1; done
sleep 3 # the model is built and step 1 is running (its forward alone takes seconds)
pid=$(pgrep -f -- "--save $w/s4" | head -1)
kill -INT "$pid"; sleep 1.5; kill -INT "$pid" 2>/dev/null
wait
check "a second signal exits at once: exit 130, nothing saved" '[ "$(cat "$w/s4.rc")" = 130 ] && [ ! -e "$w/s4/latest" ]'

# 2. output paths checked before step 1; a figure that fails at the end is a warning
out=$("$zt" train $small --steps 3 --metrics /dev/full --save "$w/full" 2>&1); rc=$?
check "a metrics file that cannot be written is a warning: the run ends and saves" \
  '[ $rc -eq 0 ] && grep -q "warning: writing metrics file ./dev/full. failed.*the run goes on without its logs" <<<"$out" && [ -e "$w/full/latest/model.safetensors" ] && grep -q "\"step\": *3" "$w/full/latest/state.json"'

# 3. extending a run: the warm-up the checkpoint resolved stays, the rate change is printed
"$zt" train $small --steps 20 --save "$w/ext" >/dev/null 2>&1
out=$("$zt" train $small --steps 30 --resume "$w/ext" --metrics "$w/ext.jsonl" 2>&1); rc=$?
lr21=$(sed -n '1s/.*"lr":\([^,]*\),.*/\1/p' "$w/ext.jsonl")
check "a larger --steps on resume is accepted, the learning rate's change at the resume step printed" \
  '[ $rc -eq 0 ] && grep -q "steps 20 -> 30; the learning rate at step 21 changes: 1.000e-04 in the checkpoint.s schedule -> " <<<"$out"'
check "the extended run keeps the checkpoint's warm-up (2 steps, not 3)" \
  'python3 -c "import math,sys; w,t,s,mx,mn=2,30,20,1e-3,1e-4; e=mn+0.5*(1+math.cos(math.pi*(s-w)/(t-w)))*(mx-mn); sys.exit(abs(e-$lr21)>1e-5*e)"'
out=$("$zt" train $small --steps 30 --warmup 5 --resume "$w/ext" 2>&1); rc=$?
check "a warm-up set other than the checkpoint's is a course change" '[ $rc -ne 0 ] && grep -q "warmup auto -> 5" <<<"$out"'

# 17. options that would be ignored are refused
out=$("$zt" train $small --steps 2 --schedule zb-h1 2>&1); rc=$?
check "--schedule without --pp is refused" '[ $rc -ne 0 ] && grep -q "schedule .zb-h1. is a pipeline schedule, and this run has no pipeline: give --pp" <<<"$out"'
out=$("$zt" train $small --steps 2 --lr 0.001 --min-lr 5 2>&1); rc=$?
check "--min-lr above --lr is refused" '[ $rc -ne 0 ] && grep -q -- "--min-lr 5 is above --lr 0.001" <<<"$out"'

# under mpirun: the ranks stop together, the pipeline's timeline checked before step 1 and
# written after the checkpoint, a failure there a warning
if command -v mpirun >/dev/null 2>&1; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1
  # (mpirun kills its ranks a second after it passes on SIGTERM or SIGINT: an mpirun job is
  # stopped with SIGUSR1 to mpirun, which passes it on and waits, or with a signal to the ranks)
  pp="--pp 2 --microbatches 4 --batch 8 --seq 32 --eval-batches 1 --sample-len 0"
  out=$(OMP_NUM_THREADS=1 timeout 120 mpirun -np 2 "$zt" train $pp --steps 6 --save "$w/ck" --timeline /nonexistent/t.svg 2>&1); rc=$?
  check "mpirun --pp: a --timeline in a missing folder fails before step 1" \
    '[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "/nonexistent/t.svg.*does not exist" <<<"$out" && ! grep -q "^step" <<<"$out" && [ ! -e "$w/ck/latest" ]'
  out=$(OMP_NUM_THREADS=1 timeout 120 mpirun -np 2 "$zt" train $pp --steps 6 --timeline "$w" 2>&1); rc=$?
  check "mpirun --pp: a --timeline that is a folder fails before step 1" '[ $rc -ne 0 ] && grep -q "timeline .*is a folder; name a file" <<<"$out" && ! grep -q "^step" <<<"$out"'
  # an option only one rank refuses (a pipeline cannot inject a NaN) ends every rank at once, not
  # after --comm-timeout: the ranks agree before their first collective
  t0=$SECONDS
  out=$(OMP_NUM_THREADS=1 timeout 200 mpirun -np 1 "$zt" train $pp --steps 6 --inject-nan-at 3 --comm-timeout 120 : \
    -np 1 "$zt" train $pp --steps 6 --comm-timeout 120 2>&1); rc=$?
  check "mpirun: a rank that fails alone before step 1 ends the job at once, with its message" \
    '[ $rc -ne 0 ] && [ $((SECONDS - t0)) -lt 60 ] && grep -q "inject-nan-at (a testing aid) is not supported with a pipeline" <<<"$out"'
  # --metrics given to one rank only would be dropped: refused
  out=$(OMP_NUM_THREADS=1 timeout 120 mpirun -np 1 "$zt" train $small --steps 2 : -np 1 "$zt" train $small --steps 2 --metrics "$w/one.jsonl" 2>&1); rc=$?
  check "mpirun: --metrics given to one rank only is refused, naming the option" '[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "ranks disagree on .metrics." <<<"$out"'
  # SIGUSR1 to mpirun (which forwards it): both stages stop at one step, save, and the timeline,
  # whose folder went away meanwhile, is a warning
  mkdir "$w/tl"
  (OMP_NUM_THREADS=1 timeout 300 mpirun -np 2 "$zt" train $pp --steps 100000 --save "$w/pck" --metrics "$w/p.jsonl" \
    --timeline "$w/tl/t.svg" >"$w/p.out" 2>&1; echo $? >"$w/p.rc") &
  wait_lines "$w/p.jsonl" 4
  rm -rf "$w/tl"
  kill -USR1 "$(pgrep -f -- "^mpirun -np 2 .*--metrics $w/p.jsonl" | head -1)"
  wait
  out=$(cat "$w/p.out")
  N=$(sed -n 's/.*"step": *\([0-9]*\).*/\1/p' "$w/pck/latest/state.json")
  check "mpirun: SIGUSR1 stops every rank at one step with a checkpoint and the resume command" \
    '[ "$(cat "$w/p.rc")" -ne 0 ] && [ "$(cat "$w/p.rc")" -ne 124 ] && [ -n "$N" ] && grep -q "stopped by SIGUSR1 after step $N of 100000" <<<"$out" && grep -q "resume with: mpirun -np 2 " <<<"$out"'
  check "mpirun: the timeline that could not be written is a warning after the save" \
    'grep -q "warning: writing the pipeline timeline .*t.svg" <<<"$out" && grep -q "the training and its checkpoints are not affected" <<<"$out"'
  # SIGTERM to one rank only (a node's kill): the other rank stops with it
  (OMP_NUM_THREADS=1 timeout 300 mpirun -np 2 "$zt" train $small --steps 100000 --save "$w/dck" --metrics "$w/d.jsonl" >"$w/d.out" 2>&1; echo $? >"$w/d.rc") &
  wait_lines "$w/d.jsonl" 4
  for p in $(zt_pids "$w/d.jsonl"); do grep -qz "^OMPI_COMM_WORLD_RANK=1$" /proc/$p/environ 2>/dev/null && kill -TERM "$p"; done
  wait
  N=$(sed -n 's/.*"step": *\([0-9]*\).*/\1/p' "$w/dck/latest/state.json")
  check "mpirun: SIGTERM to one rank stops both at one step, saved" \
    '[ "$(cat "$w/d.rc")" -ne 124 ] && [ -n "$N" ] && grep -q "stopped by SIGTERM after step $N" "$w/d.out"'
fi
check_summary cli_stop
