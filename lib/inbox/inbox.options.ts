import type { DataSource } from 'typeorm';
import type { InboxTableOptions } from './inbox.interfaces';

/** Options of `InboxModule.forRoot()` / `forRootAsync()`. */
export interface InboxModuleOptions extends InboxTableOptions {
  /**
   * The TypeORM DataSource whose database holds the inbox table and the handlers' business
   * tables, or the name it was registered under with `@nestjs/typeorm`.
   * @default 'default' (the unnamed `TypeOrmModule.forRoot()` connection)
   */
  dataSource?: DataSource | string;
}

/** Given beside the options (not by an async factory): they decide how the module is registered. */
export interface InboxModuleExtras {
  /** Register `InboxService` globally. @default true */
  isGlobal?: boolean;
}
