#!/usr/bin/env bash
# Installs everything cdcview needs to build, run and test on Debian 12, as root.
# Safe to run again: apt and pip skip what is already there.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"

pkgs=(
  build-essential cmake ninja-build ccache pkg-config git curl ca-certificates
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  liblmdb-dev lmdb-utils librdkafka-dev prometheus-cpp-dev libcivetweb-dev libyaml-cpp-dev
  libsimdjson-dev libcli11-dev libgtest-dev libgmock-dev libbenchmark-dev
  libcurl4-openssl-dev libssl-dev libgoogle-perftools-dev libnghttp2-dev
  libboost1.74-dev             # the DynamoDB endpoint: Boost.Beast (HTTP/1.1) over Boost.Asio
  zlib1g-dev                   # the DynamoDB endpoint: x-amz-crc32 of each answer
  python3 python3-venv python3-pip prometheus
  clang-14                     # scripts/thread-safety.sh: checks the lock annotations
  libclang-rt-14-dev           # scripts/sanitize.sh: clang's ASan, UBSan and TSan runtimes
  libfuzzer-14-dev             # scripts/fuzz.sh: libFuzzer for clang-14
  default-jdk-headless maven   # scripts/kafka.sh: a real Kafka broker for the Kafka tests
)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "[install-deps] installing ${#missing[@]} Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
  # The prometheus package starts a system service on :9090; the tests start their own.
  if command -v systemctl >/dev/null 2>&1; then systemctl disable --now prometheus >/dev/null 2>&1 || true; fi
else
  echo "[install-deps] Debian packages: all present"
fi

# Python test dependencies, pinned, in a venv inside the checkout (ignored by git).
venv="$here/.venv"
if [ ! -x "$venv/bin/python" ]; then
  echo "[install-deps] creating $venv"
  python3 -m venv "$venv"
fi
if ! "$venv/bin/python" -c 'import sys; sys.exit(0)' 2>/dev/null; then
  echo "[install-deps] $venv is broken: delete it and run again" >&2; exit 1
fi
stamp="$venv/.requirements.sha"
want="$(sha256sum "$here/tests/requirements.txt" | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "[install-deps] installing Python test packages from tests/requirements.txt"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$here/tests/requirements.txt"
  echo "$want" > "$stamp"
else
  echo "[install-deps] Python test packages: up to date"
fi

# kustomize renders deploy/k8s for tests/integration/test_deploy.py. kubectl has it built in but
# Debian 12 does not package kubectl, so where there is none the standalone kustomize (the same
# engine, `kustomize build`) is built once from the Go module proxy into .cache/bin. v5.5.0 is
# kubectl 1.32's kustomize; its go.mod needs Go 1.22.7, so with Debian's own Go (1.19) the
# script takes v5.0.3, whose go.mod needs 1.19.
kustomize="$here/.cache/bin/kustomize"
if command -v kubectl >/dev/null 2>&1; then
  echo "[install-deps] kustomize: kubectl's built-in one"
elif [ -x "$kustomize" ]; then
  echo "[install-deps] kustomize: built already in .cache/bin"
else
  go_bin="$(command -v go || true)"
  [ -z "$go_bin" ] && [ -x /usr/local/go/bin/go ] && go_bin=/usr/local/go/bin/go
  if [ -z "$go_bin" ]; then
    echo "[install-deps] installing golang-go to build kustomize"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends golang-go
    go_bin=/usr/bin/go
  fi
  go_minor="$("$go_bin" env GOVERSION | sed -E 's/^go1\.([0-9]+).*/\1/')"
  version=v5.5.0
  [ "$go_minor" -lt 22 ] && version=v5.0.3
  echo "[install-deps] building kustomize $version with $("$go_bin" env GOVERSION) (a minute or two, once)"
  mkdir -p "$here/.cache/bin"
  GOBIN="$here/.cache/bin" GOFLAGS=-mod=mod "$go_bin" install "sigs.k8s.io/kustomize/kustomize/v5@$version"
fi
