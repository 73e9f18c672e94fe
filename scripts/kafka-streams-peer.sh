#!/usr/bin/env bash
# The Kafka Streams peer of cdcview (tests/bench/peers/kafka-streams/README.md): the same views
# and aggregates as examples/cdcview.yaml, as a Kafka Streams application, for the comparison
# in tests/bench/kafka_streams_compare.py and the check in
# tests/integration/test_kafka_streams_peer.py.
#
#   scripts/kafka-streams-peer.sh build
#       compile with Maven (Java 17; kafka-streams and its RocksDB from Maven Central) into
#       tests/bench/peers/kafka-streams/target; the local repository is .cache/m2, so a second
#       build downloads nothing (and runs offline once everything is there). Skipped when the
#       jar is newer than the sources.
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
repo="$here/.cache/m2"
jar="$project/target/kafka-streams-peer.jar"

say() { echo "[kafka-streams-peer] $*" >&2; }

need_tools() {
  command -v mvn >/dev/null || { say "mvn not found: install Maven (scripts/install-deps.sh installs it)"; exit 3; }
  command -v java >/dev/null || { say "java not found: install a JDK 17 (scripts/install-deps.sh installs it)"; exit 3; }
  local v
  v="$(java -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = //p')"
  if [ -n "$v" ] && [ "${v%%.*}" -lt 17 ] 2>/dev/null; then
    say "java $v found, the peer needs 17 or later (scripts/install-deps.sh installs a JDK 17)"; exit 3
  fi
}

up_to_date() {
  [ -f "$jar" ] && [ -f "$project/target/lib/.complete" ] || return 1
  [ -z "$(find "$project/pom.xml" "$project/src" -newer "$jar" -print -quit)" ]
}

build() {
  need_tools
  if up_to_date; then say "up to date: $jar"; return 0; fi
  mkdir -p "$repo"
  local offline=()
  # Everything already downloaded (a previous build): no network at all.
  if [ "${MAVEN_OFFLINE:-0}" = 1 ] || [ -f "$repo/.peer-complete" ]; then offline=(-o); fi
  say "building with Maven${offline:+ (offline)} into $project/target (local repository $repo)"
  local log="$project/target/build.log"
  mkdir -p "$project/target"
  rm -f "$project/target/lib/.complete"
  if ! (cd "$project" && mvn -B -Dstyle.color=never -Dmaven.repo.local="$repo" \
          ${offline[@]+"${offline[@]}"} -DskipTests package) >"$log" 2>&1; then
    if [ ${#offline[@]} -gt 0 ] && [ "${MAVEN_OFFLINE:-0}" != 1 ] &&
       grep -q "offline mode\|Could not resolve\|Cannot access" "$log"; then
      say "offline build missed an artifact: trying again with the network"
      rm -f "$repo/.peer-complete"
      build
      return
    fi
    grep -E "ERROR|BUILD" "$log" | head -40 >&2
    say "Maven failed (full log: $log). A dependency that cannot be downloaded: check that" \
        "Maven Central is reachable or that $repo holds it; a compile error: fix the sources."
    exit 1
  fi
  touch "$repo/.peer-complete" "$project/target/lib/.complete"
  say "built $jar ($(ls "$project/target/lib" | wc -l) jars in target/lib)"
}

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
