#!/usr/bin/env bash
# The Kafka Streams peer of cdcview (tests/bench/peers/kafka-streams/README.md): the same views
# and aggregates as examples/cdcview.yaml, as a Kafka Streams application, for the comparison
# in tests/bench/kafka_streams_compare.py and the check in
# tests/integration/test_kafka_streams_peer.py.
#
#   scripts/kafka-streams-peer.sh build
#       compile with Maven (Java 17; kafka-streams and its RocksDB from Maven Central) into
#       tests/bench/peers/kafka-streams/target (scripts/maven-build.sh: the local repository is
#       .cache/m2, so a second build downloads nothing). Skipped when the jar is newer than the
#       sources.
#   scripts/kafka-streams-peer.sh run --bootstrap HOST:PORT --topics T[,T2] --state-dir DIR
#                                     --port N [--application-id ID]
#       build if needed, then run it in the foreground (exec: the pid is the JVM's). It logs
#       "[peer] serving HTTP on 127.0.0.1:PORT" once its HTTP port is open (port 0: a free one).
#   scripts/kafka-streams-peer.sh classpath     print the run class path (after a build)
#
# Environment: PEER_HEAP (JVM heap flags, default "-Xmx1g": see the README), PEER_LOG_LEVEL
# (Kafka's log level, default warn), MAVEN_OFFLINE=1 (never reach the network: fail instead).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
project="$here/tests/bench/peers/kafka-streams"
jar="$project/target/kafka-streams-peer.jar"

build() { "$here/scripts/maven-build.sh" "$project" kafka-streams-peer; }

classpath() { echo "$jar:$project/target/lib/*"; }

run() {
  build
  # -Xmx and the HTTP server's TCP_NODELAY: see the README ("Settings"). The rest of the JVM's
  # settings are its defaults.
  # shellcheck disable=SC2086
  exec java ${PEER_HEAP:--Xmx1g} -Dsun.net.httpserver.nodelay=true \
      -Dorg.slf4j.simpleLogger.defaultLogLevel="${PEER_LOG_LEVEL:-warn}" \
      -Dorg.slf4j.simpleLogger.showDateTime=true \
      -cp "$(classpath)" cdcview.peer.PeerMain "$@"
}

case "${1:-}" in
  build) build ;;
  run) shift; run "$@" ;;
  classpath) classpath ;;
  *) echo "usage: $0 build | run --bootstrap HOST:PORT --topics T --state-dir DIR --port N [--application-id ID] | classpath" >&2; exit 2 ;;
esac
