#!/usr/bin/env bash
# The README's five-minute tour, run as printed: every ```sh block that follows a
# "<!-- tour: NAME -->" line, in order, in a scratch folder where build/zt is the zt
# command under test (a link to $1). Nothing in the commands is substituted. What the test
# adds is only the environment: OpenMPI's run-as-root variables and oversubscription for the
# blocks that use mpirun (the README's note), which are skipped with a notice where mpirun
# is missing. The whole test is skipped (exit 77) where /usr/share/common-licenses/GPL-3,
# the tour's text (Debian's base-files), is missing.
set -u
zt="$1"
here="$(cd "$(dirname "$0")" && pwd)"
readme="$here/../README.md"
. "$here/check_lib.sh"
# no in-step progress lines (a loaded machine makes steps slow)
export ZT_STEP_PROGRESS_S=100000

[ -f /usr/share/common-licenses/GPL-3 ] || { echo "SKIP: /usr/share/common-licenses/GPL-3 (the tour's text) is missing"; exit 77; }

# block NAME: the commands of the tour block NAME (the fenced sh block after its marker)
block() {
  awk -v name="$1" '
    $0 == "<!-- tour: " name " -->" { want = 1; next }
    want && /^```sh$/ { inside = 1; next }
    inside && /^```$/ { exit }
    inside { print }' "$readme"
}
names=$(sed -n 's/^<!-- tour: \([a-z-]*\) -->$/\1/p' "$readme")
check "the README has the eight tour blocks" '[ "$(echo $names)" = "train resume finetune llama ranks pipeline offload plan" ]'

mkdir -p "$w/build"
ln -s "$(cd "$(dirname "$zt")" && pwd)/$(basename "$zt")" "$w/build/zt"
have_mpi=0; command -v mpirun >/dev/null 2>&1 && have_mpi=1
# run NAME: runs the block in $w, stopping at its first failing command; the output in $out
run() {
  local cmds; cmds=$(block "$1")
  if grep -q '^mpirun ' <<<"$cmds" && [ $have_mpi -eq 0 ]; then
    echo "SKIP tour block '$1': no mpirun"; return 2
  fi
  echo "--- tour block '$1':"; echo "$cmds"
  out=$(cd "$w" && OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
        OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none \
        bash -e -o pipefail -c "$cmds" 2>&1)
}

run train; rc=$?
check "train: tokenize, train, sample and plot run as printed" '[ $rc -eq 0 ]'
check "train: a checkpoint at step 200 and 200 metrics lines" '[ "$(readlink "$w/tour/ck/latest")" = step-00000200 ] && [ $(wc -l < "$w/tour/run.jsonl") -eq 200 ]'
check "train: the loss went down" 'a=$(losses "$w/tour/run.jsonl" | head -1); b=$(losses "$w/tour/run.jsonl" | tail -1); awk -v a="$a" -v b="$b" "BEGIN{exit !(b < a - 1)}"'
check "train: the plot is an SVG" 'grep -q "<svg" "$w/tour/run.svg"'

run resume; rc=$?
check "resume: continues to step 300" '[ $rc -eq 0 ] && grep -q "resuming .* at step 200" <<<"$out" && [ "$(readlink "$w/tour/ck/latest")" = step-00000300 ] && [ $(wc -l < "$w/tour/run.jsonl") -eq 300 ]'

run finetune; rc=$?
check "finetune: --init-from a transformers folder (config.json + model.safetensors)" '[ $rc -eq 0 ] && [ ! -e "$w/tour/hf/state.json" ] && [ -f "$w/tour/tuned/latest/model.safetensors" ]'

run llama; rc=$?
check "llama: a Llama trains, saves as LlamaForCausalLM and samples" '[ $rc -eq 0 ] && grep -q "\"LlamaForCausalLM\"" "$w/tour/llama/latest/config.json" && grep -q "loss" <<<"$out"'

run ranks; rc=$?
if [ $rc -ne 2 ]; then
  check "ranks: 2-rank FSDP run, sharded checkpoint, consolidated" '[ $rc -eq 0 ] && [ -f "$w/tour/fsdp/latest/index.json" ] && [ -f "$w/tour/single/latest/model.safetensors" ]'
fi

run pipeline; rc=$?
if [ $rc -ne 2 ]; then
  check "pipeline: a 2-rank zb-v run with its timeline, and the simulator" '[ $rc -eq 0 ] && grep -q "<svg" "$w/tour/step.svg" && grep -q "bubble rate" <<<"$out"'
fi

run offload; rc=$?
check "offload: every state on disk under a planned memory limit" '[ $rc -eq 0 ] && grep -q "memory plan: planned for --mem-limit, 100.0 MiB" <<<"$out"'

run plan; rc=$?
check "plan: zt plan writes its plan; zt train --plan auto trains with its choice" \
  '[ $rc -eq 0 ] && grep -q "^chosen: " <<<"$out" && [ -s "$w/tour/plan.json" ] && grep -q "zt train: plan: planned" <<<"$out" && grep -q "predicted vs measured" <<<"$out"'

check_summary readme_tour
