#!/usr/bin/env bash
# The zt command's surface: --version, every --help exits 0 on stdout, a misspelt command or
# option gets "did you mean", counts read "1 step" and "2 steps", a config file's BOM is named,
# in-step progress in a log only for long steps, MFU never above 100%, the OpenMP threads'
# spin bounded.
set -u
zt="$1"
. "$(dirname "$0")/check_lib.sh"

out=$("$zt" --version 2>&1); rc=$?
check "zt --version names the release and the commit" '[ $rc -eq 0 ] && grep -q "^zt (zerotrain) [0-9]*\.[0-9]*\.[0-9]* (commit [^;]*; MPI " <<<"$out"'
for c in "train --help" "sample --help" "tokenize --help" "plot --help" "bench --help" "bench step --help" "consolidate --help" "schedule --help" "--help"; do
  out=$("$zt" $c 2>/dev/null); rc=$?
  check "zt $c exits 0 with the usage on stdout" '[ $rc -eq 0 ] && grep -qi "usage" <<<"$out"'
done
out=$("$zt" trian 2>&1); rc=$?
check "a misspelt command: did you mean" '[ $rc -eq 2 ] && grep -q "unknown command .trian.; did you mean .train.?" <<<"$out"'
out=$("$zt" train --stpes 3 2>&1); rc=$?
check "a misspelt option: did you mean" '[ $rc -eq 2 ] && grep -q "unknown option .stpes.; did you mean --steps?" <<<"$out"'
out=$("$zt" train --frobnicate 3 2>&1); rc=$?
check "an option like none: no guess" '[ $rc -eq 2 ] && grep -q "unknown option .frobnicate. (see zt train --help)" <<<"$out"'
printf '\xef\xbb\xbfsteps = 2\n' >"$w/bom.cfg"
out=$("$zt" train --config "$w/bom.cfg" 2>&1); rc=$?
check "a config file's byte-order mark is named as such" '[ $rc -ne 0 ] && grep -q "bom.cfg., line 1: starts with a UTF-8 byte-order mark" <<<"$out"'

small="--batch 4 --seq 32 --eval-batches 1 --sample-len 0"
out=$(ZT_STEP_PROGRESS_S=100000 "$zt" train $small --steps 1 2>&1)
check "one step is '1 step'" 'grep -q ", 1 step, lr" <<<"$out" && grep -q "^zt train: 1 step in" <<<"$out"'
out=$(ZT_STEP_PROGRESS_S=100000 "$zt" train $small --steps 2 --metrics "$w/m.jsonl" 2>&1)
check "two steps are '2 steps'" 'grep -q ", 2 steps, lr" <<<"$out" && grep -q "^zt train: 2 steps in" <<<"$out"'

# MFU is measured against the best sgemm of a few runs, and never shown above 100%: here the
# machine is loaded by two busy loops while the run measures its ceiling
busy() { local end=$((SECONDS + 3)); while [ $SECONDS -lt $end ]; do :; done; }
busy & busy &
"$zt" train $small --steps 400 --log-every 100 --metrics "$w/mfu.jsonl" >"$w/mfu.out" 2>&1
wait
check "MFU never above 100%, even when the machine was busier at start" \
  '[ "$(wc -l <"$w/mfu.jsonl")" -eq 400 ] && python3 -c "import json,sys; sys.exit(max(json.loads(l)[\"mfu\"] for l in open(sys.argv[1])) > 1)" "$w/mfu.jsonl" && ! grep -q "mfu [1-9][0-9][0-9]\.[0-9]%" "$w/mfu.out"'

# tokens/s and MFU on a progress line are the interval's (its tokens over its steps' time), not
# the last step's alone
out=$(ZT_STEP_PROGRESS_S=100000 "$zt" train $small --steps 20 --log-every 10 --metrics "$w/tps.jsonl" 2>&1)
shown=$(sed -n 's/^step *20\/20 .* | \([0-9]*\) tok\/s .*/\1/p' <<<"$out")
check "the progress line's tok/s is the mean over its interval" 'python3 -c "
import json, sys
r = [json.loads(l) for l in open(sys.argv[1])][10:20]
tok = sum(x[\"tokens_per_s\"] * x[\"step_ms\"] for x in r); ms = sum(x[\"step_ms\"] for x in r)
sys.exit(abs(tok / ms - float(sys.argv[2])) > 1.0 + 1e-3 * tok / ms)" "$w/tps.jsonl" "$shown"'

# in a log (not a terminal), a step's parts are shown only past 30 s into it (default): a run of
# steps of seconds prints none
out=$(env -u ZT_STEP_PROGRESS_S "$zt" train --layers 12 --dim 768 --heads 12 --batch 8 --seq 128 --threads 1 --steps 2 --eval-batches 1 --sample-len 0 2>&1)
check "no in-step progress lines for steps shorter than 30 s in a log" '! grep -q "into the step" <<<"$out" && grep -q "^step *2/2" <<<"$out"'
# the OpenMP threads' spin is bounded (they sleep soon when a teammate is set aside by the
# scheduler); a user's own wait policy is left alone
spin_of() { # the GOMP_SPINCOUNT a zt process started with these env settings runs under
  env "$@" "$zt" train $small --steps 100000 --metrics "$w/spin.jsonl" >/dev/null 2>&1 &
  local pid=$! v=""
  for i in $(seq 300); do [ -s "$w/spin.jsonl" ] && break; sleep 0.1; done
  v=$(tr '\0' '\n' </proc/$pid/environ 2>/dev/null | sed -n 's/^GOMP_SPINCOUNT=//p')
  kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$w/spin.jsonl"
  echo "${v:-unset}"
}
check "the OpenMP spin is bounded by default" '[ "$(spin_of -u GOMP_SPINCOUNT -u OMP_WAIT_POLICY)" = 1000 ]'
check "a user's wait policy is kept" '[ "$(spin_of -u GOMP_SPINCOUNT OMP_WAIT_POLICY=active)" = unset ] && [ "$(spin_of GOMP_SPINCOUNT=77)" = 77 ]'
check_summary cli_usage
