import {
  BadRequestException,
  Body,
  HttpCode,
  HttpException,
  HttpStatus,
  Inject,
  Post,
  Res,
  ServiceUnavailableException,
} from '@nestjs/common';
import { OutboxAdminInputError } from '../../errors/outbox-admin-input.error';
import { OutboxRedriveRefusedError } from '../../errors/outbox-redrive-refused.error';
import type { GapRepairAnswer, GapRepairRequest } from '../../module/admin/gap-repair.interfaces';
import { OutboxGapRepairer } from '../../module/admin/outbox-gap-repair';

/** The part of the response the route sets: a header on a rate-limited answer. */
interface HeaderSink {
  setHeader?(name: string, value: string): unknown;
  header?(name: string, value: string): unknown;
  status?(code: number): unknown;
  code?(code: number): unknown;
}

/**
 * `POST <path>`: one gap-repair request in the body (JSON), its answer back. 200 with the
 * answer; 429 with the answer and `Retry-After` when rate-limited; 400 for a bad request; 503
 * when the audit table cannot be written (nothing sent). Mounted under the module's path by
 * `OutboxGapRepairModule`, one subclass per mount.
 */
export class OutboxGapRepairController {
  constructor(@Inject(OutboxGapRepairer) private readonly repairer: OutboxGapRepairer) {}

  @Post()
  @HttpCode(HttpStatus.OK)
  async repair(
    @Body() body: GapRepairRequest,
    @Res({ passthrough: true }) response: HeaderSink,
  ): Promise<GapRepairAnswer> {
    let answer: GapRepairAnswer;
    try {
      answer = await this.repairer.answer(body);
    } catch (error) {
      if (error instanceof OutboxAdminInputError) throw new BadRequestException(error.message);
      if (error instanceof OutboxRedriveRefusedError) {
        throw new ServiceUnavailableException(error.message);
      }
      throw error;
    }
    if (answer.status === 'rate-limited') {
      const seconds = String(Math.max(1, Math.ceil((answer.retryAfterMs ?? 1000) / 1000)));
      // Express has setHeader, Fastify's reply header(): either adapter.
      if (response.setHeader !== undefined) response.setHeader('Retry-After', seconds);
      else response.header?.('Retry-After', seconds);
      throw new HttpException(answer, HttpStatus.TOO_MANY_REQUESTS);
    }
    return answer;
  }
}
