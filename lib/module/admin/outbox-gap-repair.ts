import { OutboxAdminInputError } from '../../errors/outbox-admin-input.error';
import { OutboxOptionsError } from '../../errors/outbox-options.error';
import { UuidV7Generator } from '../../message/uuidv7';
import { OUTBOX_HEADER_REDRIVE_DELAY, OUTBOX_HEADER_SEQUENCE } from '../../outbox.constants';
import { OutboxMessages } from '../../outbox.messages';
import type { NewOutboxRow } from '../../store/ports/outbox-store.port';
import { messageIdText } from '../../store/rows/message-id-codec';
import { storedBytes } from '../../store/rows/outbox-row.mapper';
import {
  REDRIVE_LANE_KEY_HEADER,
  repairLaneOf,
  storedKeyCondition,
} from '../../store/rows/redrive-lane';
import type { SqlParams } from '../../store/shared-sql/sql-params';
import type {
  GapRepairAnswer,
  GapRepairRequest,
  OutboxGapRepairOptions,
} from './gap-repair.interfaces';
import { GapRepairRate } from './gap-repair-rate';
import { OutboxAuditStore } from './outbox-audit.store';
import {
  REDRIVE_ACTION,
  REDRIVE_ID_HEADER,
  REDRIVE_OF_HEADER,
  shownOf,
  type RedriveContext,
  type RedriveRow,
} from './outbox-redrive';

/** The audit log's scope of a gap repair's copies (their action is a re-drive's). */
export const GAP_REPAIR_SCOPE = 'gap-repair';
/** The header naming the consumer whose request a gap-repair copy answers. */
export const GAP_REPAIR_FOR_HEADER = 'x-outbox-gap-repair-for';

const MAX_CONSUMER = 128;
const MAX_MAX_SEQUENCES = 10_000;

/** A candidate row of a requested number, with its status and number (see `rowsOf`). */
interface NumberedRow extends RedriveRow {
  row_status: string;
  seq: string | number | null;
  /** Ms since it was delivered (database clock); null while undelivered. */
  delivered_ms: string | number | null;
}

const invalid = (what: string, problem: string): OutboxAdminInputError =>
  new OutboxAdminInputError(`Invalid gap repair request: ${what} ${problem}.`, what);

function optionOf(value: number | undefined, fallback: number, name: string, max: number): number {
  const n = value ?? fallback;
  if (!Number.isFinite(n) || n <= 0 || n > max) {
    throw new OutboxOptionsError(
      `Invalid gap repair option ${name}: ${String(n)} is not a number above 0 and at most ${max}. ` +
        `Pass a positive number, e.g. ${fallback}.`,
      name,
    );
  }
  return n;
}

/**
 * The producer's answer to a consumer's gap (docs/gap-repair.md): for each number asked of a
 * key on a topic, the rows that carried it (the outbox's and the archive's, copies included)
 * say whether it is still on its way (`pending`), was delivered and is sent again now
 * (`resent`), lies dead (`dead`), or is held by no row (`gone`). Copies are written as a
 * re-drive writes them (new ids, `x-outbox-redrive-of`, through the store's insert, audited in
 * the same transaction), but keep the original's number (a repair fills the consumer's hole; it
 * is not a new message of the key) and queue in the key's repair lane, so they go out at once,
 * not behind what the key still has queued. A number whose copy is still undelivered is
 * `pending`: a second request, from another holder of the key or another consumer instance,
 * writes no second copy.
 */
export class OutboxGapRepairer {
  private readonly ids = new UuidV7Generator();
  private readonly rate: GapRepairRate;
  private readonly maxSequences: number;
  private readonly resendAfterMs: number;
  private readonly audit: OutboxAuditStore;
  private auditChecked = false;
  /** The answer running per topic and key: answers of one key run one after another. */
  private readonly running = new Map<string, Promise<unknown>>();

  constructor(
    private readonly context: RedriveContext,
    options: OutboxGapRepairOptions = {},
  ) {
    if (!context.sequence) {
      throw new OutboxOptionsError(
        'Gap repair needs the producer to number its messages: set ordering: { sequence: true } ' +
          'on OutboxModule (docs/ordering-and-dead-letters.md#sequence-numbers).',
        'ordering.sequence',
      );
    }
    const rate = optionOf(options.ratePerSecond, 5, 'ratePerSecond', 100_000);
    const burst = Math.floor(optionOf(options.burst, 20, 'burst', 100_000));
    this.rate = new GapRepairRate(rate, Math.max(1, burst));
    this.maxSequences = Math.floor(
      optionOf(options.maxSequences, 100, 'maxSequences', MAX_MAX_SEQUENCES),
    );
    this.resendAfterMs = Math.floor(
      optionOf(options.resendAfterMs, 5_000, 'resendAfterMs', 3_600_000),
    );
    this.audit = new OutboxAuditStore(context.sqlPort, options.auditTable ?? context.auditTable);
  }

