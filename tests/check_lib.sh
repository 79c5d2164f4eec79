# The shell tests' harness (sourced): a scratch folder $w removed on exit, check NAME COND
# (COND evaluated; a failure prints the tail of $out, the last command's output), and
# check_summary, whose status is the tests' (0 when every check passed).
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
fail=0; pass=0; out=""
check() { if eval "$2"; then pass=$((pass+1)); echo "PASS $1"; else fail=$((fail+1)); echo "FAIL $1"; echo "$out" | tail -5; fi; }
check_summary() { echo "${1:+$1: }$pass passed, $fail failed"; [ $fail -eq 0 ]; }
# Readers of a --metrics file (JSON lines), one value per line: the losses, the val losses,
# the grad norms.
losses() { sed -n 's/^{"step":[0-9]*,"loss":\([^,]*\),.*/\1/p' "$1"; }
vals() { sed -n 's/.*"val_loss":\([^,]*\),.*/\1/p' "$1"; }
norms() { sed -n 's/.*"grad_norm":\([^,]*\),.*/\1/p' "$1"; }
# losses_near FILE_A FILE_B TOL: the same number of losses, each within TOL relative.
losses_near() {
  local a b
  a=$(losses "$1" | tr '\n' ' ') b=$(losses "$2" | tr '\n' ' ')
  [ -n "$a" ] && python3 - "$a" "$b" "$3" <<'PY'
import sys
a = [float(x) for x in sys.argv[1].split()]
b = [float(x) for x in sys.argv[2].split()]
t = float(sys.argv[3])
sys.exit(0 if len(a) == len(b) and all(abs(x - y) <= t * abs(x) for x, y in zip(a, b)) else 1)
PY
}
