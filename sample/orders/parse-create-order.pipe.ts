import { BadRequestException, Injectable, type PipeTransform } from '@nestjs/common';
import { CreateOrderDto } from './create-order.dto';

const FIELDS = new Set(['customerId', 'total']);
const MAX_TOTAL = 9_999_999_999.99;

/**
 * Validates the body of `POST /orders` and answers 400 with every problem found, in the shape
 * Nest's ValidationPipe uses (`message` is a list), without a validation library.
 */
@Injectable()
export class ParseCreateOrderPipe implements PipeTransform<unknown, CreateOrderDto> {
  transform(body: unknown): CreateOrderDto {
    if (typeof body !== 'object' || body === null || Array.isArray(body)) {
      throw new BadRequestException([
        'body must be a JSON object like {"customerId": "c-1", "total": 42.5}',
      ]);
    }
    const { customerId, total } = body as Record<string, unknown>;
    const problems: string[] = [];
    if (typeof customerId !== 'string' || customerId.trim() === '' || customerId.length > 64) {
      problems.push('customerId must be a non-empty string of at most 64 characters');
    }
    if (typeof total !== 'number' || !Number.isFinite(total) || total <= 0 || total > MAX_TOTAL) {
      problems.push(`total must be a number above 0 and at most ${MAX_TOTAL}`);
    } else if (Math.round(total * 100) / 100 !== total) {
      problems.push('total must have at most two decimals');
    }
    for (const name of Object.keys(body)) {
      if (!FIELDS.has(name)) problems.push(`property ${name} should not exist`);
    }
    if (problems.length > 0) throw new BadRequestException(problems);
    return new CreateOrderDto(customerId as string, total as number);
  }
}
