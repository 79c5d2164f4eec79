#!/usr/bin/env bash
# End-to-end checks of zt plot on small metrics files written here: with and without
# validation loss, one line, NaN/inf values, equal values, several ranks, a recompute
# benchmark file, a planner accuracy file (--plan), and bad input (clear message,
# non-zero exit code, no crash). Every SVG must be well-formed, carry round tick labels
# (1, 2, 5 x 10^k apart), and keep every legend box inside its viewBox.
# usage: tests/plot_test.sh ZT_BINARY
set -u
zt="$1"
. "$(dirname "$0")/check_lib.sh"

tags=(PARAM GRAD OPTIM ACTIVATION COMM TEMP)
# One metrics line as zt train writes it: line STEP LOSS TOKENS_PER_S [VAL_LOSS [WORLD]]
line() {
  local step=$1 loss=$2 tps=$3 val=${4:-} world=${5:-1} mem="" ranks="" i r
  for i in "${!tags[@]}"; do mem+="\"${tags[$i]}\":{\"current\":0,\"peak\":$(( (i + 1) * 1048576 + step * 4096 ))},"; done
  for ((r = 0; r < world; r++)); do
    [ $r -gt 0 ] && ranks+=","
    ranks+="{\"rank\":$r,\"mem_peak\":{\"PARAM\":1,\"total\":$(( (20 + r) * 1048576 + step * 8192 ))},\"peak_rss\":1,\"comm_bytes\":0,\"comm_calls\":0,\"comm_wait_ms\":0.000}"
  done
  printf '{"step":%s,"loss":%s,"lr":0.001,"grad_norm":1,"step_ms":10,"tokens_per_s":%s,"mfu":0.5' "$step" "$loss" "$tps"
  [ -n "$val" ] && printf ',"val_loss":%s' "$val"
  printf ',"mem":{%s"total":{"current":0,"peak":%d}},"act_peak_predicted":0,"peak_rss":1,"world":%d,"shard":"full","ranks":[%s]}\n' \
    "$mem" $(( 21 * 1048576 + step * 8192 )) "$world" "$ranks"
}

# well-formed XML: xmllint when present, else balanced elements of the kinds zt writes
well_formed() {
  if command -v xmllint >/dev/null; then xmllint --noout "$1" 2>/dev/null; return; fi
  head -c 200 "$1" | grep -q "<svg " && tail -1 "$1" | grep -q "^</svg>$" &&
    awk '{ o += gsub(/<(text|g|svg)[ >]/, "&"); c += gsub(/<\/(text|g|svg)>/, "&") } END { exit !(o == c && o > 0) }' "$1" &&
    ! grep -q "&[^a-z#]" "$1" && ! grep -Eq "='[^']*'[a-z]" "$1"
}
# every <rect class='legend'> lies inside the viewBox (and there is at least one)
legends_inside() {
  awk '
    match($0, /viewBox=.0 0 [0-9.]+ [0-9.]+/) { split(substr($0, RSTART + 9, RLENGTH - 9), v, " "); W = v[3]; H = v[4] }
    /<rect class=.legend./ {
      n++
      x = attr("x"); y = attr("y"); w = attr("width"); h = attr("height")
      if (!(x >= 0 && y >= 0 && x + w <= W && y + h <= H)) { bad++; print "legend outside the viewBox: " x, y, w, h, "in", W, H }
    }
    function attr(a,   s) { if (!match($0, " " a "=.[-0-9.]+")) return -1e9; s = substr($0, RSTART + length(a) + 3, RLENGTH - length(a) - 3); return s + 0 }
    END { exit !(n > 0 && W > 0 && !bad) }' "$1"
}
# tick labels of each axis of each panel step by one round value: 1, 2 or 5 x 10^k
ticks_round() {
  awk '
    function flush(   i, d, e, m) {
      for (i = 2; i <= n; i++) {
        d = v[i] - v[i - 1]
        if (i == 2) step = d
        if (d <= 0 || (d - step) > 1e-9 * step || (step - d) > 1e-9 * step) { bad++; print "uneven ticks", v[i - 1], v[i] }
      }
      if (n >= 2) { e = 10 ^ int(log(step) / log(10) + (step < 1 ? -1 : 0)); m = step / e
        if (m > 9.999) m /= 10
        if ((m < 0.999 || m > 1.001) && (m < 1.999 || m > 2.001) && (m < 4.999 || m > 5.001)) { bad++; print "tick step not round:", step } }
      n = 0; seen++
    }
    /class=.panel-title./ || /class=.tick-x./ && cls != "x" || /class=.tick-y./ && cls != "y" { if (n) flush() }
    /class=.tick-[xy]./ {
      cls = ($0 ~ /tick-x/) ? "x" : "y"
      s = $0; sub(/.*class=.tick-[xy].[^>]*>/, "", s); sub(/<.*/, "", s)
      gsub(/[^-0-9.]/, "", s); v[++n] = s + 0
    }
    END { if (n) flush(); exit !(seen > 0 && !bad) }' "$1"
}
# the ticks labels of one class, space-separated
ticks() { grep -o "class='tick-$2'[^>]*>[^<]*<" "$1" | sed "s/.*>//; s/<$//" | tr '\n' ' '; }
svg_ok() { well_formed "$1" && legends_inside "$1" && ticks_round "$1" && ! grep -Eq "='[^']*(nan|inf)" "$1"; }

