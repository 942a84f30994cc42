import { Controller, Get } from '@nestjs/common';
import { OutboxAdmin } from '../../lib';
import { type OutboxStats } from '../../lib/admin';

/** Operator view of the outbox: counts by status and the age of the oldest pending message. */
@Controller('outbox')
export class OutboxStatsController {
  constructor(private readonly outbox: OutboxAdmin) {}

  @Get('stats')
  stats(): Promise<OutboxStats> {
    return this.outbox.stats();
  }
}
