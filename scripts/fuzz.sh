#!/usr/bin/env bash
# Build the libFuzzer targets of tests/fuzz with clang (ASan + UBSan + libFuzzer) in a build
# folder of their own, and run each for SECONDS (default 60) from its seed corpus.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]      targets: json safetensors tokens state sharded config bpe hf_tokenizer schedule plan
#
# Environment: ZT_FUZZ_JOBS=N runs N targets at a time (default 1); ZT_FUZZ_BUILD=DIR (default
# build-fuzz). Inputs a run finds are kept in DIR/corpus/<target> (the seeds in the repository
# stay as they are); crashes, leaks, timeouts and out-of-memory inputs go to DIR/artifacts/,
# and the script names them. Reproduce one with DIR/tests/fuzz/fuzz_<target> ARTIFACT.
# Needs clang with libFuzzer (Debian: clang libclang-rt-dev libomp-dev), installed with
# apt-get when run as root. Exit status: 0 clean, 1 a target failed (or the build did),
# 77 skipped because clang/libFuzzer could not be had.
set -uo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
shift || true
all_targets=(json safetensors tokens state sharded config bpe hf_tokenizer schedule plan)
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=("${all_targets[@]}")
build=${ZT_FUZZ_BUILD:-build-fuzz}
jobs=${ZT_FUZZ_JOBS:-1}

# ---------------------------------------------------------------- toolchain
probe_dir=$(mktemp -d)
trap 'rm -rf "$probe_dir"' EXIT
probe() { # clang with libFuzzer, the sanitizers and OpenMP
  local cc
  for cc in clang clang-14 clang-15 clang-16 clang-17 clang-18; do
    command -v "$cc" >/dev/null 2>&1 || continue
    printf '#include <omp.h>\nint LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) {\n'\
'  (void)d; return (int)n * 0 + omp_get_max_threads() * 0;\n}\n' >"$probe_dir/p.c"
    if "$cc" -fsanitize=fuzzer,address,undefined -fopenmp "$probe_dir/p.c" -o "$probe_dir/p" >/dev/null 2>&1; then
      CC_FUZZ=$cc
      return 0
    fi
  done
  return 1
}
if ! probe; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "fuzz.sh: installing clang, libFuzzer (libclang-rt-dev) and libomp-dev with apt-get"
    apt-get update -qq >/dev/null 2>&1
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang libclang-rt-dev libomp-dev >/dev/null 2>&1 ||
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang libclang-rt-14-dev libomp-dev >/dev/null 2>&1
  fi
  if ! probe; then
    echo "fuzz.sh: SKIPPED: no clang with libFuzzer, ASan/UBSan and OpenMP here (Debian: apt-get install clang" \
      "libclang-rt-dev libomp-dev)"
    exit 77
  fi
fi

# ---------------------------------------------------------------- build
# The library is built as for `make asan` (ZT_SANITIZE) plus libFuzzer's coverage hooks, at -O1.
# -Wno-pass-failed: some `omp simd` loops do not vectorise under clang (see DESIGN.md).
echo "fuzz.sh: building the fuzz targets with $CC_FUZZ in $build/"
mkdir -p "$build"
log=$build/build.log
if ! CC=$CC_FUZZ cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Fuzz -DZT_SANITIZE=ON -DZT_FUZZ=ON -DZT_WITH_MPI=OFF \
  "-DCMAKE_C_FLAGS=-O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer-no-link -Wno-pass-failed" >"$log" 2>&1 ||
  ! cmake --build "$build" -j"$(nproc)" --target fuzz_targets >>"$log" 2>&1; then
  tail -30 "$log"
  echo "fuzz.sh: the build failed (log: $log)"
  exit 1
fi

# ---------------------------------------------------------------- run
mkdir -p "$build/artifacts" "$build/logs"
run_one() {
  local t=$1 seeds=tests/fuzz/corpus/$1 work=$build/corpus/$1 dict=()
  mkdir -p "$work"
  [ -f "tests/fuzz/$t.dict" ] && dict=(-dict="tests/fuzz/$t.dict")
  # -rss_limit_mb: a parser must not need GBs for a small input; -timeout: nor seconds.
  ZT_ALLOC_CACHE_MB=0 OMP_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=1 \
    "$build/tests/fuzz/fuzz_$t" "$work" "$seeds" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
    -max_len=16384 -print_final_stats=1 "${dict[@]}" -artifact_prefix="$build/artifacts/$t-" >"$build/logs/$t.log" 2>&1
  local rc=$?
  local stats
  stats=$(grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb" "$build/logs/$t.log" |
    sed -E 's/stat::number_of_executed_units: */executions /; s/stat::peak_rss_mb: */peak RSS MB /' | paste -sd, -)
  local cov
  cov=$(grep -E "^#[0-9]+.*(DONE|pulse|NEW|REDUCE).*cov:" "$build/logs/$t.log" | tail -1 |
    sed -E 's/.*cov: ([0-9]+) ft: ([0-9]+).*corp: ([0-9]+)\/.*/cov \1, features \2, corpus \3/')
  if [ $rc -eq 0 ]; then
    echo "fuzz $t: ok ($secs s; $stats; $cov)"
  else
    echo "fuzz $t: FAILED (exit $rc; log $build/logs/$t.log):"
    grep -E "ERROR: |SUMMARY: |runtime error|zt fuzz:|Test unit written" "$build/logs/$t.log" | head -8 | sed 's/^/  /'
  fi
  return $rc
}

failed=0
running=0
pids=()
names=()
for t in "${targets[@]}"; do
  if [ ! -x "$build/tests/fuzz/fuzz_$t" ]; then
    echo "fuzz.sh: no target '$t' (targets: ${all_targets[*]})"
    failed=1
    continue
  fi
  run_one "$t" &
  pids+=($!)
  names+=("$t")
  running=$((running + 1))
  if [ $running -ge "$jobs" ]; then
    wait "${pids[0]}" || failed=1
    pids=("${pids[@]:1}")
    names=("${names[@]:1}")
    running=$((running - 1))
  fi
done
for p in "${pids[@]}"; do wait "$p" || failed=1; done
if [ $failed -ne 0 ]; then
  echo "fuzz.sh: FAILED: see the messages above; inputs are in $build/artifacts/"
  exit 1
fi
echo "fuzz.sh: every target ran clean"
