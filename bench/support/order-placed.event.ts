import { OutboxEvent } from '../../lib';

/** The enqueue scenarios' keyed event (1 KiB of `pad` in most of them). */
@OutboxEvent({ topic: 'orders', type: 'order.created', key: (e: OrderPlaced) => e.key })
export class OrderPlaced {
  constructor(
    readonly seq: number,
    readonly key: string,
    readonly pad: string,
  ) {}
}
