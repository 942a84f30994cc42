import { Column, CreateDateColumn, Entity, PrimaryColumn, type ValueTransformer } from 'typeorm';

// DECIMAL comes back as a string from PostgreSQL and MySQL; the API deals in numbers.
const decimal: ValueTransformer = {
  to: (value: number) => value,
  from: (value: string | number | null) => (value === null ? null : Number(value)),
};

@Entity('orders')
export class Order {
  /** A UUID assigned by the service, so the event can carry it before the row is flushed. */
  @PrimaryColumn({ type: 'varchar', length: 36 })
  id!: string;

  @Column({ name: 'customer_id', type: 'varchar', length: 64 })
  customerId!: string;

  @Column({ type: 'decimal', precision: 12, scale: 2, transformer: decimal })
  total!: number;

  @CreateDateColumn({ name: 'created_at' })
  createdAt!: Date;
}
