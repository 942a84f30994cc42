import { PermanentPublishError } from '../../lib';
import { runOutboxCli } from '../../lib/operations/cli/outbox-cli';
import { RecordingPublisher } from '../../lib/testing';
import { databaseUrlFor, TEST_DATABASES } from '../support/databases';
import { useOutboxScope } from '../support/outbox-scope';
import { describeWith } from '../support/services';

// `outbox why` of a dead letter, on every database, run in-process through the CLI's own entry:
// the command builds its admin without the app's per-type policies, so it must not state a
// key's hold as fact where the app's policy decides it. The app's own admin is the reference.

async function cli(
  args: readonly string[],
  url: string,
): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = '';
  let stderr = '';
  const code = await runOutboxCli(
    args,
    { DATABASE_URL: url },
    { stdout: (t) => (stdout += t), stderr: (t) => (stderr += t) },
  );
  return { code, stdout, stderr };
}

for (const db of TEST_DATABASES) {
  describeWith(db.service === null ? [] : [db.service], `outbox why on ${db.name}`, () => {
    const scope = useOutboxScope(db, { tablePrefix: 'outbox_cwhy' });

    it("says what it knows of a dead letter whose type the app's policy lets skip, never that it holds its key", async () => {
      const publisher = new RecordingPublisher();
      const c = await scope.open({
        publisher,
        options: {
          dispatcher: { listen: false, pollIntervalMs: 50 },
          retry: { maxAttempts: 1 },
          policies: { 'order.fragile': { onDeadLetter: 'skip' } },
        },
      });
      const [fragile, after] = (await c.enqueue([
        { topic: 'orders', type: 'order.fragile', key: 'k', payload: { n: 1 } },
        { topic: 'orders', type: 'order.created', key: 'k', payload: { n: 2 } },
      ])) as [string, string];
      publisher.fail(fragile, 'permanent', { error: new PermanentPublishError('refused') });
      await c.runUntilIdle();
      // The app's rule: the later message of the key went on.
      expect(publisher.messages.map((m) => m.messageId)).toEqual([after]);
      const app = await c.admin.why(fragile);
      expect(app.reason).toContain(
        "Dead under policy 'order.fragile': onDeadLetter 'skip', so later messages of its key go on.",
      );

      const url = databaseUrlFor(db, scope.ds);
      const said = await cli(['why', fragile, '--table', c.table], url);
      expect(said).toMatchObject({ code: 0, stderr: '' });
      expect(said.stdout).toMatch(
        /^dead: Dead-lettered at .* after 1 attempt\(s\); last error: .*refused/,
      );
      expect(said.stdout).not.toContain('It holds back');
      expect(said.stdout).toContain(
        `Whether it holds back its key is up to the app's policy for type "order.fragile", which this admin was built without (it was given ordering.onDeadLetter 'block'; the outbox command's --on-dead-letter): under onDeadLetter 'block' it holds back the later messages of key "k" until it is retried or purged; under a policy with onDeadLetter 'skip' they go on. The app's OutboxAdmin.why() and console know which applies.`,
      );
      const skip = await cli(['why', fragile, '--table', c.table, '--on-dead-letter', 'skip'], url);
      expect(skip.stdout).toContain(
        `(it was given ordering.onDeadLetter 'skip'; the outbox command's --on-dead-letter): under onDeadLetter 'skip' the later messages of key "k" go on; under a policy with onDeadLetter 'block' it holds them back`,
      );
    });
  });
}
