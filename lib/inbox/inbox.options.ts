import type { DataSource } from 'typeorm';
import type { OutboxConnection } from '../store/ports/outbox-connection';
import type { InboxOptions } from './inbox.interfaces';

/** Options of `InboxModule.forRoot()` / `forRootAsync()`. */
export interface InboxModuleOptions extends InboxOptions {
  /**
   * The TypeORM DataSource whose database holds the inbox table and the handlers' business
   * tables, or the name it was registered under with `@nestjs/typeorm`.
   * @default 'default' (the unnamed `TypeOrmModule.forRoot()` connection)
   */
  dataSource?: DataSource | string;
  /**
   * Instead of a DataSource: the outbox connection of your database library (`pgOutbox(pool)`,
   * `prismaOutbox(prisma)`, `drizzleOutbox(db)` …), for apps without TypeORM. Record ids with
   * `InboxService.recordOnce(tx, entry)` in your own transactions. Give this or `dataSource`.
   */
  connection?: OutboxConnection<unknown>;
}

/** Given beside the options (not by an async factory): they decide how the module is registered. */
export interface InboxModuleExtras {
  /** Register `InboxService` globally. @default true */
  isGlobal?: boolean;
}
