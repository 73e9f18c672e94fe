#!/usr/bin/env bash
# The lock check: builds cdcviewd and the CLI with clang and -Wthread-safety into
# ${CDCVIEW_TSA_BUILD_DIR:-build-tsa}, so that every ABSL_GUARDED_BY, ABSL_EXCLUSIVE_LOCKS_REQUIRED
# and ABSL_LOCKS_EXCLUDED annotation is proved at compile time (a guarded member touched without
# its absl::Mutex held, a function that requires a lock called without it). Any such finding
# fails the build; clang's other warnings are printed and do not.
#
# GCC does not check the annotations; this build does, and only for members guarded by an
# absl::Mutex (libstdc++'s std::mutex is no capability: annotating it is itself an error here).
# Tests are off and nothing is optimised or given debug info: this build exists to be analysed,
# not run. ccache makes a second run rebuild only what changed.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
build="${CDCVIEW_TSA_BUILD_DIR:-$here/build-tsa}"
jobs="${CDCVIEW_JOBS:-$(nproc)}"
clang="${CDCVIEW_CLANG:-clang++-14}"
export CCACHE_DIR="${CCACHE_DIR:-$here/.cache/ccache}"

if ! command -v "$clang" >/dev/null 2>&1; then
  echo "[thread-safety] $clang not found: run scripts/install-deps.sh (it installs clang-14)" >&2
  exit 1
fi
if [ ! -f "$build/build.ninja" ]; then
  echo "[thread-safety] configuring $build with $clang"
  cmake -S "$here" -B "$build" -G Ninja -DCMAKE_CXX_COMPILER="$clang" -DCDCVIEW_BUILD_TESTS=OFF \
    -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-O0 \
    -DCMAKE_CXX_FLAGS="-Wthread-safety -Werror=thread-safety" >/dev/null
fi
echo "[thread-safety] building in $build with $jobs jobs (ninja shows [done/total])"
if ! cmake --build "$build" -j "$jobs"; then
  echo "[thread-safety] FAILED: see clang's errors above ('requires holding mutex ...'," \
       "[-Wthread-safety-*]); hold the lock, or fix the annotation" >&2
  exit 1
fi
echo "[thread-safety] passed: every lock annotation holds"
