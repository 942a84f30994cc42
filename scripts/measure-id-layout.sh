#!/usr/bin/env bash
# Table + index size of the MySQL/MariaDB outbox table with CHAR(36) and with BINARY(16) message
# ids, for N rows (default 200000) of UUIDv7-like ids, after ANALYZE TABLE. Uses the mysql/mariadb
# client on 127.0.0.1:3306 (root, database test, or MYSQL_* variables).
set -euo pipefail
N=${1:-200000}
MYSQL=(${MYSQL_CLIENT:-mariadb} -h "${MYSQL_HOST:-127.0.0.1}" -P "${MYSQL_PORT:-3306}" -u "${MYSQL_USER:-root}" "${MYSQL_DATABASE:-test}")
for layout in "CHAR(36) CHARACTER SET ascii" "BINARY(16)"; do
  if [[ $layout == BINARY* ]]; then t=outbox_size_bin; id="UNHEX(REPLACE(u, '-', ''))"; else t=outbox_size_char; id=u; fi
  "${MYSQL[@]}" <<SQL
DROP TABLE IF EXISTS $t;
CREATE TABLE $t (
  id BIGINT NOT NULL AUTO_INCREMENT, message_id $layout NOT NULL,
  topic VARCHAR(255) NOT NULL, message_key VARCHAR(255) NULL, event_type VARCHAR(255) NOT NULL,
  payload LONGTEXT NOT NULL, headers TEXT NOT NULL,
  status VARCHAR(16) CHARACTER SET ascii NOT NULL DEFAULT 'pending', attempts INT NOT NULL DEFAULT 0,
  available_at DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)), locked_by VARCHAR(128) NULL,
  lock_token CHAR(36) CHARACTER SET ascii NULL, locked_until DATETIME(6) NULL, last_error TEXT NULL,
  last_attempt_at DATETIME(6) NULL, created_at DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
  delivered_at DATETIME(6) NULL, dead_at DATETIME(6) NULL,
  payload_encoding VARCHAR(16) NOT NULL DEFAULT 'json', content_type VARCHAR(255) NULL,
  payload_bytes LONGBLOB NULL, broker_attributes TEXT NULL,
  PRIMARY KEY (id), UNIQUE KEY ${t}_message_id_key (message_id),
  KEY ${t}_pending_idx (status, available_at, id), KEY ${t}_key_idx (message_key, status, id),
  KEY ${t}_done_idx (status, delivered_at, dead_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
INSERT INTO $t (message_id, topic, message_key, event_type, payload, headers)
SELECT $id, 'orders', CONCAT('order-', n MOD 5000), 'order.created', CONCAT('{"n":', n, '}'), '{}'
FROM (
  SELECT n, CONCAT(SUBSTR(h,1,8),'-',SUBSTR(h,9,4),'-',SUBSTR(h,13,4),'-',SUBSTR(h,17,4),'-',SUBSTR(h,21,12)) AS u
  FROM (
    -- UUIDv7 shape: 48-bit millisecond time, version 7, variant 10, the rest random-looking.
    SELECT seq AS n,
      LOWER(CONCAT(LPAD(HEX(1763800000000 + seq), 12, '0'), '7', SUBSTR(MD5(seq), 1, 3), '8', SUBSTR(MD5(seq), 4, 15))) AS h
    FROM seq_1_to_$N
  ) AS s
) AS x
ORDER BY n;
SQL
done
"${MYSQL[@]}" -e "ANALYZE TABLE outbox_size_char, outbox_size_bin\G" >/dev/null
"${MYSQL[@]}" -e "SELECT TABLE_NAME, TABLE_ROWS, DATA_LENGTH, INDEX_LENGTH, DATA_LENGTH + INDEX_LENGTH AS total
FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN ('outbox_size_char', 'outbox_size_bin');
SELECT INDEX_NAME, TABLE_NAME, ROUND(stat_value * @@innodb_page_size) AS bytes FROM mysql.innodb_index_stats
WHERE database_name = DATABASE() AND table_name IN ('outbox_size_char', 'outbox_size_bin') AND stat_name = 'size' ORDER BY index_name, table_name;"
"${MYSQL[@]}" -e "DROP TABLE outbox_size_char, outbox_size_bin"
