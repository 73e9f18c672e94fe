#!/usr/bin/env bash
# A single-node Apache Kafka broker (KRaft, broker + controller in one JVM) on free loopback
# ports, for the integration tests and the Kafka benchmark.
#
#   scripts/kafka.sh fetch              download the broker jars (Maven) into .cache/kafka/libs
#   scripts/kafka.sh start [RUN_DIR]    fetch if needed, format a fresh storage, start, wait
#   scripts/kafka.sh stop [RUN_DIR]     stop the broker started in RUN_DIR
#   scripts/kafka.sh status [RUN_DIR]   "running <bootstrap>" or "stopped"
#
# RUN_DIR (default .cache/kafka/run) holds server.properties, the data, kafka.log, kafka.pid
# and `bootstrap` (host:port for clients). Each start formats new storage: no leftovers.
#   KAFKA_VERSION   org.apache.kafka:kafka_2.13 version (default 4.1.1)
#   KAFKA_HEAP      JVM heap flags (default "-Xms256m -Xmx1g")
#   KAFKA_TLS_DIR   a directory with the broker's PKCS#12 keystore broker.p12 (password in
#                   broker.p12.password) and the CA that signed it and the clients, ca.crt
#                   (PEM): the broker listens on two more ports, written to RUN_DIR/
#                   bootstrap-sasl_ssl (SASL_SSL, SCRAM-SHA-512: TLS with a password) and
#                   RUN_DIR/bootstrap-ssl (SSL with a client certificate signed by ca.crt
#                   required: mTLS). The PLAINTEXT port stays, for the tests' own clients.
#   KAFKA_SCRAM_USERS_FILE  lines "name password": SCRAM-SHA-512 users created when the
#                   storage is formatted (names and passwords of [A-Za-z0-9_.-])
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
version="${KAFKA_VERSION:-4.1.1}"
cache="$here/.cache/kafka"
libs="$cache/libs-$version"

say() { echo "[kafka] $*" >&2; }