# --- a run with validation loss every 10 steps
for s in $(seq 1 60); do
  line "$s" "$(awk -v s="$s" 'BEGIN { printf "%.6f", 2.6 + 3 * exp(-s / 12) }')" "$((24000 + s % 7 * 100)).5" \
    "$( [ $((s % 10)) -eq 0 ] && awk -v s="$s" 'BEGIN { printf "%.6f", 2.7 + 3 * exp(-s / 12) }')"
done > "$w/run.jsonl"
out=$("$zt" plot "$w/run.jsonl" --out "$w/run.svg" 2>&1); rc=$?
check "plot exits 0 and says what it wrote" '[ $rc -eq 0 ] && grep -q "wrote .*run.svg (60 steps)" <<<"$out"'
check "the SVG is well-formed, with round ticks and legends inside the picture" 'svg_ok "$w/run.svg"'
check "validation loss: its own series, markers joined by a line" \
  'awk "/<title>validation loss<\/title>/{on=1} on&&/<polyline/{l=1} on&&/<circle/{c++} on&&/<\/g>/{on=0} END{exit !(l && c == 6)}" "$w/run.svg"'
check "train loss series beside it, one legend entry each" 'grep -q "<title>train loss</title>" "$w/run.svg" && [ $(grep -c ">validation loss</text>" "$w/run.svg") -eq 1 ]'
check "step ticks at 0, 5, ..., 60" '[[ "$(ticks "$w/run.svg" x)" == "0 5 10 15 20 25 30 35 40 45 50 55 60 0 "* ]]'
check "tokens/s panel with k-labelled ticks from 0" 'grep -q ">throughput</text>" "$w/run.svg" && grep -q "<title>tokens/s</title>" "$w/run.svg" && grep -q ">tokens/s</text>" "$w/run.svg" && [[ "$(ticks "$w/run.svg" y)" == *" 0 5k 10k 15k 20k 25k "* ]]'
check "memory panel with MiB ticks and the tags" 'grep -q ">peak memory per tag" "$w/run.svg" && grep -q "class=.tick-y.[^>]*>10 MiB<" "$w/run.svg" && grep -q "<title>ACTIVATION</title>" "$w/run.svg" && grep -q "<title>total</title>" "$w/run.svg"'
check "axis titles" 'grep -q "class=.axis-title.[^>]*>step<" "$w/run.svg" && grep -q "class=.axis-title.[^>]*>loss<" "$w/run.svg"'
check "a single-rank file has no per-rank panel" '! grep -q "per rank" "$w/run.svg"'

# --- no validation loss at all
for s in $(seq 1 30); do line "$s" "3.$((99 - s))" 1000; done > "$w/noval.jsonl"
out=$("$zt" plot "$w/noval.jsonl" --out "$w/noval.svg" 2>&1); rc=$?
check "without val_loss: exits 0, no validation series" '[ $rc -eq 0 ] && svg_ok "$w/noval.svg" && ! grep -q "validation loss" "$w/noval.svg" && grep -q "<title>train loss</title>" "$w/noval.svg"'

# --- one line
line 7 3.25 20000 3.5 > "$w/one.jsonl"
out=$("$zt" plot "$w/one.jsonl" --out "$w/one.svg" 2>&1); rc=$?
check "one line: exits 0, points drawn as markers" '[ $rc -eq 0 ] && svg_ok "$w/one.svg" && [ $(grep -c "<circle" "$w/one.svg") -ge 3 ] && grep -q "(1 step)" <<<"$out"'

