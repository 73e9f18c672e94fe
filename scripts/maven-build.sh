#!/usr/bin/env bash
# Builds one of the repository's small Maven projects (Java 17) with the local repository
# .cache/m2, so a second build downloads nothing and, once everything is there, runs offline.
#
#   scripts/maven-build.sh PROJECT_DIR JAR_NAME
#       mvn package in PROJECT_DIR into PROJECT_DIR/target/JAR_NAME.jar, its runtime jars in
#       target/lib (the project's pom copies them there). Skipped when the jar is newer than
#       pom.xml and src/. The log is target/build.log.
#
# Used by scripts/kafka-streams-peer.sh (the Kafka Streams peer) and
# tests/integration/test_dynamodb_sdks.py (the AWS SDK for Java client). Exit codes: 0 built or
# up to date, 3 mvn or a Java 17 missing, 1 any other failure (the log's errors are printed).
# Environment: MAVEN_OFFLINE=1 (never reach the network: fail instead).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
project="${1:?usage: scripts/maven-build.sh PROJECT_DIR JAR_NAME}"
name="${2:?usage: scripts/maven-build.sh PROJECT_DIR JAR_NAME}"
project="$(cd "$project" && pwd)"
repo="$here/.cache/m2"
jar="$project/target/$name.jar"
marker="$repo/.$name-complete"  # every artifact this project needs is in the local repository

say() { echo "[maven-build] $name: $*" >&2; }

need_tools() {
  command -v mvn >/dev/null || { say "mvn not found: install Maven (scripts/install-deps.sh installs it)"; exit 3; }
  command -v java >/dev/null || { say "java not found: install a JDK 17 (scripts/install-deps.sh installs it)"; exit 3; }
  local v
  v="$(java -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = //p')"
  if [ -n "$v" ] && [ "${v%%.*}" -lt 17 ] 2>/dev/null; then
    say "java $v found, this needs 17 or later (scripts/install-deps.sh installs a JDK 17)"; exit 3
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
  if [ "${MAVEN_OFFLINE:-0}" = 1 ] || [ -f "$marker" ]; then offline=(-o); fi
  say "building with Maven${offline:+ (offline)} into $project/target (local repository $repo)"
  local log="$project/target/build.log"
  mkdir -p "$project/target"
  rm -f "$project/target/lib/.complete"
  if ! (cd "$project" && mvn -B -Dstyle.color=never -Dmaven.repo.local="$repo" \
          ${offline[@]+"${offline[@]}"} -DskipTests package) >"$log" 2>&1; then
    if [ ${#offline[@]} -gt 0 ] && [ "${MAVEN_OFFLINE:-0}" != 1 ] &&
       grep -q "offline mode\|Could not resolve\|Cannot access" "$log"; then
      say "offline build missed an artifact: trying again with the network"
      rm -f "$marker"
      build
      return
    fi
    grep -E "ERROR|BUILD" "$log" | head -40 >&2
    say "Maven failed (full log: $log). A dependency that cannot be downloaded: check that" \
        "Maven Central is reachable or that $repo holds it; a compile error: fix the sources."
    exit 1
  fi
  touch "$marker" "$project/target/lib/.complete"
  say "built $jar ($(ls "$project/target/lib" | wc -l) jars in target/lib)"
}

build
