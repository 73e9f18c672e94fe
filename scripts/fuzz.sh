#!/usr/bin/env bash
# The libFuzzer targets (tests/fuzz; CDCVIEW_FUZZ=ON), from the ASan+UBSan build:
#   scripts/fuzz.sh TARGET SECONDS   runs fuzz_TARGET for SECONDS, libFuzzer's progress shown
#   scripts/fuzz.sh all SECONDS      runs every target for SECONDS each, two at a time (the CI
#                                    stage); fails if any crashed, naming the input that did
#   scripts/fuzz.sh list             the targets
# Each run starts from the checked-in corpus tests/fuzz/corpus/TARGET, which it only reads, and
# keeps what it finds in a scratch corpus outside the tracked tree
# (${CDCVIEW_FUZZ_WORK:-BUILD/fuzz-work}/TARGET/corpus, kept between runs so longer local runs
# build on earlier ones). A crash input lands in .../TARGET/crashes/; to keep one as a
# regression input, copy it to tests/fuzz/corpus/TARGET/regression-<what> with the fix.
#
# The build is ${CDCVIEW_SANITIZE_BUILD_DIR:-build-asan}, configured as scripts/sanitize.sh asan
# configures it when absent (or when it was configured without the fuzz targets); only the fuzz
# targets are built here. CDCVIEW_JOBS: build jobs (default: all cores).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
build="${CDCVIEW_SANITIZE_BUILD_DIR:-$here/build-asan}"
work="${CDCVIEW_FUZZ_WORK:-$build/fuzz-work}"
jobs="${CDCVIEW_JOBS:-$(nproc)}"
clang="${CDCVIEW_CLANG:-clang++-14}"
export CCACHE_DIR="${CCACHE_DIR:-$here/.cache/ccache}"
targets=(dynamodb_streams_json debezium_json protobuf_event config_yaml page_token
         consistency_token key_codec item_codec h2_framing dynamodb_expression)

usage() {
  echo "usage: scripts/fuzz.sh TARGET|all SECONDS   (targets: ${targets[*]})" >&2
  exit 2
}
[ "${1:-}" = list ] && { printf '%s\n' "${targets[@]}"; exit 0; }
[ $# -eq 2 ] || usage
what="$1"
seconds="$2"
[[ "$seconds" =~ ^[0-9]+$ ]] && [ "$seconds" -gt 0 ] || usage
if [ "$what" = all ]; then
  run=("${targets[@]}")
elif printf '%s\n' "${targets[@]}" | grep -qx -- "$what"; then
  run=("$what")
else
  echo "[fuzz] no target '$what'" >&2
  usage
fi

if ! command -v "$clang" >/dev/null 2>&1; then
  echo "[fuzz] $clang not found: run scripts/install-deps.sh (it installs clang-14 and libFuzzer)" >&2
  exit 1
fi
if [ ! -f "$build/build.ninja" ] || ! grep -q '^CDCVIEW_FUZZ:BOOL=ON' "$build/CMakeCache.txt"; then
  echo "[fuzz] configuring $build with $clang (as scripts/sanitize.sh asan does)"
  cmake -S "$here" -B "$build" -G Ninja -DCMAKE_CXX_COMPILER="$clang" \
    -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=-O1 -gline-tables-only" \
    -DCDCVIEW_SANITIZE=address,undefined -DCDCVIEW_FUZZ=ON \
    "-DCMAKE_CXX_FLAGS=-Wthread-safety -Werror=thread-safety" >/dev/null
fi
echo "[fuzz] building ${run[*]/#/fuzz_} in $build with $jobs jobs"
cmake --build "$build" -j "$jobs" -- "${run[@]/#/fuzz_}"

# The sanitizers' options as scripts/sanitize.sh sets them: any finding aborts, which libFuzzer
# reports as a crash with its input. Leaks are checked after each input that allocated more
# than it freed.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1:check_initialization_order=1:detect_stack_use_after_return=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"

# fuzz_command TARGET: the libFuzzer run of TARGET, in the array `cmd`. -timeout: an input
# that runs this long is a hang (h2_framing's own bound on a connection is 10 s).
fuzz_command() {
  local t="$1"
  mkdir -p "$work/$t/corpus" "$work/$t/crashes"
  cmd=(nice "$build/tests/fuzz/fuzz_$t" -max_total_time="$seconds" -timeout=30
       -print_final_stats=1 -artifact_prefix="$work/$t/crashes/"
       "$work/$t/corpus" "$here/tests/fuzz/corpus/$t")
}

# The crash inputs a failed run wrote, and how to replay them. A run killed from outside (out
# of memory) or that failed before fuzzing writes none: say so rather than fail here.
report_crash() {
  local t="$1" log="$2" inputs
  echo "[fuzz] $t FAILED; the end of its log ($log):"
  tail -n 40 "$log" | sed 's/^/    /' || true
  inputs="$(grep -o "Test unit written to .*" "$log" | sed 's/^Test unit written to //' || true)"
  if [ -z "$inputs" ]; then
    echo "[fuzz] $t: no crash input written; see the log $log"
    return 0
  fi
  while read -r f; do
    echo "[fuzz] $t crash input: $f"
    echo "[fuzz]   reproduce: ${build#$here/}/tests/fuzz/fuzz_$t $f"
  done <<<"$inputs"
}

# The last progress line: executions, coverage (cov: edges) and features (ft:).
summary() {
  local t="$1" log="$2"
  local runs line
  runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)"
  line="$(grep -E '^#[0-9]+' "$log" | tail -n 1 | grep -oE 'cov: [0-9]+ ft: [0-9]+ corp: [^ ]+' || true)"
  echo "[fuzz] $t: ${runs:-?} executions in ${seconds}s, ${line:-no progress line}"
}

