#!/usr/bin/env bash
# Run a real Kafka Connect worker (distributed mode, one node) with the Debezium connectors, for
# the Debezium tests (test/slow/) and the bench. It connects to the broker that scripts/kafka.sh
# starts (or any broker on KAFKA_PORT); it never starts or stops that broker.
#
# The Connect runtime and the Debezium plugin archives come from Maven Central via `mvn` and are
# cached, so only the first start needs the network.
#
#   scripts/kafka-connect.sh start    fetch jars (once), start the worker, wait until its REST API answers
#   scripts/kafka-connect.sh stop     stop the worker started by `start`
#   scripts/kafka-connect.sh status   print "running" and exit 0 if the REST API answers, else exit 1
#
# Environment (all optional):
#   CONNECT_VERSION         Connect runtime version        (default 4.3.0: what Debezium 3.6 is built against)
#   DEBEZIUM_VERSION        Debezium connectors            (default 3.6.1.Final)
#   CONNECT_HOME_DIR        jar cache                      (default ~/.cache/nestjs-outbox/connect-<version>-debezium-<version>)
#   CONNECT_DATA_DIR        config, pid and logs, wiped on start (default /tmp/nestjs-outbox-connect)
#   CONNECT_PORT            REST port                      (default 8083)
#   KAFKA_PORT              the broker's port on 127.0.0.1 (default 9092)
#   CONNECT_GROUP_ID        worker group, also the prefix of its internal topics (default nestjs-outbox-connect)
#   CONNECT_START_TIMEOUT   seconds to wait for ready      (default 120)
#   CONNECT_HEAP_OPTS       worker heap                    (default -Xms256m -Xmx768m)
set -euo pipefail

CONNECT_VERSION="${CONNECT_VERSION:-4.3.0}"
DEBEZIUM_VERSION="${DEBEZIUM_VERSION:-3.6.1.Final}"
LOG4J_VERSION="2.24.3"

CONNECT_HOME_DIR="${CONNECT_HOME_DIR:-$HOME/.cache/nestjs-outbox/connect-$CONNECT_VERSION-debezium-$DEBEZIUM_VERSION}"
CONNECT_DATA_DIR="${CONNECT_DATA_DIR:-/tmp/nestjs-outbox-connect}"
CONNECT_PORT="${CONNECT_PORT:-8083}"
KAFKA_PORT="${KAFKA_PORT:-9092}"
CONNECT_GROUP_ID="${CONNECT_GROUP_ID:-nestjs-outbox-connect}"
CONNECT_START_TIMEOUT="${CONNECT_START_TIMEOUT:-120}"
CONNECT_HEAP_OPTS="${CONNECT_HEAP_OPTS:--Xms256m -Xmx768m}"

SERVICE="kafka-connect"
HOST="127.0.0.1"
LIB="$CONNECT_HOME_DIR/lib"
PLUGINS="$CONNECT_HOME_DIR/plugins"
DATA_DIR="$CONNECT_DATA_DIR"
PID_FILE="$CONNECT_DATA_DIR/connect.pid"
LOG_FILE="$CONNECT_DATA_DIR/connect.out"
MARKER="$CONNECT_DATA_DIR/.nestjs-outbox-connect"
ADOPT_PATTERN="ConnectDistributed $CONNECT_DATA_DIR/connect-distributed\.properties"
# The connectors whose plugin archives are fetched. No MariaDB archive is published for 3.6; the
# MySQL connector reads MariaDB (connector.adapter=mariadb).
CONNECTORS=(postgres mysql)
# shellcheck source=scripts/jvm-service.sh
source "$(dirname "${BASH_SOURCE[0]}")/jvm-service.sh"

# --- jars -------------------------------------------------------------------

fetch_runtime() {
  # The logging bridge is checked too: a cache made before it changed is fetched again.
  [[ -f "$LIB/.complete" && ! -f "$LIB/log4j-slf4j-impl-$LOG4J_VERSION.jar" ]] && rm -f "$LIB/.complete"
  # The logging backend: the runtime resolves slf4j-api 1.7, so log4j2's bridge for slf4j 1.x.
  jvm_fetch_classpath "$CONNECT_HOME_DIR" "$LIB" "$(jvm_pom kafka-connect-runtime "$CONNECT_VERSION" "a Kafka Connect worker" \
    "    <dependency><groupId>org.apache.kafka</groupId><artifactId>connect-runtime</artifactId><version>$CONNECT_VERSION</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>connect-json</artifactId><version>$CONNECT_VERSION</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>connect-api</artifactId><version>$CONNECT_VERSION</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>connect-transforms</artifactId><version>$CONNECT_VERSION</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId><version>$LOG4J_VERSION</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId><version>$LOG4J_VERSION</version></dependency>")" \
    "connect-runtime-$CONNECT_VERSION.jar" "the Kafka Connect $CONNECT_VERSION runtime"
}

