#!/usr/bin/env bash
# What a careful user and a hostile file meet: kills during saves leave a loadable
# checkpoint, bad options and files get clear errors before any work, resumes say what
# changed, metrics show each step once, and (under mpirun) an error or a stopped rank ends
# every rank of the job instead of hanging. One regression check per defect of issue 11.
set -u
zt="$1"
. "$(dirname "$0")/check_lib.sh"
small="--batch 4 --seq 32 --eval-batches 2 --log-every 10 --sample-len 0"
# no in-step progress lines unless a check asks for them (a loaded machine makes steps slow)
export ZT_STEP_PROGRESS_S=100000
# metrics lines: the step numbers, one per line
steps_of() { grep -o '^{"step":[0-9]*' "$1" | cut -d: -f2; }

# 1. Kills at any moment of training and saving, into a folder that also holds the metrics
# file, leave a checkpoint that resumes (a user restarting a crashed job each time), and the
# metrics show every step exactly once.
mkdir -p "$w/ck"
kill_ok=1
latest_step() { grep -o '"step": *[0-9]*' "$w/ck/latest/state.json" | grep -o '[0-9]*$'; }
# Each run is killed a different delay after its first save (waited for, up to 60 s, so a
# loaded machine does not turn the check into "killed before any save").
for delay in 0.0 0.15 0.3 0.45 0.6 0.75; do
  resume=""; [ -e "$w/ck/latest" ] && resume="--resume $w/ck"
  before=$(readlink "$w/ck/latest" 2>/dev/null)
  "$zt" train $small --steps 400 $resume --save "$w/ck" --save-every 1 --metrics "$w/ck/m.jsonl" >/dev/null 2>&1 &
  pid=$!
  for i in $(seq 600); do
    now=$(readlink "$w/ck/latest" 2>/dev/null)
    { [ -n "$now" ] && [ "$now" != "$before" ]; } || ! kill -0 $pid 2>/dev/null && break
    sleep 0.1
  done
  sleep $delay
  kill -9 $pid 2>/dev/null
  wait $pid 2>/dev/null
  [ -e "$w/ck/latest" ] || continue # killed before its first save
  out=$("$zt" train $small --steps 400 --stop-at $(( $(latest_step) + 1 )) --resume "$w/ck" --save "$w/ck" \
        --save-every 1 --metrics "$w/ck/m.jsonl" 2>&1) || { kill_ok=0; echo "$out" | tail -3; }
done
check "kill -9 during saves: every resume succeeds" '[ $kill_ok -eq 1 ] && [ -e "$w/ck/latest" ]'
check "resumed metrics hold every step once, in order" '[ "$(steps_of "$w/ck/m.jsonl" | tr "\n" " ")" = "$(seq 1 "$(steps_of "$w/ck/m.jsonl" | tail -1)" | tr "\n" " ")" ]'
check "old versions are pruned to --keep-checkpoints (2)" '[ $(ls -d "$w"/ck/step-* | wc -l) -le 2 ]'

# 3 and 10. Sampling: huge lengths and bad temperatures are refused; a tiny one is greedy
out=$("$zt" train $small --steps 3 --save "$w/s" 2>&1)
out=$("$zt" sample --checkpoint "$w/s" --len 4611686018427387903 2>&1); rc=$?
check "zt sample --len too large is a clear error" '[ $rc -eq 2 ] && grep -q "integer in \[0, 1048576\]" <<<"$out"'
out=$("$zt" train $small --steps 3 --sample-len 99999999999999999999 2>&1); rc=$?
check "--sample-len out of range is refused before training" '[ $rc -eq 2 ] && ! grep -q "^step" <<<"$out"'
out=$("$zt" sample --checkpoint "$w/s" --temperature nan 2>&1); rc=$?
check "zt sample --temperature nan is refused" '[ $rc -eq 2 ] && grep -q "number in \[0, 100\]" <<<"$out"'
g0=$("$zt" sample --checkpoint "$w/s" --len 40 --temperature 0 2>&1)
out=$("$zt" sample --checkpoint "$w/s" --len 40 --temperature 1e-50 2>&1); rc=$?
check "zt sample --temperature 1e-50 is greedy sampling, not garbage" '[ $rc -eq 0 ] && [ "$out" = "$g0" ]'

