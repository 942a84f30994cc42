/**
 * node-postgres for the hand-written relays, typed locally (the project has no @types/pg): only
 * what the bench uses.
 */
export interface PgConfig {
  host?: string;
  port?: number;
  user?: string;
  password?: string;
  database?: string;
  max?: number;
}

export interface PgResult<T> {
  rows: T[];
  rowCount: number | null;
}

export interface PgQueryable {
  query<T = Record<string, unknown>>(
    text: string | { name?: string; text: string; values?: unknown[] },
    values?: unknown[],
  ): Promise<PgResult<T>>;
}

export interface PgPoolClient extends PgQueryable {
  release(error?: unknown): void;
}

export interface Pool extends PgQueryable {
  connect(): Promise<PgPoolClient>;
  end(): Promise<void>;
}

export interface Client extends PgQueryable {
  connect(): Promise<void>;
  end(): Promise<void>;
}

// eslint-disable-next-line @typescript-eslint/no-require-imports
const pg = require('pg') as {
  Pool: new (config: PgConfig) => Pool;
  Client: new (config: PgConfig) => Client;
};

export const Pool = pg.Pool;
export const Client = pg.Client;
