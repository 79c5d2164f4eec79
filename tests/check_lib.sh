# The shell tests' harness (sourced): a scratch folder $w removed on exit, check NAME COND
# (COND evaluated; a failure prints the tail of $out, the last command's output), and
# check_summary, whose status is the tests' (0 when every check passed).
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
fail=0; pass=0; out=""
check() { if eval "$2"; then pass=$((pass+1)); echo "PASS $1"; else fail=$((fail+1)); echo "FAIL $1"; echo "$out" | tail -5; fi; }
check_summary() { echo "${1:+$1: }$pass passed, $fail failed"; [ $fail -eq 0 ]; }
