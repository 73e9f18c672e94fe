#!/usr/bin/env bash
# Builds the benchmark drivers and runs them with their defaults, then prints a summary.
# Figures only, nothing is asserted. About 2-3 minutes on 2 cores after the build.
#   BENCH_TMP           where apply_bench puts its stores (default /dev/shm, see below)
#   CDCVIEW_BUILD_DIR   build directory (default: build)
#   APPLY_BENCH_ARGS    extra flags for apply_bench (e.g. "--events 200000")
#   QUERY_BENCH_ARGS    extra flags for query_bench
#   SHARD_BENCH_ARGS    extra flags for shard_bench (merged reads of write-sharded views)
#   WATCH_BENCH_ARGS    extra flags for watch_bench (e.g. "--events 20000 --watchers 100")
#   STATUS_BENCH_ARGS   extra flags for status_bench (e.g. "--events 100000 --threads 8")
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
build="${CDCVIEW_BUILD_DIR:-$here/build}"
export CDCVIEW_BUILD_DIR="$build"
"$here/scripts/build.sh" apply_bench query_bench shard_bench watch_bench status_bench

out="$(mktemp -d "${TMPDIR:-/tmp}/cdcview-bench.XXXXXX")"
trap 'rm -rf "$out"' EXIT

# The stores go to tmpfs when there is one: on a slow or shared disk the commits' fdatasync
# dominates (about 100 ms per commit on the dev VM, 6 minutes for the default run) and hides
# the applier's own cost. BENCH_TMP=/some/disk/dir measures the disk instead.
bench_tmp="${BENCH_TMP:-}"
if [ -z "$bench_tmp" ]; then
  if [ -d /dev/shm ] && [ -w /dev/shm ]; then bench_tmp=/dev/shm; else bench_tmp="${TMPDIR:-/tmp}"; fi
fi
echo "[bench] apply_bench --tmp $bench_tmp ${APPLY_BENCH_ARGS:-}"
# shellcheck disable=SC2086
"$build/tests/bench/apply_bench" --tmp "$bench_tmp" ${APPLY_BENCH_ARGS:-} | tee "$out/apply.txt"
echo "[bench] query_bench --tmp $bench_tmp ${QUERY_BENCH_ARGS:-}"
# shellcheck disable=SC2086
"$build/tests/bench/query_bench" --tmp "$bench_tmp" ${QUERY_BENCH_ARGS:-} | tee "$out/query.txt"
echo "[bench] shard_bench --tmp $bench_tmp ${SHARD_BENCH_ARGS:-}"
# shellcheck disable=SC2086
"$build/tests/bench/shard_bench" --tmp "$bench_tmp" ${SHARD_BENCH_ARGS:-} | tee "$out/shard.txt"
echo "[bench] watch_bench --tmp $bench_tmp ${WATCH_BENCH_ARGS:-}"
# shellcheck disable=SC2086
"$build/tests/bench/watch_bench" --tmp "$bench_tmp" ${WATCH_BENCH_ARGS:-} | tee "$out/watch.txt"
echo "[bench] status_bench --tmp $bench_tmp ${STATUS_BENCH_ARGS:-}"
# shellcheck disable=SC2086
"$build/tests/bench/status_bench" --tmp "$bench_tmp" ${STATUS_BENCH_ARGS:-} | tee "$out/status.txt"

echo
echo "===== cdcview benchmark summary ====="
grep -E '^(stores|apply |apply / raw|raw LMDB)' "$out/apply.txt" || true
grep -E 'index writes|CPU:' "$out/apply.txt" | sed 's/^ */           /' || true
grep -E '^(aggregates|  without|  with)' "$out/apply.txt" || true
grep -E '^(closed|open) loop|^  (point|range)' "$out/query.txt" || true
grep -E '^(query|Plain|Sharded)' "$out/shard.txt" || true
grep -E '^(ingest|changes delivered|delivery latency|watchers cut off)' "$out/watch.txt" || true
grep -E '^(apply alone|apply \+ (spin|GetStatus)|storm / )' "$out/status.txt" || true