# --- NaN and inf values, a val_loss of null
{ for s in 1 2 3; do line $s 3.$s 2000; done; line 4 nan inf; line 5 -nan 2000 null; for s in 6 7 8; do line $s 2.$s 2000 2.9; done; } > "$w/nan.jsonl"
out=$("$zt" plot "$w/nan.jsonl" --out "$w/nan.svg" 2>&1); rc=$?
check "NaN/inf/null values are left out and counted" '[ $rc -eq 0 ] && svg_ok "$w/nan.svg" && grep -q "4 NaN/inf or non-numeric values left out" <<<"$out"'
check "the train loss line breaks at the NaNs (two pieces)" \
  'awk "/<title>train loss<\/title>/{on=1} on&&/<polyline/{n++} on&&/<\/g>/{on=0} END{exit n != 2}" "$w/nan.svg"'
for s in 1 2; do line $s nan nan; done > "$w/allnan.jsonl"
out=$("$zt" plot "$w/allnan.jsonl" --out "$w/allnan.svg" 2>&1); rc=$?
check "no finite value at all: a picture that says so" '[ $rc -eq 0 ] && well_formed "$w/allnan.svg" && grep -q "no finite values" "$w/allnan.svg"'

# --- all values equal
for s in $(seq 1 10); do line "$s" 2.5 1000 2.5; done > "$w/flat.jsonl"
out=$("$zt" plot "$w/flat.jsonl" --out "$w/flat.svg" 2>&1); rc=$?
check "equal values: an axis around them" '[ $rc -eq 0 ] && svg_ok "$w/flat.svg" && [[ "$(ticks "$w/flat.svg" y)" == "2.2 2.3 2.4 2.5 2.6 2.7 2.8 "* ]]'

# --- several ranks
for s in $(seq 1 20); do line "$s" "3.$((50 - s))" 40000 "" 4; done > "$w/ranks.jsonl"
out=$("$zt" plot "$w/ranks.jsonl" --out "$w/ranks.svg" 2>&1); rc=$?
check "multi-rank: a per-rank panel with a series per rank" '[ $rc -eq 0 ] && svg_ok "$w/ranks.svg" && grep -q ">peak memory per rank" "$w/ranks.svg" && [ $(grep -c "<title>rank [0-3]</title>" "$w/ranks.svg") -eq 4 ] && grep -q "4 ranks, shard full" "$w/ranks.svg"'
for s in $(seq 1 5); do line "$s" 3 40000 "" 12; done > "$w/ranks12.jsonl"
out=$("$zt" plot "$w/ranks12.jsonl" --out "$w/ranks12.svg" 2>&1); rc=$?
check "many ranks: smallest and largest" '[ $rc -eq 0 ] && svg_ok "$w/ranks12.svg" && grep -q "<title>largest rank</title>" "$w/ranks12.svg"'

# --- text from the file is escaped
line 1 3 1000 > "$w/a&b<c>.jsonl"
out=$("$zt" plot "$w/a&b<c>.jsonl" --out "$w/esc.svg" 2>&1); rc=$?
check "a file name with & < > is escaped in the title" '[ $rc -eq 0 ] && well_formed "$w/esc.svg" && grep -q "a&amp;b&lt;c&gt;.jsonl" "$w/esc.svg"'

# --- zt plot --recompute
cat > "$w/bench.jsonl" <<'EOF'
{"bench":"step","model":"m","params":124000000,"batch":4,"seq":256,"recompute":"none","recompute_budget":0,"ms_per_step":1000,"peak_rss_bytes":2000,"peak_bytes":{"PARAM":1,"ACTIVATION":600,"total":2}}
{"bench":"step","model":"m","params":124000000,"batch":4,"seq":256,"recompute":"full","recompute_budget":0,"ms_per_step":1300,"peak_rss_bytes":1500,"peak_bytes":{"PARAM":1,"ACTIVATION":90,"total":2}}
{"bench":"step","model":"m","params":124000000,"batch":4,"seq":256,"recompute":"budget","recompute_budget":300,"ms_per_step":1100,"peak_rss_bytes":1800,"peak_bytes":{"PARAM":1,"ACTIVATION":290,"total":2}}
{"bench":"step","model":"m","params":124000000,"batch":4,"seq":1024,"recompute":"none","recompute_budget":0,"ms_per_step":4000,"peak_rss_bytes":5000,"peak_bytes":{"PARAM":1,"ACTIVATION":2400,"total":2}}
{"bench":"step","model":"m","params":124000000,"batch":4,"seq":1024,"recompute":"selective","recompute_budget":0,"ms_per_step":4200,"peak_rss_bytes":4000,"peak_bytes":{"PARAM":1,"ACTIVATION":1300,"total":2}}
EOF
out=$("$zt" plot --recompute "$w/bench.jsonl" --out "$w/rc.svg" 2>&1); rc=$?
check "recompute: ratios printed, SVG well-formed, legend inside, round ticks" '[ $rc -eq 0 ] && grep -q "\"mode\":\"full\",\"time_ratio\":1.300,\"act_ratio\":0.150" <<<"$out" && grep -q "\"act_over_budget\":0.967" <<<"$out" && svg_ok "$w/rc.svg"'
check "recompute: ratio ticks and a legend entry per group" '[[ "$(ticks "$w/rc.svg" x)" == *"1.00x 1.05x 1.10x"* ]] && grep -q ">124M params, B=4, T=1024</text>" "$w/rc.svg" && [ $(grep -c "<rect class=.legend." "$w/rc.svg") -eq 1 ]'