# 4. Validation data too small is found before step 1
head -c 2000 /dev/urandom | tr -dc 'a-z \n' > "$w/small.txt"; printf 'x%.0s' $(seq 1900) >> "$w/small.txt"
"$zt" tokenize "$w/small.txt" "$w/small.tok" >/dev/null
out=$("$zt" train --data "$w/small.tok" --batch 4 --seq 256 --steps 30 --save "$w/v" 2>&1); rc=$?
check "validation data too small: refused before step 1" '[ $rc -ne 0 ] && grep -q "validation data .* too small" <<<"$out" && ! grep -q "^step" <<<"$out"'

# 5. Config files
long=$(printf 'x%.0s' $(seq 3000))
printf '# %s steps = 99\nsteps = 2\nbatch = 2\n' "$long" > "$w/c1"
out=$("$zt" train --config "$w/c1" --seq 16 --sample-len 0 2>&1); rc=$?
check "config: a long comment is a comment to its end" '[ $rc -eq 0 ] && grep -q "batch 2 x seq 16, 2 steps" <<<"$out"'
printf 'metrics = %s/run#1.jsonl # the run\nsteps = 2\nbatch = 2\nseq = 16\nlog-every = 1\nsample-len = 0\n' "$w" > "$w/c2"
out=$("$zt" train --config "$w/c2" 2>&1); rc=$?
check "config: '#' inside a value is kept; log-every and sample-len are accepted" '[ $rc -eq 0 ] && [ -s "$w/run#1.jsonl" ] && [ $(grep -c "^step" <<<"$out") -eq 2 ]'
printf 'metrics = "%s/a #b.jsonl"\nsteps = 1\nbatch = 2\nseq = 16\nsample-len = 0\n' "$w" > "$w/c3"
out=$("$zt" train --config "$w/c3" 2>&1); rc=$?
check "config: a quoted value keeps its '#'" '[ $rc -eq 0 ] && [ -s "$w/a #b.jsonl" ]'
printf 'steps = 2\nbat\0ch = 2\n' > "$w/c4"
out=$("$zt" train --config "$w/c4" 2>&1); rc=$?
check "config: a NUL byte is an error naming the line" '[ $rc -eq 2 ] && grep -q "c4., line 2: holds a NUL byte" <<<"$out"'
out=$(timeout 20 "$zt" train --config /dev/zero 2>&1); rc=$?
check "config: /dev/zero is refused at once" '[ $rc -eq 2 ] && grep -q "not a regular file" <<<"$out"'
mkfifo "$w/fifo"
out=$(timeout 20 "$zt" train --config "$w/fifo" 2>&1); rc=$?
check "config: a FIFO is refused at once" '[ $rc -eq 2 ] && grep -q "FIFO" <<<"$out"'
out=$("$zt" train --config "$w" 2>&1); rc=$?
check "config: a folder is refused" '[ $rc -eq 2 ] && grep -q "a folder" <<<"$out"'
printf 'steps = 2\nsteps = 3\n' > "$w/c5"
out=$("$zt" train --config "$w/c5" 2>&1); rc=$?
check "config: a name given twice is an error" '[ $rc -eq 2 ] && grep -q "c5:2: .steps. is set twice (also on line 1)" <<<"$out"'

# 9. The optimizer step of a checkpoint is range-checked
# rewrite a safetensors header with a sed expression (the data offsets are relative to its end)
set_header() {
  local f=$1 hl n; hl=$(od -An -t u8 -N8 "$f" | tr -d ' ')
  head -c $((8 + hl)) "$f" | tail -c +9 | sed "$2" > "$f.h"
  n=$(stat -c %s "$f.h")
  printf "$(printf '\\x%02x' $((n & 255)) $((n >> 8 & 255)) $((n >> 16 & 255)) $((n >> 24 & 255)) 0 0 0 0)" > "$f.new"
  cat "$f.h" >> "$f.new"; tail -c +$((9 + hl)) "$f" >> "$f.new"; mv "$f.new" "$f"; rm -f "$f.h"
}
cp -rL "$w/s/latest" "$w/bad_step"
set_header "$w/bad_step/optim.safetensors" 's/"step":"[0-9]*"/"step":"99999999999999999999"/'
out=$("$zt" train $small --steps 5 --resume "$w/bad_step" 2>&1); rc=$?
check "an optimizer step beyond 2^53 is refused" '[ $rc -ne 0 ] && grep -q "metadata .step. is missing or not an integer in \[0, 2^53\]" <<<"$out"'