  /**
   * Answers one request. Bad input throws `OutboxAdminInputError` (HTTP 400); a missing audit
   * table `OutboxRedriveRefusedError` (`no-audit-table`), nothing sent.
   */
  async answer(request: GapRepairRequest): Promise<GapRepairAnswer> {
    const { topic, key, consumer, sequences } = this.checked(request);
    const wait = this.rate.take();
    if (wait > 0) {
      return {
        status: 'rate-limited',
        resent: [],
        pending: [],
        dead: [],
        gone: [],
        repairId: null,
        retryAfterMs: wait,
      };
    }
    // Two requests for one key at once (two held messages, two consumer instances) would each
    // read the original as delivered and each write a copy: one after the other, the second
    // reads the first's copy as pending. Across producer instances they can still meet, and a
    // consumer's inbox then sees the second copy as a duplicate of the number.
    const id = JSON.stringify([topic, key]);
    const before = this.running.get(id) ?? Promise.resolve();
    const mine = before.then(() => this.answerKey(request, topic, key, consumer, sequences));
    const settled = mine.then(
      () => undefined,
      () => undefined,
    );
    this.running.set(id, settled);
    try {
      return await mine;
    } finally {
      if (this.running.get(id) === settled) this.running.delete(id);
    }
  }

  private async answerKey(
    request: GapRepairRequest,
    topic: string,
    key: string,
    consumer: string,
    sequences: readonly number[],
  ): Promise<GapRepairAnswer> {
    const rows = await this.rowsOf(topic, key, sequences);
    const byNumber = new Map<number, NumberedRow[]>();
    for (const row of rows) {
      const n = Number(row.seq);
      byNumber.set(n, [...(byNumber.get(n) ?? []), row]);
    }
    const pending: number[] = [];
    const dead: number[] = [];
    const gone: number[] = [];
    const toCopy: { n: number; row: NumberedRow }[] = [];
    for (const n of sequences) {
      const found = byNumber.get(n) ?? [];
      const delivered = found.find((r) => r.row_status === 'delivered');
      if (
        found.some((r) => r.row_status !== 'delivered' && r.row_status !== 'dead') ||
        found.some((r) => this.copyOnItsWay(r, key))
      ) {
        pending.push(n);
      } else if (delivered !== undefined) {
        toCopy.push({ n, row: delivered });
      } else if (found.length > 0) {
        dead.push(n);
      } else {
        gone.push(n);
      }
    }
    const repairId = toCopy.length === 0 ? null : await this.resend(request, consumer, toCopy);
    return {
      status: 'answered',
      resent: toCopy.map((c) => c.n),
      pending,
      dead,
      gone,
      repairId,
      retryAfterMs: null,
    };
  }

  /**
   * A repair copy delivered less than `resendAfterMs` ago: probably still on its way to the
   * consumer (in a broker queue behind messages the consumer holds unacknowledged, say), so a
   * new request for its number, sent before it arrived, gets no second copy.
   */
  private copyOnItsWay(row: NumberedRow, key: string): boolean {
    return (
      row.row_status === 'delivered' &&
      row.message_key === repairLaneOf(row.topic, key) &&
      row.delivered_ms !== null &&
      Number(row.delivered_ms) < this.resendAfterMs
    );
  }

  /** Writes the copies and their audit entry in one transaction; resolves to the repair's id. */
  private async resend(
    request: GapRepairRequest,
    consumer: string,
    copies: readonly { n: number; row: NumberedRow }[],
  ): Promise<string> {
    await this.checkAudit();
    const repairId = this.ids.next();
    const rows = copies.map(({ row }) => this.copyOf(row, repairId, request, consumer));
    const target = JSON.stringify({
      id: repairId,
      reason: `gap repair for ${consumer}`,
      filter: {
        topic: request.topic,
        key: request.key,
        sequences: copies.map((c) => c.n).join(','),
      },
      to: null,
      rate: null,
    });
    await this.context.sqlPort.transaction(async (tx) => {
      await this.audit.record(
        {
          actor: `gap-repair:${consumer}`,
          action: REDRIVE_ACTION,
          scope: GAP_REPAIR_SCOPE,
          // The column keeps 2000 characters; a long key's request is cut, the copies are not.
          target: target.length > 2_000 ? target.slice(0, 2_000) : target,
          confirmed: rows.length,
          affected: rows.length,
        },
        tx,
      );
      // Not numbered: each copy keeps the number it fills (see the class comment).
      await this.context.store.insert(tx, rows, this.context.ordered);
    });
    return repairId;
  }

