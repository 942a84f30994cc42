/**
 * A place in the MySQL/MariaDB binlog: a file of the server's binlog and the byte offset in it
 * just after a committed transaction. Written as `<file>:<offset>` (`mysql-bin.000042:1337`)
 * in `LoggedBatch.position` and in the position table.
 */
export interface BinlogPosition {
  readonly file: string;
  readonly offset: number;
}

/** One row of `SHOW BINARY LOGS`. */
export interface BinaryLogFile {
  readonly file: string;
  readonly size: number;
}

// The server names its files `<basename>.<sequence>`: the sequence orders them, and every file
// of one server shares the basename.
const FILE = /^(.+)\.(\d+)$/;

export function formatBinlogPosition(position: BinlogPosition): string {
  return `${position.file}:${position.offset}`;
}

/** Reads a position written by `formatBinlogPosition`; throws a TypeError on anything else. */
export function parseBinlogPosition(text: string): BinlogPosition {
  const colon = text.lastIndexOf(':');
  const file = text.slice(0, colon);
  const offset = Number(text.slice(colon + 1));
  if (colon <= 0 || !FILE.test(file) || !Number.isSafeInteger(offset) || offset < 4) {
    throw new TypeError(
      `${JSON.stringify(text)} is not a MySQL binlog position: acknowledge only the position of a batch the source handed over.`,
    );
  }
  return { file, offset };
}

function sequenceOf(file: string): number {
  const match = FILE.exec(file);
  return match?.[2] === undefined ? -1 : Number(match[2]);
}

/** Negative when `a` is before `b`, 0 when equal, positive when after. */
export function compareBinlogPositions(a: BinlogPosition, b: BinlogPosition): number {
  const byFile = sequenceOf(a.file) - sequenceOf(b.file);
  return byFile !== 0 ? byFile : a.offset - b.offset;
}

/**
 * Bytes of binlog from `from` to the end of the last file: what the server keeps for this
 * outbox and the source has not acknowledged yet. Files before `from`'s are not counted (other
 * readers, or the expiry setting, decide whether they are kept); a position in a file the server
 * no longer lists counts every listed file after it.
 */
export function retainedBinlogBytes(from: BinlogPosition, files: readonly BinaryLogFile[]): number {
  const at = sequenceOf(from.file);
  let bytes = 0;
  for (const file of files) {
    const sequence = sequenceOf(file.file);
    if (sequence > at) bytes += file.size;
    else if (sequence === at) bytes += Math.max(0, file.size - from.offset);
  }
  return bytes;
}
