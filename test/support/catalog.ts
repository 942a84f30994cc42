import type { DataSource } from 'typeorm';

// What a database's catalog holds under a table's name: its tables, indexes, sequences, types,
// constraints, triggers and routines, for the checks that a tear-down left nothing behind.

/** The names of the database's objects that are `table` or start with `<table>_`. */
export async function objectsNamedAfter(ds: DataSource, table: string): Promise<string[]> {
  const prefix = `${table}_`;
  const type = ds.options.type;
  const rows: { name: string }[] =
    type === 'postgres'
      ? await ds.query(
          `SELECT relname AS name FROM pg_class WHERE relname = $1 OR starts_with(relname, $2)
           UNION ALL SELECT conname FROM pg_constraint WHERE starts_with(conname, $2)
           UNION ALL SELECT typname FROM pg_type WHERE typname = $1 OR starts_with(typname, $2)
           UNION ALL SELECT proname FROM pg_proc WHERE starts_with(proname, $2)`,
          [table, prefix],
        )
      : type === 'mariadb' || type === 'mysql'
        ? await ds.query(
            `SELECT TABLE_NAME AS name FROM information_schema.TABLES
              WHERE TABLE_SCHEMA = DATABASE() AND (TABLE_NAME = ? OR LEFT(TABLE_NAME, ?) = ?)
             UNION ALL SELECT TRIGGER_NAME FROM information_schema.TRIGGERS
              WHERE TRIGGER_SCHEMA = DATABASE() AND LEFT(TRIGGER_NAME, ?) = ?
             UNION ALL SELECT ROUTINE_NAME FROM information_schema.ROUTINES
              WHERE ROUTINE_SCHEMA = DATABASE() AND LEFT(ROUTINE_NAME, ?) = ?`,
            [table, prefix.length, prefix, prefix.length, prefix, prefix.length, prefix],
          )
        : await ds.query(
            `SELECT name FROM sqlite_master WHERE name = ? OR substr(name, 1, ?) = ?
              OR tbl_name = ? OR substr(tbl_name, 1, ?) = ?`,
            [table, prefix.length, prefix, table, prefix.length, prefix],
          );
  return rows.map((row) => row.name).sort();
}
