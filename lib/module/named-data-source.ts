import { Inject, Injectable } from '@nestjs/common';
import type { ModuleRef } from '@nestjs/core';
import type { DataSource } from 'typeorm';

/**
 * The DataSource @nestjs/typeorm registered under `name`, once its (async) factory has created
 * it. `moduleRef.get()` alone answers null while that factory is still connecting, so the
 * DataSource is taken through the injector, which waits for a provider like any dependency.
 * `unknown(problem, fix)` builds the error thrown when no DataSource has that name.
 */
export async function resolveNamedDataSource(
  moduleRef: ModuleRef,
  name: string,
  unknown: (problem: string, fix: string) => Error,
): Promise<DataSource> {
  // Loaded here, on the one path that needs TypeORM's own class (the default DataSource's token),
  // so that the core loads without TypeORM for an app on another library (`connection`).
  const { dataSourceToken } = await import('./data-source-token');
  const token = dataSourceToken(name);
  try {
    moduleRef.get(token, { strict: false });
  } catch {
    throw unknown(
      `no DataSource is registered under the name "${name}"`,
      `Register it with TypeOrmModule.forRoot({ name: '${name}', ... }) or forRootAsync({ name: ` +
        `'${name}', ... }) ('default' is the unnamed one), or pass the DataSource itself.`,
    );
  }
  @Injectable()
  class NamedDataSource {
    constructor(@Inject(token) readonly dataSource: DataSource) {}
  }
  const { dataSource } = await moduleRef.create(NamedDataSource);
  return dataSource;
}
