#!/usr/bin/env bash
# The first command of the README: installs what is needed, builds, and runs cdcviewd on the
# embedded default (examples/cdcview.yaml: the bundled sample stream, LMDB in ./data, gRPC on
# 127.0.0.1:50051, metrics on 127.0.0.1:9464). Ctrl-C stops it cleanly.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
cd "$here"
"$here/scripts/install-deps.sh"
"$here/scripts/build.sh"
build="${CDCVIEW_BUILD_DIR:-$here/build}"
echo "[run] cdcviewd --config examples/cdcview.yaml   (query it from another shell: $build/daemon/cli/cdcview views)"
exec "$build/daemon/cdcviewd" --config examples/cdcview.yaml "$@"
