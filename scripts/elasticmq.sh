#!/usr/bin/env bash
# Run ElasticMQ, an Amazon SQS-compatible server, for the SQS publisher's tests, the bench and CI.
#
# The server jar and its runtime dependencies come from Maven Central via `mvn` and are cached,
# so only the first start needs the network. It keeps its queues in memory: every start is empty.
#
#   scripts/elasticmq.sh start    fetch jars (once), start, wait until the SQS API answers
#   scripts/elasticmq.sh stop     stop the server started by `start`
#   scripts/elasticmq.sh status   print "running" and exit 0 if the SQS API answers, else exit 1
#
# Environment (all optional):
#   ELASTICMQ_VERSION        server version              (default 1.6.11)
#   ELASTICMQ_HOME_DIR       jar cache                   (default ~/.cache/nestjs-outbox/elasticmq-<version>)
#   ELASTICMQ_DATA_DIR       config, pid and log, wiped on start (default /tmp/nestjs-outbox-elasticmq)
#   ELASTICMQ_PORT           SQS API port on 127.0.0.1   (default 9324)
#   ELASTICMQ_START_TIMEOUT  seconds to wait for ready   (default 60)
#   ELASTICMQ_HEAP_OPTS      server heap                 (default -Xms64m -Xmx512m)
set -euo pipefail

ELASTICMQ_VERSION="${ELASTICMQ_VERSION:-1.6.11}"
ELASTICMQ_HOME_DIR="${ELASTICMQ_HOME_DIR:-$HOME/.cache/nestjs-outbox/elasticmq-$ELASTICMQ_VERSION}"
ELASTICMQ_DATA_DIR="${ELASTICMQ_DATA_DIR:-/tmp/nestjs-outbox-elasticmq}"
ELASTICMQ_PORT="${ELASTICMQ_PORT:-9324}"
ELASTICMQ_START_TIMEOUT="${ELASTICMQ_START_TIMEOUT:-60}"
ELASTICMQ_HEAP_OPTS="${ELASTICMQ_HEAP_OPTS:--Xms64m -Xmx512m}"

SERVICE="elasticmq"
HOST="127.0.0.1"
LIB="$ELASTICMQ_HOME_DIR/lib"
DATA_DIR="$ELASTICMQ_DATA_DIR"
PID_FILE="$ELASTICMQ_DATA_DIR/elasticmq.pid"
LOG_FILE="$ELASTICMQ_DATA_DIR/elasticmq.out"
ADOPT_PATTERN="-Dconfig\.file=$ELASTICMQ_DATA_DIR/elasticmq\.conf"
# shellcheck source=scripts/jvm-service.sh
source "$(dirname "${BASH_SOURCE[0]}")/jvm-service.sh"

# Only the runtime scope is resolved: one of the server's test-scoped dependencies is not on
# Maven Central.
fetch_jars() {
  jvm_fetch_classpath "$ELASTICMQ_HOME_DIR" "$LIB" "$(jvm_pom elasticmq-runtime "$ELASTICMQ_VERSION" "an ElasticMQ server" \
    "    <dependency><groupId>org.elasticmq</groupId><artifactId>elasticmq-server_2.13</artifactId><version>$ELASTICMQ_VERSION</version></dependency>")" \
    "elasticmq-server_2.13-$ELASTICMQ_VERSION.jar" "the ElasticMQ $ELASTICMQ_VERSION server jars"
}

# A real SQS round trip (the query protocol's ListQueues), not only an open port.
sqs_answers() {
  local body
  body="$(curl -fsS --max-time 5 "http://$HOST:$ELASTICMQ_PORT/?Action=ListQueues" 2>/dev/null)" || return 1
  [[ "$body" == *ListQueuesResponse* ]]
}

cmd_stop() { jvm_stop "$ELASTICMQ_PORT" 10; }

cmd_status() { jvm_status sqs_answers; }

write_config() {
  # Queue URLs name the address the server listens on; AWS's limits (message size, batch size,
  # attribute counts) are enforced ("strict"), so what passes here passes on SQS.
  cat >"$ELASTICMQ_DATA_DIR/elasticmq.conf" <<CONF
include classpath("application.conf")
node-address { protocol = "http", host = "$HOST", port = $ELASTICMQ_PORT, context-path = "" }
rest-sqs { enabled = true, bind-port = $ELASTICMQ_PORT, bind-hostname = "$HOST", sqs-limits = strict }
rest-stats { enabled = false }
aws { region = "elasticmq", accountId = "000000000000" }
CONF
}

cmd_start() {
  local t0=$SECONDS
  need "$JAVA" "ElasticMQ needs Java 11+"
  need curl "the readiness probe calls the SQS API"
  fetch_jars
  take_start_lock "$((ELASTICMQ_START_TIMEOUT + 60))"

  jvm_already_running "$ELASTICMQ_PORT" sqs_answers "http://$HOST:$ELASTICMQ_PORT" \
    "an SQS server (set ELASTICMQ_PORT)" && return 0

  reset_data_dir
  write_config

  log "starting on http://$HOST:$ELASTICMQ_PORT (data: $ELASTICMQ_DATA_DIR) …"
  # shellcheck disable=SC2086 # ELASTICMQ_HEAP_OPTS is a list of flags
  jvm_launch $ELASTICMQ_HEAP_OPTS -XX:+UseSerialGC -Djava.awt.headless=true \
    -Dconfig.file="$ELASTICMQ_DATA_DIR/elasticmq.conf" \
    -cp "$LIB/*" org.elasticmq.server.Main
  jvm_wait_ready "$ELASTICMQ_START_TIMEOUT" "$t0" sqs_answers "http://$HOST:$ELASTICMQ_PORT" "$LOG_FILE"
}

jvm_main "${1:-}"
