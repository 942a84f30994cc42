# shellcheck shell=bash
# What the project's JVM services share (scripts/kafka.sh, scripts/kafka-connect.sh,
# scripts/elasticmq.sh): fetch a runtime classpath from Maven Central with `mvn` once, start one
# java process detached with a pid file, wait until it answers, and stop only what we started.
# Sourced, never run. The sourcing script sets, before calling anything here:
#
#   SERVICE       its name, for messages                   (e.g. kafka)
#   DATA_DIR      config, pid and logs; wiped on start if it is ours
#   PID_FILE      the pid of the process `start` started
#   LOG_FILE      the process's stdout and stderr
#   ADOPT_PATTERN pgrep -f pattern matching that process, to find it again when the pid file
#                 was lost (e.g. two starts raced)
#   HOST          the address it listens on               (127.0.0.1)
#   MARKER        optional: the file that marks DATA_DIR as ours (default .nestjs-outbox-$SERVICE in it)

if [[ -n "${JAVA_HOME:-}" && -x "$JAVA_HOME/bin/java" ]]; then
  JAVA="$JAVA_HOME/bin/java"
else
  JAVA="java"
fi
DEPENDENCY_PLUGIN="org.apache.maven.plugins:maven-dependency-plugin:3.8.1"

log() { printf '%s: %s\n' "$SERVICE" "$*"; }
die() {
  printf '%s: error: %s\n' "$SERVICE" "$*" >&2
  exit 1
}
need() { command -v "$1" >/dev/null 2>&1 || die "'$1' not found on PATH ($2)"; }

# mvn, quiet, in `dir`, its output to `logf` (shown on failure by the caller).
mvn_quiet() { # dir log-file args...
  local dir=$1 logf=$2
  shift 2
  (cd "$dir" && mvn -B -q -ntp -Dstyle.color=never "$@") >"$logf" 2>&1
}

# Resolves the runtime dependencies of `pom` (test-scoped ones are never resolved, so a test
# dependency missing from Maven Central cannot fail the fetch) into `lib`, atomically: `lib`
# appears complete, with a .complete marker, or not at all. `expect` is a jar that must be there.
jvm_fetch_classpath() { # home-dir lib-dir pom-text expect-jar what
  local home=$1 lib=$2 pom=$3 expect=$4 what=$5
  [[ -f "$lib/.complete" ]] && return 0
  need mvn "needed once to fetch $what from Maven Central"
  mkdir -p "$home"
  log "fetching $what into $lib …"
  printf '%s\n' "$pom" >"$home/pom.xml"
  local tmp="$lib.tmp.$$" logf="$home/mvn-$(basename "$lib").log"
  rm -rf "$tmp"
  if ! mvn_quiet "$home" "$logf" -f pom.xml "$DEPENDENCY_PLUGIN:copy-dependencies" \
    -DincludeScope=runtime -DoutputDirectory="$tmp"; then
    tail -n 40 "$logf" >&2 || true
    rm -rf "$tmp"
    die "mvn could not fetch $what (log: $logf)"
  fi
  [[ -f "$tmp/$expect" ]] || die "$expect missing after mvn (log: $logf)"
  rm -rf "$lib"
  mv "$tmp" "$lib"
  touch "$lib/.complete"
  log "cached $(find "$lib" -name '*.jar' | wc -l) jars"
}

port_open() { # port
  timeout 2 bash -c "exec 3<>/dev/tcp/$HOST/$1" 2>/dev/null
}

# A process of ours whose pid file was lost: adopt it, so that stop can find it.
adopt_running() {
  local pid
  pid="$(pgrep -f -- "$ADOPT_PATTERN" | head -n 1 || true)"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  echo "$pid" >"$PID_FILE"
}

pid_alive() {
  local pid
  [[ -f "$PID_FILE" ]] || adopt_running || return 1
  pid="$(cat "$PID_FILE" 2>/dev/null || true)"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null
}

