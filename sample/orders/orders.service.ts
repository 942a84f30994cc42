import { randomUUID } from 'node:crypto';
import { Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';
import { OutboxService } from '../../lib';
import type { CreateOrderDto } from './create-order.dto';
import { OrderCreated } from './order-created.event';
import { Order } from './order.entity';

@Injectable()
export class OrdersService {
  constructor(
    private readonly dataSource: DataSource,
    private readonly outbox: OutboxService,
  ) {}

  /**
   * Saves the order and its `OrderCreated` event in one transaction: both commit or neither does.
   * The event is published after the commit by the outbox dispatcher, never from here.
   */
  create(dto: CreateOrderDto): Promise<Order> {
    return this.dataSource.transaction(async (manager) => {
      const order = await manager.save(
        manager.create(Order, { id: randomUUID(), customerId: dto.customerId, total: dto.total }),
      );
      await this.outbox.enqueue(new OrderCreated(order.id, order.customerId, order.total), manager);
      return order;
    });
  }

  findOne(id: string): Promise<Order | null> {
    return this.dataSource.getRepository(Order).findOneBy({ id });
  }
}
