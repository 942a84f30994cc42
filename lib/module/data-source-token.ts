import { DataSource } from 'typeorm';

/** The token @nestjs/typeorm registers a DataSource under (as its `getDataSourceToken` does). */
export function dataSourceToken(name: string): string | typeof DataSource {
  return name === 'default' ? DataSource : `${name}DataSource`;
}
