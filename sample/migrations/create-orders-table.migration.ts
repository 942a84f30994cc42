import { Table, type MigrationInterface, type QueryRunner } from 'typeorm';

/** The orders table, for PostgreSQL, MySQL/MariaDB and SQLite. Runs after the outbox migration. */
export class CreateOrdersTable1763800000100 implements MigrationInterface {
  readonly name = 'CreateOrdersTable1763800000100';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.createTable(
      new Table({
        name: 'orders',
        columns: [
          { name: 'id', type: 'varchar', length: '36', isPrimary: true },
          { name: 'customer_id', type: 'varchar', length: '64' },
          { name: 'total', type: 'decimal', precision: 12, scale: 2 },
          { name: 'created_at', ...createdAt(queryRunner.connection.options.type) },
        ],
      }),
      true,
    );
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.dropTable('orders', true);
  }
}

// The column type and default TypeORM's @CreateDateColumn expects on each database.
function createdAt(type: string): { type: string; precision?: number; default: string } {
  switch (type) {
    case 'postgres':
      return { type: 'timestamp', default: 'now()' };
    case 'mysql':
    case 'mariadb':
      return { type: 'datetime', precision: 6, default: 'CURRENT_TIMESTAMP(6)' };
    default:
      return { type: 'datetime', default: "(datetime('now'))" };
  }
}