mkdir -p "$work"
if [ "${#run[@]}" -eq 1 ]; then
  t="${run[0]}"
  echo "[fuzz] $t for ${seconds}s on tests/fuzz/corpus/$t (+ $work/$t/corpus)"
  log="$work/$t.log"
  fuzz_command "$t"
  set +e
  "${cmd[@]}" 2>&1 | tee "$log"
  rc="${PIPESTATUS[0]}"
  set -e
  if [ "$rc" -ne 0 ]; then report_crash "$t" "$log"; exit 1; fi
  summary "$t" "$log"
  exit 0
fi

# all: two at a time, each into its own log; a summary line per target as it ends.
echo "[fuzz] ${#run[@]} targets, ${seconds}s each, 2 at a time (logs in $work/TARGET.log)"
declare -A pid_of  # the runs not waited for yet
# However this script ends (an error of its own, an interrupt), no fuzzer is left running.
stop_runs() {
  local p
  for p in "${pid_of[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pid_of[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap stop_runs EXIT
trap 'exit 130' INT  # an uncaught signal would skip the EXIT trap
trap 'exit 143' TERM
failed=()
finish() {  # waits for target $1's run
  local t="$1" rc=0
  wait "${pid_of[$t]}" || rc=$?
  unset "pid_of[$t]"
  if [ "$rc" -eq 0 ]; then
    summary "$t" "$work/$t.log"
  else
    report_crash "$t" "$work/$t.log"
    failed+=("$t")
  fi
}
running=()
for t in "${run[@]}"; do
  fuzz_command "$t"
  "${cmd[@]}" >"$work/$t.log" 2>&1 &
  pid_of[$t]=$!
  running+=("$t")
  if [ "${#running[@]}" -eq 2 ]; then
    finish "${running[0]}"
    running=("${running[@]:1}")
  fi
done
for t in "${running[@]}"; do finish "$t"; done
if [ "${#failed[@]}" -gt 0 ]; then
  echo "[fuzz] FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "[fuzz] all ${#run[@]} targets ran ${seconds}s each without a crash"
