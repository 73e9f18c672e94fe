#!/usr/bin/env bash
# Configures (once) and builds cdcview into ${CDCVIEW_BUILD_DIR:-build} with Ninja and ccache.
# Incremental: a second run rebuilds only what changed.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
build="${CDCVIEW_BUILD_DIR:-$here/build}"
jobs="${CDCVIEW_JOBS:-$(nproc)}"
export CCACHE_DIR="${CCACHE_DIR:-$here/.cache/ccache}"
if [ ! -f "$build/build.ninja" ]; then
  echo "[build] configuring $build"
  cmake -S "$here" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
echo "[build] building in $build with $jobs jobs (first build takes a few minutes; ninja shows [done/total])"
cmake --build "$build" -j "$jobs" -- "$@"