# --- zt plot --plan: 6 configurations, a line that is not JSON and one without measured.step_s
mib=1048576
acc() { # acc CONFIG RANKS PRED_RSS_MIB MEAS_RSS_MIB PRED_S MEAS_S
  printf '{"config":"%s","model":"gpt2-124m","ranks":%d,"predicted":{"rss":%d,"accounted":1,"step_s":%s},"measured":{"rss":%d,"accounted":1,"step_s":%s},"extra":[1,{"rss":5}]}\n' \
    "$1" "$2" $(($3 * mib)) "$5" $(($4 * mib)) "$6"
}
{ acc "single" 1 1000 1020 1.00 1.10   # rss -2.0%, step -9.1%
  acc "dp2 full" 2 1500 1400 1.20 1.30  # rss +7.1% (out), step -7.7%
  echo 'not json'
  acc "dp2 full, recompute selective" 2 1200 1190 1.50 1.20  # rss +0.8%, step +25.0% (out)
  printf '{"config":"no step","ranks":1,"predicted":{"rss":1,"step_s":1},"measured":{"rss":1}}\n'
  acc "dp4 zero3" 4 800 820 2.00 2.10   # rss -2.4%, step -4.8%
  acc "dp4 zero3 offload" 4 600 610 3.00 2.80  # rss -1.6%, step +7.1%
  acc "dp4 edge" 4 951 1000 1.00 1.00; } > "$w/acc.jsonl"  # rss -4.9% (in: measured / predicted is 1.052), step 0
out=$("$zt" plot --plan "$w/acc.jsonl" --out "$w/plan.svg" 2>&1); rc=$?
check "plan: exits 0, counts the 2 skipped lines, says what it wrote" \
  '[ $rc -eq 0 ] && grep -q "2 lines skipped (first: line 3)" <<<"$out" && grep -q "wrote .*plan.svg (6 configurations)" <<<"$out"'
check "plan: the SVG is well-formed, with round ticks and legends inside the picture" 'svg_ok "$w/plan.svg"'
check "plan: two panels, RSS and step time" \
  '[ $(grep -c "class=.panel-title." "$w/plan.svg") -eq 2 ] && grep -q ">peak RSS: predicted vs measured<" "$w/plan.svg" && grep -q ">step time: predicted vs measured<" "$w/plan.svg"'
check "plan: one dot per configuration and panel (legend swatches aside)" \
  '[ $(awk "/<g class=.legend./{l=1} !l&&/<circle/{n++} l&&/<\/g>/{l=0} END{print n+0}" "$w/plan.svg") -eq 12 ]'
check "plan: a series per rank count, in the legend" \
  '[ $(grep -c "<title>1 rank</title>" "$w/plan.svg") -eq 2 ] && [ $(grep -c "<title>2 ranks</title>" "$w/plan.svg") -eq 2 ] && [ $(grep -c "<title>4 ranks</title>" "$w/plan.svg") -eq 2 ] && [ $(grep -c ">4 ranks</text>" "$w/plan.svg") -eq 2 ]'
check "plan: y = x and the dashed target bands" \
  '[ $(grep -c "<title>y = x</title>" "$w/plan.svg") -eq 2 ] && grep -q ">target ±5%</text>" "$w/plan.svg" && grep -q ">target ±15%</text>" "$w/plan.svg" && [ $(grep -c "stroke-dasharray=.6 4. points" "$w/plan.svg") -eq 4 ]'