# Last 50 lines of each log file given (that exists and is not empty), to stderr.
show_logs() { # files...
  local f
  for f in "$@"; do
    if [[ -s "$f" ]]; then
      printf -- '--- %s (last 50 lines)\n' "$f" >&2
      tail -n 50 "$f" >&2 || true
    fi
  done
}

# One start at a time: two runs that both find the port closed would otherwise both wipe the
# data dir and start a process, and each kill the other's half-started one. The second waits
# here and then finds the first one's process answering. Holds fd 9 until the script exits.
take_start_lock() { # seconds
  mkdir -p "$(dirname "$DATA_DIR")"
  exec 9>"$DATA_DIR.start.lock"
  flock -w "$1" 9 || die "another '$SERVICE start' held the start lock for too long"
}

# Wipes the data dir, but only if it is ours (or empty, or absent).
reset_data_dir() {
  local marker="${MARKER:-$DATA_DIR/.nestjs-outbox-$SERVICE}"
  if [[ -d "$DATA_DIR" && ! -f "$marker" ]] && [[ -n "$(ls -A "$DATA_DIR" 2>/dev/null)" ]]; then
    die "$DATA_DIR is not empty and was not created by this script; refusing to wipe it (set its *_DATA_DIR variable)"
  fi
  rm -rf "$DATA_DIR"
  mkdir -p "$DATA_DIR"
  touch "$marker"
}

# Starts `java args...` detached (its own session, nohup), output to LOG_FILE, pid to PID_FILE.
jvm_launch() { # java-args...
  # The process outlives this script: it must not keep the descriptors it was started with (the
  # start lock, a caller's `flock` file, a test runner's pipe), or those locks are never released.
  (
    for fd in /proc/$BASHPID/fd/*; do
      fd=${fd##*/}
      if ((fd > 2)); then eval "exec $fd>&-" 2>/dev/null || true; fi
    done
    exec nohup setsid "$JAVA" "$@" >"$LOG_FILE" 2>&1 </dev/null
  ) &
  echo "$!" >"$PID_FILE"
}

# Waits until `ready` succeeds; on the process's death or the timeout, shows the logs, stops it
# and exits 1. `t0` is when the start began ($SECONDS), for the message.
jvm_wait_ready() { # timeout-seconds t0 ready-command where logs...
  local timeout=$1 t0=$2 ready=$3 where=$4
  shift 4
  local pid deadline=$((SECONDS + timeout))
  pid="$(cat "$PID_FILE")"
  while ((SECONDS < deadline)); do
    if ! kill -0 "$pid" 2>/dev/null; then
      log "the process exited during startup; last log lines:" >&2
      show_logs "$@"
      rm -f "$PID_FILE"
      exit 1
    fi
    if "$ready"; then
      log "ready on $where in $((SECONDS - t0))s (pid $pid)"
      return 0
    fi
    sleep 0.5
  done
  log "not ready after ${timeout}s; last log lines:" >&2
  show_logs "$@"
  cmd_stop >&2
  exit 1
}

# Stops the process `start` started (TERM, then KILL after `grace` seconds); leaves alone
# anything else answering on `port`.
jvm_stop() { # port [grace-seconds]
  local port=${1:-} grace=${2:-20}
  if ! pid_alive; then
    rm -f "$PID_FILE"
    if [[ -n "$port" ]] && port_open "$port"; then
      log "nothing started by this script, but something answers on $HOST:$port (left alone)"
    else
      log "not running"
    fi
    return 0
  fi
  local pid i
  pid="$(cat "$PID_FILE")"
  log "stopping (pid $pid) …"
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < grace * 2; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.5
  done
  if kill -0 "$pid" 2>/dev/null; then
    log "still alive after ${grace}s, sending KILL"
    kill -KILL "$pid" 2>/dev/null || true
    for ((i = 0; i < 20; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.25
    done
  fi
  rm -f "$PID_FILE"
  log "stopped"
}

# `start|stop|status` of the sourcing script, to its cmd_start, cmd_stop and cmd_status.
jvm_main() { # command
  case "${1:-}" in
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    *)
      echo "usage: $(basename "$0") start|stop|status" >&2
      exit 2
      ;;
  esac
}