fetch() {
  if [ -f "$libs/.complete" ]; then return 0; fi
  command -v mvn >/dev/null || { say "mvn not found: install maven (scripts/install-deps.sh)"; exit 1; }
  command -v java >/dev/null || { say "java not found: install a JDK 17 (scripts/install-deps.sh)"; exit 1; }
  say "fetching org.apache.kafka:kafka_2.13:$version and its runtime dependencies (Maven)"
  local pom_dir="$cache/pom-$version"
  mkdir -p "$pom_dir"
  # kafka_2.13 brings the broker, KRaft, storage and the coordinators (with slf4j 1.7, hence
  # log4j-slf4j-impl, the 1.x binding, for log4j2 to print its logs).
  cat >"$pom_dir/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>cdcview.local</groupId>
  <artifactId>kafka-broker-libs</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$version</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId><version>2.24.3</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId><version>2.24.3</version></dependency>
  </dependencies>
</project>
EOF
  rm -rf "$libs.tmp"
  # Maven's console (even -q) may print terminal escapes: keep stdout for the bootstrap address.
  (cd "$pom_dir" && mvn -q -B -Dstyle.color=never dependency:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory="$libs.tmp") >&2
  rm -rf "$libs"
  mv "$libs.tmp" "$libs"
  touch "$libs/.complete"
  say "$(ls "$libs" | wc -l) jars in $libs"
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

run_dir() { echo "${1:-$cache/run}"; }

is_running() {
  local dir="$1"
  [ -f "$dir/kafka.pid" ] && kill -0 "$(cat "$dir/kafka.pid")" 2>/dev/null
}

# True once the broker answers Kafka's ApiVersions on its port (a TCP accept is not enough:
# the listener opens before the broker has joined the KRaft quorum).
answers() {
  local bootstrap="$1"
  python3 - "$bootstrap" <<'EOF'
import socket, struct, sys
host, port = sys.argv[1].rsplit(":", 1)
try:
    s = socket.create_connection((host, int(port)), timeout=2)
    client = b"probe"
    # ApiVersions v0 request: api_key 18, version 0, correlation 1, client id.
    body = struct.pack(">hhih", 18, 0, 1, len(client)) + client
    s.sendall(struct.pack(">i", len(body)) + body)
    size = struct.unpack(">i", s.recv(4))[0]
    data = b""
    while len(data) < size:
        chunk = s.recv(size - len(data))
        if not chunk:
            break
        data += chunk
    sys.exit(0 if len(data) >= 6 and struct.unpack(">h", data[4:6])[0] == 0 else 1)
except Exception:
    sys.exit(1)
EOF
}

start() {
  local dir; dir="$(run_dir "${1:-}")"
  if is_running "$dir"; then
    say "already running ($(cat "$dir/bootstrap")), pid $(cat "$dir/kafka.pid")"
    cat "$dir/bootstrap"; return 0
  fi
  fetch
  rm -rf "$dir/data" "$dir/bootstrap" "$dir/bootstrap-sasl_ssl" "$dir/bootstrap-ssl"
  mkdir -p "$dir/data"
  local port controller cluster sasl_port="" ssl_port=""
  port="$(free_port)"; controller="$(free_port)"
  while [ "$controller" = "$port" ]; do controller="$(free_port)"; done
  local listeners="PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$controller"
  local advertised="PLAINTEXT://127.0.0.1:$port"
  local protocols="PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
  local tls_dir="${KAFKA_TLS_DIR:-}"
  if [ -n "$tls_dir" ]; then
    for f in broker.p12 broker.p12.password ca.crt; do
      [ -f "$tls_dir/$f" ] || { say "KAFKA_TLS_DIR=$tls_dir has no $f"; exit 1; }
    done
    sasl_port="$(free_port)"; ssl_port="$(free_port)"
    while [ "$sasl_port" = "$port" ] || [ "$sasl_port" = "$controller" ]; do sasl_port="$(free_port)"; done
    while [ "$ssl_port" = "$port" ] || [ "$ssl_port" = "$controller" ] || [ "$ssl_port" = "$sasl_port" ]; do
      ssl_port="$(free_port)"
    done
    listeners="$listeners,SASL_SSL://127.0.0.1:$sasl_port,SSL://127.0.0.1:$ssl_port"
    advertised="$advertised,SASL_SSL://127.0.0.1:$sasl_port,SSL://127.0.0.1:$ssl_port"
    protocols="$protocols,SASL_SSL:SASL_SSL,SSL:SSL"
  fi
  # A cluster id that starts with '-' reads as an option to kafka-storage (Kafka's own
  # Uuid.randomUuid() skips those too), so draw again until it does not.
  cluster="$(python3 -c '
import base64, uuid
while True:
    s = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    if not s.startswith("-"):
        print(s)
        break')"
  cat >"$dir/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$controller
listeners=$listeners
advertised.listeners=$advertised
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=$protocols
log.dirs=$dir/data
num.partitions=6
offsets.topic.replication.factor=1
offsets.topic.num.partitions=6
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=true
log.flush.interval.messages=9223372036854775807
EOF
  local scram=()
  if [ -n "$tls_dir" ]; then
    local store_password; store_password="$(cat "$tls_dir/broker.p12.password")"
    # No authorizer: an authenticated client may do anything, as on the PLAINTEXT port.
    cat >>"$dir/server.properties" <<EOF
ssl.keystore.type=PKCS12
ssl.keystore.location=$tls_dir/broker.p12
ssl.keystore.password=$store_password
ssl.key.password=$store_password
ssl.truststore.type=PEM
ssl.truststore.location=$tls_dir/ca.crt
sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.ssl.client.auth=none
listener.name.ssl.ssl.client.auth=required
EOF
    if [ -n "${KAFKA_SCRAM_USERS_FILE:-}" ]; then
      local name password
      while read -r name password; do
        [ -n "$name" ] || continue
        scram+=(--add-scram "SCRAM-SHA-512=[name=$name,password=$password]")
      done <"$KAFKA_SCRAM_USERS_FILE"
    fi
  fi
  cat >"$dir/log4j2.properties" <<EOF
rootLogger.level=WARN
rootLogger.appenderRef.out.ref=out
appender.out.type=Console
appender.out.name=out
appender.out.layout.type=PatternLayout
appender.out.layout.pattern=[%d] %p %m (%c)%n
logger.kafka.name=kafka
logger.kafka.level=INFO
logger.server.name=kafka.server.KafkaRaftServer
logger.server.level=INFO
EOF
  local java_opts=(${KAFKA_HEAP:--Xms256m -Xmx1g} -XX:+UseG1GC -Djava.awt.headless=true
                   "-Dlog4j2.configurationFile=$dir/log4j2.properties")
  say "formatting KRaft storage in $dir/data (cluster $cluster)"
  java "${java_opts[@]}" -cp "$libs/*" kafka.tools.StorageTool format \
      --cluster-id="$cluster" -c "$dir/server.properties" ${scram[@]+"${scram[@]}"} \
      >"$dir/format.log" 2>&1 || {
    say "formatting failed:"; cat "$dir/format.log" >&2; exit 1; }
  say "starting broker on 127.0.0.1:$port (controller 127.0.0.1:$controller)"
  nohup java "${java_opts[@]}" -cp "$libs/*" kafka.Kafka "$dir/server.properties" \
      >"$dir/kafka.log" 2>&1 </dev/null &
  echo $! >"$dir/kafka.pid"
  local waited=0
  until answers "127.0.0.1:$port"; do
    if ! is_running "$dir"; then
      say "broker exited during start-up; last lines of $dir/kafka.log:"; tail -30 "$dir/kafka.log" >&2
      exit 1
    fi
    if [ "$waited" -ge 120 ]; then
      say "broker did not answer within 120s; see $dir/kafka.log"; stop "$dir"; exit 1
    fi
    sleep 1; waited=$((waited + 1))
    if [ $((waited % 10)) -eq 0 ]; then say "waiting for the broker ($waited s)"; fi
  done
  if [ -n "$sasl_port" ]; then
    echo "127.0.0.1:$sasl_port" >"$dir/bootstrap-sasl_ssl"
    echo "127.0.0.1:$ssl_port" >"$dir/bootstrap-ssl"
  fi
  echo "127.0.0.1:$port" >"$dir/bootstrap"
  say "ready at 127.0.0.1:$port after ${waited}s (pid $(cat "$dir/kafka.pid"), log $dir/kafka.log)"
  echo "127.0.0.1:$port"
}

stop() {
  local dir; dir="$(run_dir "${1:-}")"
  if ! is_running "$dir"; then say "not running ($dir)"; rm -f "$dir/kafka.pid"; return 0; fi
  local pid; pid="$(cat "$dir/kafka.pid")"
  kill "$pid"
  for _ in $(seq 1 30); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 1
  done
  if kill -0 "$pid" 2>/dev/null; then say "pid $pid ignored SIGTERM for 30s: killing it"; kill -9 "$pid"; fi
  rm -f "$dir/kafka.pid" "$dir/bootstrap" "$dir/bootstrap-sasl_ssl" "$dir/bootstrap-ssl"
  say "stopped (pid $pid)"
}

status() {
  local dir; dir="$(run_dir "${1:-}")"
  if is_running "$dir" && [ -f "$dir/bootstrap" ]; then echo "running $(cat "$dir/bootstrap")"
  else echo "stopped"; fi
}

case "${1:-}" in
  fetch) fetch ;;
  start) start "${2:-}" ;;
  stop) stop "${2:-}" ;;
  status) status "${2:-}" ;;
  *) echo "usage: $0 fetch | start [RUN_DIR] | stop [RUN_DIR] | status [RUN_DIR]" >&2; exit 2 ;;
esac