# 11. Messages that say what is wrong
cp -rL "$w/s/latest" "$w/nanw"
hl=$(od -An -t u8 -N8 "$w/nanw/model.safetensors" | tr -d ' ')
printf '\377\377\377\377' | dd of="$w/nanw/model.safetensors" bs=1 seek=$((8 + hl + 64)) conv=notrunc 2>/dev/null
out=$("$zt" train $small --steps 3 --init-from "$w/nanw/model.safetensors" 2>&1); rc=$?
check "NaN weights from --init-from are blamed on the file, not the learning rate" '[ $rc -ne 0 ] && grep -q "holds NaN" <<<"$out" && ! grep -q "lower --lr" <<<"$out"'
out=$("$zt" train $small --steps 5 --inject-nan-at 1 --save "$w/n1" 2>&1); rc=$?
check "a NaN at step 1 claims no checkpoint that does not exist" '[ $rc -ne 0 ] && grep -q "no checkpoint was written yet" <<<"$out" && ! grep -q "intact" <<<"$out"'
out=$("$zt" train --data --config "$w/c1" 2>&1); rc=$?
check "--data --config: the option is not taken as a file name" '[ $rc -eq 2 ] && grep -q "needs a value, but the next argument is the option .--config." <<<"$out"'
out=$("$zt" train --steps=2 --batch=2 --seq=16 --sample-len=0 2>&1); rc=$?
check "--name=value works" '[ $rc -eq 0 ] && grep -q "batch 2 x seq 16, 2 steps" <<<"$out"'

# 12. Resume checks what changed; an empty --save is refused
out=$("$zt" train $small --steps 6 --stop-at 3 --save "$w/r" 2>&1)
out=$("$zt" train $small --steps 6 --seed 7 --resume "$w/r" 2>&1); rc=$?
check "resume with another seed is refused, naming the change" '[ $rc -ne 0 ] && grep -q "seed 1337 -> 7" <<<"$out" && grep -q "allow-config-change" <<<"$out"'
out=$("$zt" train $small --steps 6 --seed 7 --resume "$w/r" --allow-config-change on 2>&1); rc=$?
check "--allow-config-change on resumes and prints the change" '[ $rc -eq 0 ] && grep -q "options changed since it was saved: seed 1337 -> 7" <<<"$out"'
out=$("$zt" train $small --steps 6 --eval-every 2 --resume "$w/r" 2>&1); rc=$?
check "options that do not change the course resume silently" '[ $rc -eq 0 ] && ! grep -q "options changed" <<<"$out"'
out=$("$zt" train --save "" 2>&1); rc=$?
check "--save \"\" is refused" '[ $rc -eq 2 ] && grep -q "needs a value (got an empty one)" <<<"$out"'
out=$("$zt" train --steps 99999999999999999999 2>&1); rc=$?
check "integer options are range-checked" '[ $rc -eq 2 ] && grep -q "integer in \[1, 1099511627776\]" <<<"$out"'
out=$("$zt" train $small --steps 2 --save "$w/s/latest/model.safetensors" 2>&1); rc=$?
check "a --save that is a file fails before step 1" '[ $rc -ne 0 ] && ! grep -q "^step" <<<"$out"'

# TensorBoard: an event file per run (a resumed run adds its own); a bad folder fails before step 1
out=$("$zt" train $small --steps 4 --stop-at 2 --save "$w/tbck" --tensorboard "$w/tb" 2>&1); rc=$?
out2=$("$zt" train $small --steps 4 --resume "$w/tbck" --tensorboard "$w/tb" 2>&1); rc2=$?
check "--tensorboard writes an event file per run" '[ $rc -eq 0 ] && [ $rc2 -eq 0 ] && [ $(ls "$w"/tb/events.out.tfevents.* | wc -l) -eq 2 ] && [ -s "$(ls "$w"/tb/events.out.tfevents.* | head -1)" ]'
out=$("$zt" train $small --steps 2 --tensorboard /nonexistent/tb 2>&1); rc=$?
check "--tensorboard in a missing folder fails before step 1" '[ $rc -ne 0 ] && grep -q "/nonexistent" <<<"$out" && ! grep -q "^step" <<<"$out"'

# the progress line carries elapsed time and an ETA; slow steps show their parts (plain lines)
out=$("$zt" train $small --steps 2 --log-every 1 2>&1)
check "progress lines show elapsed time and ETA" 'grep -q "^step .* | [0-9hms]*, ETA [0-9hms]*$" <<<"$out"'
out=$(ZT_STEP_PROGRESS_S=0 "$zt" train $small --steps 2 2>&1)
check "a slow step shows its forward/backward/optimizer parts" 'grep -q "step *2/2: backward" <<<"$out" && grep -q "step *2/2: optimizer" <<<"$out"'

