import { masterKeyWrapper, type OutboxKeyWrapper } from '../message/erasure/key-wrapper';
import type { OutboxErasureOptions } from './outbox.options';
import { checks, fail, section } from './outbox-option-checks';

/** `erasure` checked: the wrapper of the data keys. */
export interface ResolvedErasureOptions {
  readonly keyWrapper: OutboxKeyWrapper;
}

const MASTER_KEY_BYTES = 32;

/** Checks `erasure`; null when it is left out. Never puts the master key in a message. */
export function resolveErasureOptions(
  value: OutboxErasureOptions | undefined,
): ResolvedErasureOptions | null {
  if (value === undefined) return null;
  const given = section(value, 'erasure');
  const { masterKey, keyWrapper } = given;
  if ((masterKey === undefined) === (keyWrapper === undefined)) {
    fail(
      'erasure',
      masterKey === undefined
        ? 'it has neither masterKey nor keyWrapper'
        : 'it has both masterKey and keyWrapper',
      'Give exactly one: masterKey (32 bytes, a Buffer or base64 text) or keyWrapper (your KMS).',
    );
  }
  if (keyWrapper !== undefined) {
    if (
      keyWrapper === null ||
      typeof keyWrapper !== 'object' ||
      typeof (keyWrapper as Partial<OutboxKeyWrapper>).wrap !== 'function' ||
      typeof (keyWrapper as Partial<OutboxKeyWrapper>).unwrap !== 'function'
    ) {
      fail(
        'erasure.keyWrapper',
        `${checks.show(keyWrapper)} is not a key wrapper`,
        'Pass an object with wrap(dataKey, keyId) and unwrap(wrapped, keyId), each resolving to a Buffer.',
      );
    }
    return { keyWrapper };
  }
  const bytes = Buffer.isBuffer(masterKey)
    ? masterKey
    : typeof masterKey === 'string' && /^[A-Za-z0-9+/]+={0,2}$/.test(masterKey)
      ? Buffer.from(masterKey, 'base64')
      : undefined;
  if (bytes === undefined || bytes.length !== MASTER_KEY_BYTES) {
    // The value itself is never shown: it is a secret.
    fail(
      'erasure.masterKey',
      `it is not ${MASTER_KEY_BYTES} bytes (${bytes === undefined ? 'neither a Buffer nor base64 text' : `${bytes.length} bytes`})`,
      'Give 32 random bytes, e.g. from `openssl rand -base64 32` in an environment variable or your secret store.',
    );
  }
  return { keyWrapper: masterKeyWrapper(bytes) };
}
