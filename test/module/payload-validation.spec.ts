import { randomUUID } from 'node:crypto';
import { OutboxEvent, OutboxInvalidMessageError, OutboxService } from '../../lib';
import { readOutbox, TEST_DATABASES, TestOrder } from '../support/databases';
import { useOutboxScope } from '../support/outbox-scope';
import { describeWith } from '../support/services';

// The payload validation switch (`validatePayload: false`) on real databases: what it lets
// through is stored as JSON.stringify writes it, in the caller's transaction; header
// validation has no such switch and still refuses a bad header, writing nothing.

@OutboxEvent({ topic: 'trusted', validatePayload: false })
class TrustedEvent {
  constructor(readonly values: unknown) {}
}

@OutboxEvent({ topic: 'trusted', validatePayload: false, headers: { 'bad\u0000name': 'v' } })
class TrustedWithBadHeader {
  constructor(readonly n: number) {}
}

for (const db of TEST_DATABASES) {
  describeWith(db.service === null ? [] : [db.service], `payload validation on ${db.name}`, () => {
    const scope = useOutboxScope(db);
    const table = scope.baseTable;
    let outbox: OutboxService;

    beforeAll(async () => {
      ({ outbox } = await scope.openShared({ table }));
    });

    beforeEach(async () => {
      await scope.ds.query(
        `DELETE FROM ${scope.ds.options.type === 'mariadb' ? `\`${table}\`` : `"${table}"`}`,
      );
    });

    it('validatePayload: false stores what JSON.stringify makes, with the business row', async () => {
      // Customers of this run only: the orders table is shared with other suites and runs.
      const validated = `validated-${randomUUID()}`;
      const unchecked = `unchecked-${randomUUID()}`;
      // Validated (the default): refused, and the transaction with it.
      await expect(
        scope.ds.transaction(async (m) => {
          await m.save(TestOrder, { customer: validated });
          return outbox.enqueue({ topic: 't', payload: { a: undefined, b: 1 } }, m);
        }),
      ).rejects.toThrow(OutboxInvalidMessageError);
      expect(await readOutbox(scope.ds, table)).toEqual([]);
      expect(await scope.ds.getRepository(TestOrder).countBy({ customer: validated })).toBe(0);

      const ids = await scope.ds.transaction(async (m) => {
        await m.save(TestOrder, { customer: unchecked });
        return Promise.all([
          outbox.enqueue(
            { topic: 't', payload: { a: undefined, b: 1 }, validatePayload: false },
            m,
          ),
          outbox.enqueue(new TrustedEvent([1, undefined, Number.NaN]), m),
        ]);
      });
      const rows = await readOutbox(scope.ds, table);
      expect(rows.map((r) => [r.messageId, r.payload])).toEqual([
        [ids[0], { b: 1 }],
        [ids[1], { values: [1, null, null] }],
      ]);
      expect(await scope.ds.getRepository(TestOrder).countBy({ customer: unchecked })).toBe(1);
    });

    it('headers are validated whatever the payload switch says: a bad header writes nothing', async () => {
      for (const message of [
        { topic: 't', payload: 1, validatePayload: false, headers: { 'a\u0000': 'v' } },
        { topic: 't', payload: 1, validatePayload: false, headers: { cc: 'other-queue' } },
        {
          topic: 't',
          payload: 1,
          validatePayload: false,
          headers: { n: 1 } as unknown as Record<string, string>,
        },
        new TrustedWithBadHeader(1),
      ]) {
        await expect(scope.ds.transaction((m) => outbox.enqueue(message, m))).rejects.toThrow(
          OutboxInvalidMessageError,
        );
      }
      expect(await readOutbox(scope.ds, table)).toEqual([]);
      // Good headers with the switch off are stored as given.
      await scope.ds.transaction((m) =>
        outbox.enqueue(
          { topic: 't', payload: 1, validatePayload: false, headers: { tenant: 't-1' } },
          m,
        ),
      );
      expect((await readOutbox(scope.ds, table)).map((r) => r.headers)).toEqual([
        { tenant: 't-1' },
      ]);
    });
  });
}