# 2. Under mpirun: an error on one rank, or a stopped rank, ends every rank with the message
if command -v mpirun >/dev/null 2>&1; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1
  t0=$SECONDS
  out=$(OMP_NUM_THREADS=1 timeout 120 mpirun -np 2 --oversubscribe "$zt" train $small --steps 3 --metrics /nonexistent/d/m.jsonl 2>&1); rc=$?
  check "mpirun: a bad --metrics path ends every rank at once with the message" '[ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $((SECONDS - t0)) -lt 60 ] && grep -q "/nonexistent/d/m.jsonl" <<<"$out"'
  out=$(OMP_NUM_THREADS=1 timeout 120 mpirun --oversubscribe -np 1 "$zt" train $small --steps 3 --seed 1 : -np 1 "$zt" train $small --steps 3 --seed 2 2>&1); rc=$?
  check "mpirun: ranks started with different options are refused, naming the option" '[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "ranks disagree on .seed.: world rank 0 has .1., world rank 1 has .2." <<<"$out"'
  # stopped_run NAME NP RANK ARGS...: zt train under mpirun (--comm-timeout 4), world rank RANK
  # stopped with SIGSTOP once a step line is out; sets victim (its pid) and t0 (when it was
  # stopped); the output in $w/NAME.out and the exit status in $w/NAME.rc once the job ends
  # (waited for up to 60 s). The --metrics path, in this run's own folder, tells its ranks from
  # those of any other run of this test on the machine.
  stopped_run() {
    local name=$1 np=$2 rank=$3 p i
    shift 3
    (OMP_NUM_THREADS=1 timeout 240 mpirun -np "$np" --oversubscribe "$zt" train $small --steps 100000 --comm-timeout 4 \
      --metrics "$w/$name.jsonl" "$@" >"$w/$name.out" 2>&1; echo $? >"$w/$name.rc") &
    victim=""
    for i in $(seq 400); do
      sleep 0.3
      for p in $(pgrep -f -- "--metrics $w/$name.jsonl"); do
        grep -qz "^OMPI_COMM_WORLD_RANK=$rank$" /proc/$p/environ 2>/dev/null && victim=$p
      done
      [ -n "$victim" ] && grep -q "^step" "$w/$name.out" 2>/dev/null && break
    done
    t0=$SECONDS
    [ -n "$victim" ] && kill -STOP "$victim"
    for i in $(seq 120); do [ -s "$w/$name.rc" ] && break; sleep 0.5; done
  }
  ended() { [ -n "$victim" ] && [ -s "$w/$1.rc" ] && [ "$(cat "$w/$1.rc")" -ne 0 ] && [ "$(cat "$w/$1.rc")" -ne 124 ] && [ $((SECONDS - t0)) -lt 60 ]; }
  # a rank stopped mid-run: the other times out, names it, and the job ends
  stopped_run stop 2 1
  out=$(cat "$w/stop.out")
  check "mpirun: a stopped rank is named by the others within the timeout, and the job ends" 'ended stop && grep -q "world rank 1" <<<"$out" && grep -qi "timed out\|did not arrive" <<<"$out"'
  [ -n "$victim" ] && kill -9 "$victim" 2>/dev/null
  # a 2x2 pipeline grid (2 stages x 2 replicas), world rank 3 (stage 1 of replica 1) stopped: the
  # ranks that wait for it name it by its world rank, stage and replica, and the message that
  # does (the first failure) is what they print, not a later call's "this group is unusable"
  stopped_run grid 4 3 --pp 2 --microbatches 2
  out=$(cat "$w/grid.out")
  # (its group rank follows where the world has sub-groups: the pipeline's; the whole world's
  # collectives, as the per-step stop agreement, name it by world rank alone)
  named="world rank 3 (stage 1 of 2, replica 1 of 2"
  check "mpirun --pp 2, 4 ranks: a stopped world rank 3 is named with its stage and replica, and the job ends" 'ended grid && grep "timed out after" <<<"$out" | grep -qF "$named"'
  check "mpirun --pp 2, 4 ranks: every rank's message is its first failure (none only says the group is unusable)" 'ended grid && ! grep -q "timed out on this rank earlier" <<<"$out" && ! grep "this group is unusable after" <<<"$out" | grep -qv "timed out after"'
  [ -n "$victim" ] && kill -9 "$victim" 2>/dev/null
fi
check_summary
