#!/usr/bin/env bash
# End-to-end checks of zt schedule: a generator's timeline and summary, --json, --out and
# --check of the file it wrote, --check of a broken file (the rule named, exit 1), a too-small
# M (the minimum named), --svg well-formed, a file as --schedule, bad options (exit 2); bad
# input of every kind (issue 25: devices, FIFOs, sizes, NUL bytes, a BOM, costs) refused with
# a clear message, and a file that --check accepts lowers to a valid schedule.
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

# ---- issue 25, item 15: every bad input gets a clear error, never a crash or a hang
# refused NAME PATH PATTERN: --check PATH exits 1 with a message matching PATTERN (timeout: the
# old reader blocked on a FIFO and read /dev/zero forever); refused_text NAME TEXT PATTERN: the
# same for a file holding TEXT (a printf format)
refused() {
  pat=$3
  out=$(timeout 60 "$zt" schedule --check "$2" 2>&1); rc=$?
  check "$1" '[ $rc -eq 1 ] && echo "$out" | grep -q "$pat"'
}
refused_text() { printf "$2" >"$w/in.sched"; refused "$1" "$w/in.sched" "$3"; }
refused "--check /dev/zero" /dev/zero "it is a character device, not a regular file"
mkfifo "$w/fifo"
refused "--check FIFO" "$w/fifo" "it is a FIFO (named pipe), not a regular file"
out=$(timeout 60 "$zt" schedule --schedule "$w/fifo" 2>&1); rc=$?
check "--schedule FIFO" '[ $rc -eq 1 ] && echo "$out" | grep -q "it is a FIFO (named pipe)"'
refused_text "huge microbatches in a 60-byte file" 'zt-pipeline ranks=2 chunks=1 microbatches=100000000\n0: 0F0\n1: 1F0\n' \
  "microbatches=.100000000. must be an integer in \[1, 100000\]"
refused_text "huge ranks" 'zt-pipeline ranks=1000000000 chunks=1 microbatches=1\n' \
  "ranks=.1000000000. must be an integer in \[1, 1024\]"
refused_text "huge chunks" 'zt-pipeline ranks=3 chunks=1000000000 microbatches=1\n0: 0F0\n1: 1F0\n2: 2F0\n' \
  "chunks=.1000000000. must be an integer in \[1, 64\]"
check "huge chunks: no overflowed stage count" '! echo "$out" | grep -q -- "-[0-9]"'
refused_text "a NUL byte is named with its line" 'zt-pipeline ranks=1 chunks=1 microbatches=1\n0: 0F0 # \0\n0BW0\n' \
  "in.sched., line 2: holds a NUL byte"
refused_text "a BOM is named as such" '\xef\xbb\xbfzt-pipeline ranks=1 chunks=1 microbatches=1\n0: 0F0 0BW0\n' \
  "starts with a UTF-8 byte-order mark (BOM"
out=$("$zt" schedule --schedule 1f1b --stages 1024 --microbatches 100000 2>&1); rc=$?
check "1f1b at the flags' largest: refused with the memory it needs" '[ $rc -eq 1 ] && echo "$out" | grep -q "102400000 (stage, microbatch) pairs; checking and simulating it would take about 30.5 GiB"'
# linear checks: 600,000 actions, lowered and validated (the quadratic order check took hours)
out=$("$zt" schedule --schedule 1f1b --stages 2 --microbatches 100000 --lower --json 2>&1); rc=$?
check "--lower at 100,000 microbatches" '[ $rc -eq 0 ] && echo "$out" | grep -q "\"step_time\":300003,"'
for c in nan,1,1,0 1,inf,1,0 1,1,1e308,0 1,1,1,-1; do
  out=$("$zt" schedule --schedule 1f1b --stages 2 --microbatches 2 --costs $c 2>&1); rc=$?
  check "--costs $c refused" '[ $rc -eq 2 ] && echo "$out" | grep -q "four numbers in \[0, 1e+12\]"'
done

# ---- item 16: --check validates as zt train does (lowered too), and lowering keeps a valid
# schedule valid: rank 1 takes the activations in the reverse of the order they were sent
printf 'zt-pipeline ranks=2 chunks=1 microbatches=4\n0: 0F0 0F1 0F2 0F3 0BW3 0BW2 0BW1 0BW0\n1: 1F3 1BW3 1F2 1BW2 1F1 1BW1 1F0 1BW0\n' > "$w/rev.sched"
out=$("$zt" schedule --check "$w/rev.sched" 2>&1); rc=$?
check "--check of a compute-only file checks its lowered form" '[ $rc -eq 0 ] && echo "$out" | grep -q "valid (2 ranks, 1 chunk per rank, 4 microbatches; with its sends and receives too)"'
out=$("$zt" schedule --schedule "$w/rev.sched" --lower --out "$w/rev-low.sched" --json 2>&1); rc=$?
check "it lowers to a valid schedule" '[ $rc -eq 0 ] && grep -q "^1: 1RECV_F0 1RECV_F1 1RECV_F2 1RECV_F3 1F3 " "$w/rev-low.sched"'
out=$("$zt" schedule --check "$w/rev-low.sched" 2>&1); rc=$?
check "the lowered file checks" '[ $rc -eq 0 ] && echo "$out" | grep -q "valid (2 ranks, 1 chunk per rank, 4 microbatches)"'

check_summary