# ---------------------------------------------------------------------------------------------
# Kafka source (tests/bench/kafka_bench.py): a real broker (scripts/kafka.sh), a pre-filled
# 6-partition topic of 1M events, six views; cdcviewd's consume+apply rate beside a bare
# librdkafka loop and the file source over the same events, and replication lag p50/p99 at
# half load. About 5 minutes more; KAFKA_BENCH=0 skips it.
#   KAFKA_BENCH_ARGS    extra flags (e.g. "--events 200000 --lag-seconds 10")
# ---------------------------------------------------------------------------------------------
if [ "${KAFKA_BENCH:-1}" != "0" ]; then
  "$here/scripts/build.sh" cdcviewd kafka_consume_bench kafka_produce_bench cpu_jitter_bench
  "$here/scripts/install-deps.sh" >/dev/null
  # The broker's data and both daemons' stores go where apply_bench's did (tmpfs if any).
  echo "[bench] kafka_bench --tmp $bench_tmp ${KAFKA_BENCH_ARGS:-}"
  # shellcheck disable=SC2086
  "$here/.venv/bin/python" "$here/tests/bench/kafka_bench.py" --tmp "$bench_tmp" \
    ${KAFKA_BENCH_ARGS:-} | tee "$out/kafka.txt"
  echo
  echo "===== cdcview Kafka benchmark summary ====="
  grep -E '^kafka:' "$out/kafka.txt" || true
fi

# ---------------------------------------------------------------------------------------------
# Cluster reads (tests/bench/cluster_bench.py): a real broker, a 6-partition topic of 200k events;
# point and 100-row range queries through member 0 of clusters of 1, 2 and 3 members against a
# standalone daemon in the same run. About 3 minutes more; CLUSTER_BENCH=0 skips it.
#   CLUSTER_BENCH_ARGS  extra flags (e.g. "--members 1,3 --seconds 5")
# ---------------------------------------------------------------------------------------------
if [ "${CLUSTER_BENCH:-1}" != "0" ]; then
  "$here/scripts/build.sh" cdcviewd
  echo "[bench] cluster_bench --tmp $bench_tmp ${CLUSTER_BENCH_ARGS:-}"
  # shellcheck disable=SC2086
  "$here/.venv/bin/python" "$here/tests/bench/cluster_bench.py" \
    --tmp "$bench_tmp" ${CLUSTER_BENCH_ARGS:-} | tee "$out/cluster.txt"
fi

# ---------------------------------------------------------------------------------------------
# DynamoDB endpoint (tests/bench/dynamodb_bench.py): a cdcviewd with 200k items and its DynamoDB
# endpoint on; point Query over the endpoint (tests/bench/dynamodb_load, a C++ HTTP/1.1 client)
# closed loop and open loop at 5k QPS, beside the same queries on its gRPC port, and the ratio.
# Then the same endpoint under mixed load (tests/bench/dynamodb_mixed_bench.py: point queries
# while Scans run). About 90 s more; DYNAMODB_BENCH=0 skips both.
#   DYNAMODB_BENCH_ARGS  extra flags (e.g. "--qps 2000 --open-seconds 10")
# ---------------------------------------------------------------------------------------------
if [ "${DYNAMODB_BENCH:-1}" != "0" ]; then
  "$here/scripts/build.sh" cdcviewd dynamodb_load
  echo "[bench] dynamodb_bench --tmp $bench_tmp ${DYNAMODB_BENCH_ARGS:-}"
  # shellcheck disable=SC2086
  "$here/.venv/bin/python" "$here/tests/bench/dynamodb_bench.py" --tmp "$bench_tmp" \
    ${DYNAMODB_BENCH_ARGS:-} | tee "$out/dynamodb.txt"
  echo
  echo "===== cdcview DynamoDB endpoint benchmark summary ====="
  grep -E '^  (DynamoDB|gRPC)|^    (client woke|sent after|answered after)|^DynamoDB / gRPC|target p99' \
    "$out/dynamodb.txt" || true
  # The same endpoint under mixed load: point queries while Scans run, one and two I/O threads.
  echo "[bench] dynamodb_mixed_bench --tmp $bench_tmp"
  "$here/.venv/bin/python" "$here/tests/bench/dynamodb_mixed_bench.py" --tmp "$bench_tmp"
fi
