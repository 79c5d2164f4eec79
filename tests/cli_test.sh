#!/usr/bin/env bash
# End-to-end checks of the zt command: the placeholder training run learns, and bad
# input gets a clear error and exit code 2.
set -u
zt="$1"
fail=0; pass=0
check() { if eval "$2"; then pass=$((pass+1)); echo "PASS $1"; else fail=$((fail+1)); echo "FAIL $1"; fi; }

out=$("$zt" train --steps 60 --log-every 20 2>&1); rc=$?
check "train learns (loss goes down, exit 0)" '[ $rc -eq 0 ] && grep -q "zt train: loss" <<<"$out"'
check "train prints memory per tag" 'grep -q "PARAM" <<<"$out" && grep -q "ACTIVATION" <<<"$out"'
out=$("$zt" train --bogus 2>&1); rc=$?
check "unknown flag is exit 2 with a message" '[ $rc -eq 2 ] && grep -q "unknown option .--bogus." <<<"$out"'
out=$("$zt" train --steps -3 2>&1); rc=$?
check "bad value is exit 2 with a message" '[ $rc -eq 2 ] && grep -q "needs an integer" <<<"$out"'
out=$("$zt" frobnicate 2>&1); rc=$?
check "unknown command is exit 2" '[ $rc -eq 2 ] && grep -q "unknown command" <<<"$out"'
out=$("$zt" train --help 2>&1); rc=$?
check "help lists every flag" '[ $rc -eq 0 ] && for f in steps batch ctx embd hidden lr seed threads log-every; do grep -q -- "--$f" <<<"$out" || exit 1; done'
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