check "plan: notes count the dots within the band and name the worst" \
  'grep -q ">5 of 6 within ±5%; worst +7.1%: dp2 full<" "$w/plan.svg" && grep -q ">5 of 6 within ±15%; worst +25.0%: dp2 full, recompute selective<" "$w/plan.svg"'
check "plan: both axes of each panel have the same ticks" '[ -n "$(ticks "$w/plan.svg" x)" ] && [ "$(ticks "$w/plan.svg" x)" == "$(ticks "$w/plan.svg" y)" ]'

# --- bad input
out=$("$zt" plot "$w/missing.jsonl" --out "$w/x.svg" 2>&1); rc=$?
check "missing file: exit 1, names it" '[ $rc -eq 1 ] && grep -q "cannot open .*missing.jsonl" <<<"$out"'
printf 'step,loss\n1,2.5\n' > "$w/csv.jsonl"
out=$("$zt" plot "$w/csv.jsonl" --out "$w/x.svg" 2>&1); rc=$?
check "not JSON lines: exit 1, line number" '[ $rc -eq 1 ] && grep -q "csv.jsonl:1 is not a JSON object" <<<"$out"'
{ line 1 3 100; printf '{"step":2,"loss":3\n'; } > "$w/cut.jsonl"
out=$("$zt" plot "$w/cut.jsonl" --out "$w/x.svg" 2>&1); rc=$?
check "a truncated line: exit 1, line number" '[ $rc -eq 1 ] && grep -q "cut.jsonl:2 is not a JSON object" <<<"$out"'
printf '{"loss":2.5,"val":{"step":3}}\n' > "$w/nostep.jsonl"
out=$("$zt" plot "$w/nostep.jsonl" --out "$w/x.svg" 2>&1); rc=$?
check "no step field (a nested one does not count): exit 1" '[ $rc -eq 1 ] && grep -q "nostep.jsonl:1 has no \"step\" field" <<<"$out"'
out=$("$zt" plot "$w/bench.jsonl" --out "$w/x.svg" 2>&1); rc=$?
check "a benchmark file without --recompute: exit 1, points at --recompute" '[ $rc -eq 1 ] && grep -q "zt plot --recompute" <<<"$out"'
: > "$w/empty.jsonl"
out=$("$zt" plot "$w/empty.jsonl" --out "$w/x.svg" 2>&1); rc=$?
check "empty file: exit 1" '[ $rc -eq 1 ] && grep -q "holds no metrics lines" <<<"$out"'
head -c 4096 /dev/urandom > "$w/random.bin"
out=$("$zt" plot "$w/random.bin" --out "$w/x.svg" 2>&1); rc=$?
check "binary garbage: exit 1, no crash" '[ $rc -eq 1 ]'
out=$("$zt" plot --recompute "$w/run.jsonl" --out "$w/x.svg" 2>&1); rc=$?
check "a metrics file given to --recompute: exit 1" '[ $rc -eq 1 ] && grep -q "not a zt bench step line" <<<"$out"'
out=$("$zt" plot "$w/run.jsonl" --out "$w/no/such/dir/x.svg" 2>&1); rc=$?
check "unwritable output: exit 1" '[ $rc -eq 1 ] && grep -q "cannot write" <<<"$out"'
: > "$w/noacc.jsonl"
out=$("$zt" plot --plan "$w/noacc.jsonl" --out "$w/noacc.svg" 2>&1); rc=$?
check "plan, empty file: exit 1, no usable line, no SVG" '[ $rc -eq 1 ] && grep -q "holds no usable planner accuracy line" <<<"$out" && [ ! -e "$w/noacc.svg" ]'
{ echo 'not json'; printf '{"config":"x","ranks":2,"predicted":{"rss":"big","step_s":1},"measured":{"rss":1,"step_s":1}}\n'; } > "$w/badacc.jsonl"
out=$("$zt" plot --plan "$w/badacc.jsonl" --out "$w/x.svg" 2>&1); rc=$?
check "plan, no usable line: exit 1, skipped lines counted" '[ $rc -eq 1 ] && grep -q "2 lines skipped" <<<"$out" && grep -q "no usable planner accuracy line" <<<"$out"'
out=$("$zt" plot "$w/acc.jsonl" --out "$w/x.svg" 2>&1); rc=$?
check "an accuracy file without --plan: exit 1, points at --plan" '[ $rc -eq 1 ] && grep -q "zt plot --plan" <<<"$out"'
out=$("$zt" plot "$w/run.jsonl" 2>&1); rc=$?
check "no --out: usage, exit 2" '[ $rc -eq 2 ] && grep -q "usage" <<<"$out"'

check_summary plot_test
