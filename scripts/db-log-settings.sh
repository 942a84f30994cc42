#!/usr/bin/env bash
# Turn on what log tailing and Debezium read on this machine's servers, restarting a server only
# when a setting changes:
#   PostgreSQL: wal_level = logical (and room for replication slots and WAL senders)
#   MariaDB:    the binlog in ROW format with full row images, a server id
# Users set the same on their own servers: docs/log-tailing.md and docs/debezium.md.
set -euo pipefail
# The servers the tests use (PGPORT, MYSQL_PORT as in CONTRIBUTING.md; psql reads PGPORT itself).
pg_port=${PGPORT:-5432}
mysql_port=${MYSQL_PORT:-3306}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
wait_port() { for _ in $(seq 1 60); do port_open "$1" && return 0; sleep 1; done; echo "db-log-settings: :$1 did not come back" >&2; return 1; }

pg() { psql -h 127.0.0.1 -p "$pg_port" -U postgres -d postgres -Atqc "$1"; }
if [ "$(pg 'SHOW wal_level')" != logical ]; then
  # Only the machine's own cluster is restarted here; a server elsewhere is its owner's to set.
  [ "$pg_port" = 5432 ] || { echo "db-log-settings: set wal_level = logical on the server at :$pg_port" >&2; exit 1; }
  echo "== PostgreSQL: wal_level = logical (restart)"
  pg "ALTER SYSTEM SET wal_level = 'logical'"
  pg "ALTER SYSTEM SET max_replication_slots = 20"
  pg "ALTER SYSTEM SET max_wal_senders = 20"
  cluster=$(ls /etc/postgresql)
  pg_ctlcluster --skip-systemctl-redirect "$cluster" main restart
  wait_port "$pg_port"
fi
echo "== PostgreSQL wal_level: $(pg 'SHOW wal_level')"

my() { mysql -h 127.0.0.1 -P "$mysql_port" -u root -Nse "$1"; }
if [ "$(my 'SELECT @@log_bin')" != 1 ] || [ "$(my 'SELECT @@binlog_format')" != ROW ]; then
  [ "$mysql_port" = 3306 ] || { echo "db-log-settings: turn on the ROW binlog on the server at :$mysql_port" >&2; exit 1; }
  echo "== MariaDB: binlog in ROW format (restart)"
  conf=/etc/mysql/my.cnf
  if ! grep -q 'nestjs-outbox: binlog' "$conf"; then
    cat >>"$conf" <<'CNF'

# nestjs-outbox: binlog for log tailing and Debezium (scripts/db-log-settings.sh)
[mysqld]
server-id = 1
log-bin = mysql-bin
binlog-format = ROW
binlog-row-image = FULL
binlog-row-metadata = FULL
expire-logs-days = 1
CNF
  fi
  mysqladmin -h 127.0.0.1 -P "$mysql_port" -u root shutdown || true
  for _ in $(seq 1 60); do pgrep -x mariadbd >/dev/null || break; sleep 1; done
  start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd
  wait_port "$mysql_port"
fi
echo "== MariaDB log_bin=$(my 'SELECT @@log_bin') binlog_format=$(my 'SELECT @@binlog_format') server_id=$(my 'SELECT @@server_id')"
