import { OutboxAdminInputError } from '../../errors/outbox-admin-input.error';
import { UuidV7Generator } from '../../message/uuidv7';
import { OUTBOX_ERASURE_NOTICE_TYPE, OUTBOX_HEADER_SUBJECT_KEY } from '../../outbox.constants';
import { OutboxMessages } from '../../outbox.messages';
import type { NewOutboxRow, OutboxEnqueuePort } from '../../store/ports/outbox-store.port';
import type { SqlPort } from '../../store/ports/sql-port';
import type { OutboxAuditTableOptions } from '../../store/shared-sql/audit-table';
import { writtenKeyedRows } from '../../store/shared-sql/key-sequence';
import { subjectHashOf, type SubjectKeyVault } from '../../store/subject-key-vault';
import { OutboxAuditStore } from './outbox-audit.store';
import type { OutboxEraseOptions, OutboxErasureReport } from './outbox-erasure.interfaces';

/** The audit log's action for an erasure. */
export const ERASE_ACTION = 'erase';
const MAX_ACTOR = 200;
const MAX_REASON = 500;
const MAX_SUBJECT = 255;

/** What the eraser works with: the admin's port, store and the table's key vault. */
export interface ErasureContext {
  readonly sqlPort: SqlPort;
  readonly store: OutboxEnqueuePort;
  readonly vault: SubjectKeyVault;
  /** Writers of a key are serialised at insert (the app's ordering). */
  readonly ordered: boolean;
  /** Enqueue numbers each key's messages: the notices take the next numbers too. */
  readonly sequence: boolean;
  readonly auditTable: OutboxAuditTableOptions | undefined;
}

const invalid = (what: string, problem: string): OutboxAdminInputError =>
  new OutboxAdminInputError(`OutboxAdmin.erase(): ${what}: ${problem}`, what);

/**
 * Erasure of one subject (see `OutboxAdmin.erase`): in one transaction, the subject's data key
 * is destroyed, an erasure notice is enqueued on each (topic, key) its messages were written
 * for, and the erasure is recorded in the audit log. A notice is written through the store's
 * insert as enqueue writes, so with ordering on it goes out after every earlier message of its
 * key, the erased subject's last one included.
 */
export class OutboxEraser {
  private readonly ids = new UuidV7Generator();

  constructor(private readonly context: ErasureContext) {}

  async erase(subject: string, options: OutboxEraseOptions): Promise<OutboxErasureReport> {
    if (typeof subject !== 'string' || subject === '' || subject.length > MAX_SUBJECT) {
      throw invalid('subject', `expected the subject's id, 1 to ${MAX_SUBJECT} characters`);
    }
    const { actor, reason } = options ?? {};
    if (typeof actor !== 'string' || actor.trim() === '' || actor.length > MAX_ACTOR) {
      throw invalid('actor', `expected who erases, 1 to ${MAX_ACTOR} characters`);
    }
    if (typeof reason !== 'string' || reason.trim() === '' || reason.length > MAX_REASON) {
      throw invalid('reason', `expected why, 1 to ${MAX_REASON} characters`);
    }
    const audit = new OutboxAuditStore(
      this.context.sqlPort,
      options.auditTable ?? this.context.auditTable,
    );
    await audit.probeOrRefuse(OutboxMessages.erasureNoAuditTable);
    return this.context.sqlPort.transaction(async (tx) => {
      const erased = await this.context.vault.erase(tx, subject);
      const erasedAt = new Date().toISOString();
      const notices: NewOutboxRow[] = (erased?.uses ?? []).map((use) => ({
        messageId: this.ids.next(),
        topic: use.topic,
        key: use.key,
        type: OUTBOX_ERASURE_NOTICE_TYPE,
        payload: JSON.stringify({ keyId: erased?.keyId, erasedAt }),
        headers: JSON.stringify({ [OUTBOX_HEADER_SUBJECT_KEY]: erased?.keyId }),
        availableAt: null,
        delayMs: null,
      }));
      // The subject itself is never written: its hash lets an operator show that it was erased.
      await audit.record(
        {
          actor: actor.trim(),
          action: ERASE_ACTION,
          scope: 'subject',
          target: JSON.stringify({
            subjectHash: subjectHashOf(subject),
            keyId: erased?.keyId ?? null,
            reason: reason.trim(),
          }),
          confirmed: 1,
          affected: erased === undefined ? 0 : 1,
        },
        tx,
      );
      if (notices.length > 0) {
        const duplicates = await this.context.store.insert(tx, notices, this.context.ordered);
        if (this.context.sequence) {
          await this.context.store.numberKeys(tx, writtenKeyedRows(notices, duplicates));
        }
      }
      return {
        erased: erased !== undefined,
        keyId: erased?.keyId ?? null,
        notices: notices.length,
      };
    });
  }
}
