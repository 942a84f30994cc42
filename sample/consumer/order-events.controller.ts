import { Controller, Logger } from '@nestjs/common';
import { Ctx, EventPattern, Payload, RmqContext, type BaseRpcContext } from '@nestjs/microservices';
import type { OutboxEnvelope } from '../../lib/publishers/microservices';
import type { OrderCreated } from '../orders/order-created.event';

// The part of amqplib's Channel the handler uses.
interface AckChannel {
  ack(message: unknown): void;
}

type OrderCreatedData = Pick<OrderCreated, 'orderId' | 'customerId' | 'total'>;

// How many recent message ids are remembered for deduplication. A real consumer records the ids
// it processed in its own database, in the transaction of its side effects.
const REMEMBERED_IDS = 10_000;

/**
 * The consuming side, in the same process for the sake of the sample: a Nest microservice handler
 * for `order.created` events (the pattern is the event type on every transport). Delivery is at
 * least once, so it deduplicates on the outbox message id.
 */
@Controller()
export class OrderEventsController {
  private readonly logger = new Logger(OrderEventsController.name);
  private readonly seen = new Set<string>();

  @EventPattern('order.created')
  onOrderCreated(@Payload() data: unknown, @Ctx() context: BaseRpcContext): void {
    try {
      const event = this.read(data, context);
      if (event === undefined) {
        this.logger.warn('ignored an order.created message without a message id or order id');
      } else if (this.seen.has(event.messageId)) {
        this.logger.log(
          `duplicate order.created for order ${event.payload.orderId} ignored (message ${event.messageId})`,
        );
      } else {
        this.remember(event.messageId);
        this.logger.log(
          `received order.created for order ${event.payload.orderId} (message ${event.messageId})`,
        );
      }
    } finally {
      // RabbitMQ runs with manual acks: the message leaves the queue only once handled.
      if (context instanceof RmqContext) {
        (context.getChannelRef() as AckChannel).ack(context.getMessage());
      }
    }
  }

  /**
   * RabbitMQ carries the message id as an AMQP property and the event as the body; the other
   * transports carry the publisher's envelope `{ messageId, type, key, headers, payload }`.
   */
  private read(
    data: unknown,
    context: BaseRpcContext,
  ): { messageId: string; payload: OrderCreatedData } | undefined {
    let messageId: unknown;
    let payload: unknown;
    if (context instanceof RmqContext) {
      messageId = (context.getMessage() as { properties?: { messageId?: unknown } }).properties
        ?.messageId;
      payload = data;
    } else {
      const envelope = data as Partial<OutboxEnvelope<OrderCreatedData>> | null;
      messageId = envelope?.messageId;
      payload = envelope?.payload;
    }
    if (
      typeof messageId !== 'string' ||
      typeof (payload as Partial<OrderCreatedData> | null)?.orderId !== 'string'
    ) {
      return undefined;
    }
    return { messageId, payload: payload as OrderCreatedData };
  }

  private remember(messageId: string): void {
    this.seen.add(messageId);
    if (this.seen.size > REMEMBERED_IDS) {
      const oldest = this.seen.values().next().value;
      if (oldest !== undefined) this.seen.delete(oldest);
    }
  }
}
