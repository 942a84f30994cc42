// nestjs-outbox/erasure: per-subject erasure by crypto-shredding, the consumer's side
// (docs/erasure.md): the key service over the producer's key table, the reader that opens
// sealed personal data and fails closed on an erased subject, and the erasure notice. The
// producer's side is the module's `erasure` option and `OutboxAdmin.erase()`. Loads no peer.
export { subjectKeys, type OutboxSubjectKeys, type OutboxSubjectKeysOptions } from './subject-keys';
export {
  erasureNoticeOf,
  PersonalDataReader,
  type OutboxErasureNotice,
  type SealedMessage,
} from './personal-data.reader';
export type { DataKeyLookup } from '../store/subject-key-vault';
export { masterKeyWrapper, type OutboxKeyWrapper } from '../message/erasure/key-wrapper';
export type { OutboxEventPersonalData, OutboxPersonalData } from '../message/erasure/personal-data';
export type { OutboxErasureOptions } from '../options/outbox.options';
export { OutboxSubjectErasedError } from '../errors/outbox-subject-erased.error';
export {
  OutboxSealedDataError,
  type OutboxSealedDataReason,
} from '../errors/outbox-sealed-data.error';
export { OUTBOX_ERASURE_NOTICE_TYPE, OUTBOX_HEADER_SUBJECT_KEY } from '../outbox.constants';