# Each connector's plugin archive (a folder of jars for plugin.path). Only the archive itself is
# resolved: a transitive resolution of the connector jar fails, its POMs name a repository that
# is not reachable, and the archive already holds every jar the connector needs.
fetch_plugin() { # connector
  local name=$1 dir="$PLUGINS/debezium-connector-$1"
  local artifact="io.debezium:debezium-connector-$name:$DEBEZIUM_VERSION:tar.gz:plugin"
  [[ -f "$dir/.complete" ]] && return 0
  need mvn "needed once to fetch the Debezium plugins from Maven Central"
  log "fetching $artifact …"
  local tmp="$PLUGINS/$name.tmp.$$"
  mvn_into "$CONNECT_HOME_DIR" "$tmp" "$CONNECT_HOME_DIR/mvn-$name.log" "$artifact" \
    "$DEPENDENCY_PLUGIN:unpack" -Dartifact="$artifact" -DoutputDirectory="$tmp" -Dmdep.useBaseVersion=true
  # The archive holds one folder, debezium-connector-<name>/.
  [[ -d "$tmp/debezium-connector-$name" ]] || die "the $name plugin archive has no debezium-connector-$name folder"
  install_complete "$tmp/debezium-connector-$name" "$dir"
  rm -rf "$tmp"
}

fetch_jars() {
  need "$JAVA" "Kafka Connect 4 needs Java 17+"
  mkdir -p "$CONNECT_HOME_DIR" "$PLUGINS"
  fetch_runtime
  local c
  for c in "${CONNECTORS[@]}"; do fetch_plugin "$c"; done
}

# --- probes -----------------------------------------------------------------

# The REST API answers, and lists the Debezium plugins (the worker has finished scanning them).
rest_ready() {
  local body
  body="$(curl -fsS --max-time 5 "http://$HOST:$CONNECT_PORT/connector-plugins" 2>/dev/null)" || return 1
  [[ "$body" == *PostgresConnector* ]]
}

# --- commands ---------------------------------------------------------------

cmd_stop() { jvm_stop "$CONNECT_PORT" 30; }

cmd_status() { jvm_status rest_ready; }

write_config() {
  cat >"$CONNECT_DATA_DIR/connect-distributed.properties" <<EOF
# Generated by scripts/kafka-connect.sh: a one-node distributed Connect worker for tests.
bootstrap.servers=$HOST:$KAFKA_PORT
group.id=$CONNECT_GROUP_ID
listeners=http://$HOST:$CONNECT_PORT
rest.advertised.host.name=$HOST
rest.advertised.port=$CONNECT_PORT
plugin.path=$PLUGINS
# The Debezium archives carry ServiceLoader manifests: read those instead of scanning every class
# (the scan is most of the worker's start-up).
plugin.discovery=service_load
# The worker's own topics, on a one-broker cluster: replication 1.
config.storage.topic=$CONNECT_GROUP_ID-configs
offset.storage.topic=$CONNECT_GROUP_ID-offsets
status.storage.topic=$CONNECT_GROUP_ID-status
config.storage.replication.factor=1
offset.storage.replication.factor=1
status.storage.replication.factor=1
offset.storage.partitions=3
status.storage.partitions=3
# Connectors' defaults; each connector the tests register names its own converters.
key.converter=org.apache.kafka.connect.json.JsonConverter
value.converter=org.apache.kafka.connect.json.JsonConverter
key.converter.schemas.enable=false
value.converter.schemas.enable=false
# Commit source offsets often, so a connector restarted by a test repeats little.
offset.flush.interval.ms=1000
# Topics the EventRouter routes to are created by the connectors (topic.creation.default.*).
topic.creation.enable=true
# A one-node group: rebalance at once.
scheduled.rebalance.max.delay.ms=0
EOF
  cat >"$CONNECT_DATA_DIR/log4j2.properties" <<EOF
status = error
appender.file.type = File
appender.file.name = file
appender.file.fileName = $CONNECT_DATA_DIR/connect.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.file.ref = file
# keep the start-up and connector state lines, handy when reading the log
logger.connect.name = org.apache.kafka.connect.runtime
logger.connect.level = INFO
logger.debezium.name = io.debezium
logger.debezium.level = INFO
EOF
}

cmd_start() {
  local t0=$SECONDS
  need curl "the readiness probe calls the REST API"
  fetch_jars
  take_start_lock "$((CONNECT_START_TIMEOUT + 60))"

  jvm_already_running "$CONNECT_PORT" rest_ready "http://$HOST:$CONNECT_PORT" \
    "a Kafka Connect worker with Debezium (set CONNECT_PORT)" && return 0
  port_open "$KAFKA_PORT" || die "no Kafka broker on $HOST:$KAFKA_PORT (npm run kafka:start)"

  reset_data_dir
  write_config

  log "starting worker on http://$HOST:$CONNECT_PORT (broker $HOST:$KAFKA_PORT, data: $CONNECT_DATA_DIR) …"
  # shellcheck disable=SC2086 # CONNECT_HEAP_OPTS is a list of flags
  jvm_launch -server $CONNECT_HEAP_OPTS \
    -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$CONNECT_DATA_DIR/log4j2.properties" \
    -Dkafka.logs.dir="$CONNECT_DATA_DIR" \
    -cp "$LIB/*" org.apache.kafka.connect.cli.ConnectDistributed \
    "$CONNECT_DATA_DIR/connect-distributed.properties"
  jvm_wait_ready "$CONNECT_START_TIMEOUT" "$t0" rest_ready "http://$HOST:$CONNECT_PORT" \
    "$LOG_FILE" "$CONNECT_DATA_DIR/connect.log"
}

jvm_main "${1:-}"
