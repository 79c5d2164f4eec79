#!/usr/bin/env bash
# End-to-end checks of zt schedule: a generator's timeline and summary, --json, --out and
# --check of the file it wrote, --check of a broken file (the rule named, exit 1), a too-small
# M (the minimum named), --svg well-formed, a file as --schedule, bad options (exit 2).
# usage: tests/schedule_cli_test.sh ZT_BINARY
set -u
zt="$1"
. "$(dirname "$0")/check_lib.sh"

out=$("$zt" schedule --schedule 1f1b --stages 4 --microbatches 8 2>&1); rc=$?
check "1f1b timeline" '[ $rc -eq 0 ] && echo "$out" | grep -q "^rank  3 |" && echo "$out" | grep -q "bubble rate 27.27%"'

out=$("$zt" schedule --schedule zb-h1 --stages 4 --microbatches 8 --json --out "$w/zb.txt" --svg "$w/zb.svg" 2>&1); rc=$?
check "json" '[ $rc -eq 0 ] && echo "$out" | grep -q "\"step_time\":27," && echo "$out" | grep -q "\"peak_activations\":\[4,4,4,4\]" && echo "$out" | grep -q "\"bubble_rate\":0.111"'
check "svg" '[ -s "$w/zb.svg" ] && head -c 5 "$w/zb.svg" | grep -q "<svg" && tail -1 "$w/zb.svg" | grep -q "</svg>"'

out=$("$zt" schedule --check "$w/zb.txt" 2>&1); rc=$?
check "check valid" '[ $rc -eq 0 ] && echo "$out" | grep -q "valid"'

sed 's/ 2W5 / /' "$w/zb.txt" > "$w/bad.txt"
out=$("$zt" schedule --check "$w/bad.txt" 2>&1); rc=$?
check "check names the rule" '[ $rc -eq 1 ] && echo "$out" | grep -q "rank 2: 2B5 has no 2W5 (W is missing"'

out=$("$zt" schedule --schedule "$w/zb.txt" --lower --json 2>&1); rc=$?
check "file as schedule, lowered" '[ $rc -eq 0 ] && echo "$out" | grep -q "\"step_time\":27,"'

out=$("$zt" schedule --schedule dualpipev --stages 4 --microbatches 4 2>&1); rc=$?
check "too few microbatches" '[ $rc -eq 1 ] && echo "$out" | grep -q "needs at least 8 microbatches"'

out=$("$zt" schedule --schedule zb-h1 --stages 4 --microbatches 8 --costs 1,1 2>&1); rc=$?
check "bad costs" '[ $rc -eq 2 ] && echo "$out" | grep -q "four numbers"'

out=$("$zt" schedule --schedule nope --stages 4 --microbatches 8 2>&1); rc=$?
check "unknown schedule" '[ $rc -eq 1 ] && echo "$out" | grep -q "unknown schedule .nope."'

check_summary