  private copyOf(
    row: NumberedRow,
    repairId: string,
    request: GapRepairRequest,
    consumer: string,
  ): NewOutboxRow {
    const shown = shownOf(row);
    const { [OUTBOX_HEADER_REDRIVE_DELAY]: _delay, ...headers } = shown.headers;
    const lane = this.context.lanes ? repairLaneOf(request.topic, request.key) : request.key;
    const binary = row.payload_encoding === 'binary';
    return {
      messageId: this.ids.next(),
      topic: row.topic,
      key: lane,
      type: row.event_type,
      payload: row.payload,
      headers: JSON.stringify({
        ...headers,
        [OUTBOX_HEADER_SEQUENCE]: String(row.seq),
        ...(lane === request.key ? {} : { [REDRIVE_LANE_KEY_HEADER]: request.key }),
        [REDRIVE_OF_HEADER]: messageIdText(row.message_id),
        [REDRIVE_ID_HEADER]: repairId,
        [GAP_REPAIR_FOR_HEADER]: consumer,
      }),
      ...(binary
        ? {
            binary: { bytes: storedBytes(row.payload_bytes), contentType: row.content_type ?? '' },
          }
        : {}),
      ...(row.broker_attributes === null || row.broker_attributes === ''
        ? {}
        : { attributes: row.broker_attributes }),
      availableAt: null,
      delayMs: null,
    };
  }

  /**
   * Every row, in the outbox and its archive, of `key` on `topic` (the key's lanes included: its
   * repair copies, and re-drive copies numbered on this topic) carrying one of `sequences`, in
   * queue order. One statement: what it reads is one moment's state.
   */
  private async rowsOf(
    topic: string,
    key: string,
    sequences: readonly number[],
  ): Promise<NumberedRow[]> {
    const { sql, names, archive } = this.context;
    const p = sql.params();
    const seq = sql.headerText(OUTBOX_HEADER_SEQUENCE);
    const part = (table: string, src: string, origin: 'o.id' | 'o.outbox_id'): string =>
      `SELECT '${src}' AS src, o.status AS row_status, ${seq} AS seq, ${sql.deliveredAgeMs} AS delivered_ms, ${sql.redriveColumns(origin)}
FROM ${table} AS o
WHERE o.topic = ${p.add(topic)} AND ${storedKeyCondition(p, key)} AND ${seq} IN (${inList(p, sequences)})`;
    const outbox = part(names.table, 'outbox', 'o.id');
    const selection = archive
      ? `${outbox}\nUNION ALL\n${part(names.archiveTable, 'archive', 'o.outbox_id')}`
      : outbox;
    const { rows } = await this.context.sqlPort.query<NumberedRow>(
      `SELECT * FROM (${selection}) AS r ORDER BY r.origin`,
      p.values,
    );
    return rows;
  }

  private async checkAudit(): Promise<void> {
    if (this.auditChecked) return;
    await this.audit.probeOrRefuse(OutboxMessages.redriveNoAuditTable);
    this.auditChecked = true;
  }

  private checked(request: GapRepairRequest): {
    topic: string;
    key: string;
    consumer: string;
    sequences: number[];
  } {
    if (typeof request !== 'object' || request === null) {
      throw invalid('request', 'is not an object { topic, key, sequences, consumer }');
    }
    const { topic, key, consumer, sequences } = request;
    for (const [name, value] of [
      ['topic', topic],
      ['key', key],
      ['consumer', consumer],
    ] as const) {
      if (typeof value !== 'string' || value === '')
        throw invalid(name, 'is not a non-empty string');
    }
    if (consumer.length > MAX_CONSUMER) {
      throw invalid('consumer', `is longer than ${MAX_CONSUMER} characters`);
    }
    if (!Array.isArray(sequences) || sequences.length === 0) {
      throw invalid('sequences', 'is not a non-empty array of numbers');
    }
    if (sequences.length > this.maxSequences) {
      throw invalid(
        'sequences',
        `asks for ${sequences.length} numbers, more than the ${this.maxSequences} one request may (maxSequences)`,
      );
    }
    const unique = new Set<number>();
    for (const n of sequences as unknown[]) {
      if (typeof n !== 'number' || !Number.isSafeInteger(n) || n < 1) {
        throw invalid('sequences', `holds ${JSON.stringify(n)}, not a positive integer`);
      }
      unique.add(n);
    }
    return { topic, key, consumer, sequences: [...unique].sort((a, b) => a - b) };
  }
}

/** The numbers as the header holds them (text), bound one by one. */
function inList(p: SqlParams, sequences: readonly number[]): string {
  return sequences.map((n) => p.add(String(n))).join(', ');
}
