import { OutboxEvent } from '../../lib';

/**
 * Published once an order is committed. The outbox writes it in the order's transaction, so it is
 * sent if and only if the order exists; the order id keys it, keeping one order's events in order.
 */
@OutboxEvent({ topic: 'orders.created', type: 'order.created', key: 'orderId' })
export class OrderCreated {
  constructor(
    readonly orderId: string,
    readonly customerId: string,
    readonly total: number,
  ) {}
}
