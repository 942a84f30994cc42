/** How many bytes of a binary payload the CLI and the console show. */
export const BINARY_PREVIEW_BYTES = 256;

/** "206 bytes, application/avro": what a binary payload is, without its content. */
export function describeBinary(bytes: Buffer, contentType: string | null): string {
  return `binary, ${bytes.length} ${bytes.length === 1 ? 'byte' : 'bytes'}, ${contentType ?? 'no content type'}`;
}

/**
 * A hex dump of the first bytes (16 a line: offset, hex, printable ASCII with `.` for the rest),
 * so that an operator sees what a binary payload starts with and no byte reaches a terminal or
 * a page as a control character or markup.
 */
export function hexPreview(bytes: Buffer, limit = BINARY_PREVIEW_BYTES): string {
  const shown = bytes.subarray(0, limit);
  const lines: string[] = [];
  for (let offset = 0; offset < shown.length; offset += 16) {
    const row = shown.subarray(offset, offset + 16);
    const hex = [...row].map((b) => b.toString(16).padStart(2, '0')).join(' ');
    const text = [...row]
      .map((b) => (b >= 0x20 && b < 0x7f ? String.fromCharCode(b) : '.'))
      .join('');
    lines.push(`${offset.toString(16).padStart(8, '0')}  ${hex.padEnd(47)}  |${text}|`);
  }
  if (bytes.length > limit) lines.push(`… ${bytes.length - limit} more bytes not shown`);
  return lines.join('\n');
}
