import { Module } from '@nestjs/common';
import { OrderEventsController } from './order-events.controller';

/** Handlers of the events the orders service publishes (served by the connected microservice). */
@Module({
  controllers: [OrderEventsController],
})
export class ConsumerModule {}
