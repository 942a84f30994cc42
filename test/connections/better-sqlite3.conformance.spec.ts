import { betterSqlite3SqlPort } from '../../lib/connections/better-sqlite3';
import { outboxStoreConformance } from '../store/outbox-store.conformance';
import { betterSqlite3Target, sqliteFile } from './driver-targets';
import { sleep } from '../support/wait-for';

// The better-sqlite3 port: the store conformance suite on a SQLite file, and what the one
// connection asks of the port's own transactions, which the suite does not cover.
outboxStoreConformance(betterSqlite3Target, []);

describe('better-sqlite3 SQL port: one connection', () => {
  let sqlite: ReturnType<typeof sqliteFile>;
  beforeEach(() => {
    sqlite = sqliteFile();
    sqlite.db.exec('CREATE TABLE log (n INTEGER NOT NULL)');
  });
  afterEach(() => sqlite.remove());

  const count = (): number =>
    Number((sqlite.db.prepare('SELECT count(*) AS n FROM log').all()[0] as { n: number }).n);

  it('runs its transactions one after the other, each committed or rolled back whole', async () => {
    const sql = betterSqlite3SqlPort(sqlite.db);
    const pause = () => sleep(10);
    const seen: number[] = [];
    const writer = (n: number, fail: boolean) =>
      sql.transaction(async (tx) => {
        await tx.query('INSERT INTO log (n) VALUES (?)', [n]);
        await pause();
        await tx.query('INSERT INTO log (n) VALUES (?)', [n]);
        const { rows } = await tx.query<{ c: number }>('SELECT count(*) AS c FROM log');
        seen.push(Number(rows[0]?.c));
        if (fail) throw new Error(`writer ${n} fails`);
      });
    const outcomes = await Promise.allSettled([
      writer(1, false),
      writer(2, true),
      writer(3, false),
    ]);
    expect(outcomes.map((o) => o.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
    // Interleaved, a writer would see another's uncommitted rows (or fail to BEGIN at all).
    expect(seen).toEqual([2, 4, 4]);
    const { rows } = await sql.query<{ n: number }>('SELECT n FROM log ORDER BY rowid');
    expect(rows.map((r) => r.n)).toEqual([1, 1, 3, 3]);
  });

  it('waits for an application transaction open on the connection instead of joining it', async () => {
    const sql = betterSqlite3SqlPort(sqlite.db);
    sqlite.db.exec('BEGIN IMMEDIATE');
    sqlite.db.prepare('INSERT INTO log (n) VALUES (1)').run();
    const ours = sql.transaction((tx) => tx.query('INSERT INTO log (n) VALUES (2)'));
    await sleep(50);
    // The app rolls back: had the port's insert joined its transaction, it would go too.
    sqlite.db.exec('ROLLBACK');
    await ours;
    expect(count()).toBe(1);
    const { rows } = await sql.query<{ n: number }>('SELECT n FROM log');
    expect(rows).toEqual([{ n: 2 }]);
  });

  it('reports the rows a write with RETURNING changed, and none for a SELECT', async () => {
    const sql = betterSqlite3SqlPort(sqlite.db);
    const inserted = await sql.query('INSERT INTO log (n) VALUES (1), (2), (3) RETURNING n');
    expect([inserted.rows.length, inserted.affected]).toEqual([3, 3]);
    expect((await sql.query('UPDATE log SET n = n + 1 WHERE n > 1')).affected).toBe(2);
    const read = await sql.query('SELECT n FROM log');
    expect([read.rows.length, read.affected]).toEqual([3, 0]);
    expect(sql.databaseFile).toBe(sqlite.file);
  });
});
