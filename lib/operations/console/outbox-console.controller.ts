import {
  Body,
  ForbiddenException,
  Get,
  Inject,
  Logger,
  Param,
  Post,
  Query,
  Req,
  Res,
  UseFilters,
  UseGuards,
} from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import { describeError } from '../../internal/describe-error';
import type { OutboxDeadLetterFilter } from '../../module/admin/outbox-admin.interfaces';
import { OUTBOX_ADMIN_MAX_LIMIT } from '../../module/admin/outbox.admin';
import { ConsoleAccessGuard } from './console-access.guard';
import { ConsoleExceptionFilter } from './console-exception.filter';
import { MISSING_FORM } from './console-form-body';
import {
  ConsoleInputError,
  cursor,
  deadLetterFilter,
  describeFilter,
  list,
  messageFilter,
  minutesParam,
  pageRefresh,
  text,
  uuid,
  type ConsoleParams,
} from './console-input';
import { ConsoleResponder } from './console-responder';
import { ConsoleRuntime } from './console.runtime';
import type { OutboxConsoleAuditEntry, OutboxConsoleRequest } from './console.options';
import {
  auditPage,
  confirmPage,
  resultPage,
  stoppedPage,
  type ConsoleSelection,
} from './views/actions.view';
import { blockedKeysPage, stuckLeasesPage } from './views/keys-and-leases.view';
import { notice, type ViewContext } from './views/layout.view';
import { messagePage, whyPage } from './views/message.view';
import { messagesPage } from './views/messages.view';
import { redriveDonePage, redrivePage, type RedriveHistory } from './views/redrive.view';
import { redriveFilter, redriveRate, redriveTyped } from './console-redrive-input';
import { redriveConfirmationCount } from '../../module/admin/redrive-confirmation';
import type { OutboxAuditTableOptions } from '../../store/shared-sql/audit-table';
import type { OutboxRedriveReport } from '../../module/admin/outbox-redrive.interfaces';
import { overviewPage } from './views/overview.view';
import { eraseDonePage, erasePage } from './views/erase.view';
import { deliveryPartitionsPage } from './views/delivery-partitions.view';

/** Most ids one confirmation takes (a page of the listing is at most 500). */
const MAX_SELECTION = 500;

/**
 * The console's pages and actions. Not decorated with a path: `OutboxConsoleModule` mounts a
 * subclass of it at the path the app chose. Every route is behind the access guard (the
 * stylesheet and script are served apart, by OutboxConsoleAssetsController), every
 * failure becomes a page (ConsoleExceptionFilter), and every action is a POST checked for CSRF.
 */
@UseGuards(ConsoleAccessGuard)
@UseFilters(ConsoleExceptionFilter)
export class OutboxConsoleController {
  private readonly respond: ConsoleResponder;
  private readonly logger = new Logger('OutboxConsole');

  constructor(
    @Inject(ConsoleRuntime) private readonly runtime: ConsoleRuntime,
    adapterHost: HttpAdapterHost,
  ) {
    this.respond = new ConsoleResponder(() => adapterHost.httpAdapter);
  }

  /** What every page needs, with the CSRF token of the principal it is shown to. */
  private ctx(req: OutboxConsoleRequest): ViewContext {
    return {
      base: this.runtime.path,
      readOnly: this.runtime.options.readOnly,
      csrf: this.runtime.csrf.token(this.runtime.principal(req)),
      // A POST's page is not reloaded: the reload would post the form again.
      refresh:
        req.method === 'GET' ? pageRefresh(req.url, this.runtime.options.refreshSeconds) : null,
    };
  }

  @Get()
  async overview(@Req() req: OutboxConsoleRequest, @Res() res: unknown): Promise<void> {
    const now = await this.runtime.sampler.latest();
    this.respond.page(
      res,
      200,
      overviewPage(
        this.ctx(req),
        now,
        this.runtime.sampler.history(),
        this.runtime.dispatcherStatus(),
        this.runtime.admin.delivery,
        this.runtime.admin.policyList(),
      ),
    );
  }

  @Get('messages')
  async messages(
    @Req() req: OutboxConsoleRequest,
    @Query() q: ConsoleParams,
    @Res() res: unknown,
  ): Promise<void> {
    const filter = messageFilter(q);
    const page = await this.runtime.admin.list(filter, {
      after: cursor(q),
      limit: this.runtime.options.pageSize,
    });
    const { status = 'dead', ...rest } = filter;
    this.respond.page(
      res,
      200,
      messagesPage(this.ctx(req), status as 'dead', rest, page, this.runtime.admin.tenants),
    );
  }

  @Get('messages/:id')
  async message(
    @Req() req: OutboxConsoleRequest,
    @Param('id') id: string,
    @Res() res: unknown,
  ): Promise<void> {
    const why = await this.runtime.admin.why(uuid(id));
    if (why.message === null) {
      this.respond.page(
        res,
        404,
        notice(this.ctx(req), 'Not found', `No message has the id ${id}.`),
      );
      return;
    }
    this.respond.page(res, 200, messagePage(this.ctx(req), why.message, why));
  }

  @Get('why')
  async why(
    @Req() req: OutboxConsoleRequest,
    @Query() q: ConsoleParams,
    @Res() res: unknown,
  ): Promise<void> {
    const id = text(q, 'id');
    const why = id === undefined ? null : await this.runtime.admin.why(uuid(id));
    this.respond.page(res, 200, whyPage(this.ctx(req), id, why));
  }

  @Get('blocked-keys')
  async blockedKeys(
    @Req() req: OutboxConsoleRequest,
    @Query() q: ConsoleParams,
    @Res() res: unknown,
  ): Promise<void> {
    const page = await this.runtime.admin.blockedKeys({
      after: cursor(q),
      limit: this.runtime.options.pageSize,
    });
    this.respond.page(res, 200, blockedKeysPage(this.ctx(req), page));
  }

  @Get('stuck-leases')
  async stuckLeases(
    @Req() req: OutboxConsoleRequest,
    @Query() q: ConsoleParams,
    @Res() res: unknown,
  ): Promise<void> {
    const minutes = minutesParam(q, 'leasedLongerThanMinutes');
    const page = await this.runtime.admin.stuckLeases({
      after: cursor(q),
      limit: this.runtime.options.pageSize,
      ...(minutes === undefined ? {} : { leasedLongerThanMs: Math.round(minutes * 60_000) }),
    });
    this.respond.page(res, 200, stuckLeasesPage(this.ctx(req), page, minutes));
  }

  @Get('delivery-partitions')
  async deliveryPartitions(@Req() req: OutboxConsoleRequest, @Res() res: unknown): Promise<void> {
    const view = await this.runtime.admin.deliveryPartitions();
    this.respond.page(res, 200, deliveryPartitionsPage(this.ctx(req), view));
  }

  @Get('audit')
  async audit(@Req() req: OutboxConsoleRequest, @Res() res: unknown): Promise<void> {
    const entries = await this.runtime.audit.recent();
    this.respond.page(res, 200, auditPage(this.ctx(req), entries, this.runtime.audit.durable));
  }

  /** The Re-drive page: the filter form, its preview when a field is given, past re-drives. */
  @Get('redrive')
  async redrive(
    @Req() req: OutboxConsoleRequest,
    @Query() q: ConsoleParams,
    @Res() res: unknown,
  ): Promise<void> {
    const filter = redriveFilter(q);
    const preview =
      Object.keys(filter).length === 0 ? null : await this.runtime.admin.previewRedrive(filter);
    this.respond.page(
      res,
      200,
      redrivePage(this.ctx(req), filter, preview, await this.redriveHistory()),
    );
  }

  /**
   * The confirmed re-drive, if the filter still selects the very messages the page showed (its
   * confirmation); recorded in the audit table by the admin API, with the copies.
   */
  @Post('redrive/run')
  async runRedrive(
    @Req() req: OutboxConsoleRequest,
    @Body() body: ConsoleParams,
    @Res() res: unknown,
  ): Promise<void> {
    this.checkAction(req, body);
    const filter = redriveFilter(body);
    if (Object.keys(filter).length === 0) {
      throw new ConsoleInputError('a re-drive needs at least one filter field');
    }
    const expected = text(body, 'expected');
    const confirmed = redriveConfirmationCount(expected);
    if (expected === undefined || confirmed === undefined) {
      throw new ConsoleInputError('expected must be the confirmation of the preview shown');
    }
    const typed = redriveTyped(body);
    const reason = typed.reason;
    if (reason === undefined) throw new ConsoleInputError('say why in reason, for the audit log');
    const rate = redriveRate(body);
    const actor = this.runtime.principal(req);
    let report: OutboxRedriveReport;
    try {
      report = await this.runtime.admin.redrive(filter, {
        actor,
        reason,
        expected,
        auditTable: this.redriveAuditTable(),
        ...(typed.destination === undefined ? {} : { destination: typed.destination }),
        ...(rate === undefined ? {} : { ratePerSecond: rate }),
      });
    } catch (error) {
      const refused = redriveRefusal(error);
      if (refused === null) throw error;
      const preview = await this.runtime.admin.previewRedrive(filter);
      // The new preview and its confirmation, with what the operator typed kept in the form.
      this.respond.page(
        res,
        409,
        redrivePage(this.ctx(req), filter, preview, await this.redriveHistory(), refused, typed),
      );
      return;
    }
    await this.runtime.audit.noted({
      at: new Date(),
      actor,
      action: 'redrive',
      scope: 'filter',
      target: `${report.redriveId}: ${reason}`,
      confirmed,
      affected: report.count,
    });
    this.respond.page(res, 200, redriveDonePage(this.ctx(req), report));
  }

  /** The Erase page: a subject's id, why, and the box that says it cannot be undone. */
  @Get('erase')
  erase(@Req() req: OutboxConsoleRequest, @Res() res: unknown): void {
    this.respond.page(res, 200, erasePage(this.ctx(req)));
  }

  /**
   * Erases one subject (`OutboxAdmin.erase`), recorded in the audit table by the admin API in
   * its transaction. The subject is not logged nor shown again.
   */
  @Post('erase/run')
  async runErase(
    @Req() req: OutboxConsoleRequest,
    @Body() body: ConsoleParams,
    @Res() res: unknown,
  ): Promise<void> {
    this.checkAction(req, body);
    const subject = text(body, 'subject')?.trim();
    if (subject === undefined || subject === '') {
      throw new ConsoleInputError('give the id of the subject to erase');
    }
    const reason = text(body, 'reason')?.trim();
    if (reason === undefined || reason === '') {
      throw new ConsoleInputError('say why in reason, for the audit log');
    }
    if (text(body, 'irreversible') !== 'yes') {
      this.respond.page(
        res,
        400,
        erasePage(this.ctx(req), 'Tick the box: an erasure cannot be undone. Nothing was erased.'),
      );
      return;
    }
    const actor = this.runtime.principal(req);
    const report = await this.runtime.admin.erase(subject, {
      actor,
      reason,
      auditTable: this.redriveAuditTable(),
    });
    this.respond.page(res, 200, eraseDonePage(this.ctx(req), report));
  }

  /** The console's audit table, by name, in the outbox's database; the default name without one. */
  private redriveAuditTable(): OutboxAuditTableOptions {
    const table = this.runtime.options.auditTable;
    if (table === null) return {};
    return {
      ...(table.tableName === undefined ? {} : { tableName: table.tableName }),
      ...(table.schema === undefined ? {} : { schema: table.schema }),
    };
  }

  private async redriveHistory(): Promise<RedriveHistory> {
    try {
      return {
        records: await this.runtime.admin.redrives({ auditTable: this.redriveAuditTable() }),
      };
    } catch (error) {
      return {
        problem: `The past re-drives cannot be read from the audit table (${describeError(error)}); re-drives need it (docs/operations.md#re-drive-delivered-messages).`,
      };
    }
  }

  /** The confirmation page: what the action would touch, counted now. */
  @Post('actions/confirm')
  async confirm(
    @Req() req: OutboxConsoleRequest,
    @Body() body: ConsoleParams,
    @Res() res: unknown,
  ): Promise<void> {
    this.checkAction(req, body);
    const action = actionOf(body);
    const selection = selectionOf(body);
    const matched = await this.matching(selection);
    this.respond.page(
      res,
      200,
      confirmPage(this.ctx(req), action, selection, matched, describe(selection)),
    );
  }

  /** The confirmed action, if what it touches is still what the confirmation page counted. */
  @Post('actions/run')
  async run(
    @Req() req: OutboxConsoleRequest,
    @Body() body: ConsoleParams,
    @Res() res: unknown,
  ): Promise<void> {
    this.checkAction(req, body);
    const action = actionOf(body);
    const selection = selectionOf(body);
    const expected = Number(text(body, 'expected'));
    if (!Number.isInteger(expected) || expected < 1) {
      throw new ConsoleInputError('expected must be the count the confirmation page showed');
    }
    // A filter is resolved to the message ids it matches now, and the action takes those ids:
    // it never reaches a message that died after this count, so it does exactly what was
    // confirmed or nothing.
    const targets =
      selection.scope === 'filter' ? await this.deadIdsMatching(selection.filter) : null;
    const matched = targets?.length ?? (await this.matching(selection));
    if (matched !== expected) {
      // The dead letters changed since the page was shown: confirm again, on the new count.
      this.respond.page(
        res,
        409,
        confirmPage(
          this.ctx(req),
          action,
          selection,
          matched,
          `${describe(selection)} now (you confirmed ${expected}; the dead letters changed since)`,
        ),
      );
      return;
    }
    const ids = targets ?? (selection.scope === 'selection' ? selection.ids : []);
    const entry: OutboxConsoleAuditEntry = {
      at: new Date(),
      actor: this.runtime.principal(req),
      action,
      scope: selection.scope,
      target: describe(selection),
      confirmed: expected,
      affected: 0,
    };
    const done = await this.act(entry, ids);
    if (done.error === undefined) {
      this.respond.page(
        res,
        200,
        resultPage(this.ctx(req), { ...entry, affected: done.affected }, done.expired),
      );
      return;
    }
    this.logger.error(
      `${entry.action} by ${entry.scope} (${entry.target}) stopped after ${done.affected} of ${expected}: ${describeError(done.error)}`,
    );
    this.respond.page(res, 500, stoppedPage(this.ctx(req), entry, done.affected));
  }

  /**
   * Runs the action on `ids` a transaction's worth at a time, in the order given (queue order
   * for a filter, so each part is requeued without reading every dead letter to order it), and
   * writes an audit entry for each part as soon as it has committed: a later part that fails
   * leaves the earlier ones done, and the audit log says so.
   */
  private async act(
    entry: OutboxConsoleAuditEntry,
    ids: readonly string[],
  ): Promise<{ affected: number; expired: string[]; error?: unknown }> {
    const admin = this.runtime.admin;
    const expired: string[] = [];
    const parts: string[][] = [];
    for (let i = 0; i < ids.length; i += OUTBOX_ADMIN_MAX_LIMIT) {
      parts.push(ids.slice(i, i + OUTBOX_ADMIN_MAX_LIMIT));
    }
    let affected = 0;
    for (const [index, part] of parts.entries()) {
      let done: number;
      try {
        if (entry.action === 'retry') {
          const report = await admin.retry(part);
          done = report.requeued + report.resequenced;
          expired.push(...report.expired);
        } else {
          done = await admin.purge(part);
        }
      } catch (error) {
        return { affected, expired, error };
      }
      affected += done;
      await this.runtime.audit.record({
        ...entry,
        at: new Date(),
        target:
          parts.length === 1
            ? entry.target
            : `${entry.target}, part ${index + 1} of ${parts.length}`,
        affected: done,
      });
    }
    return { affected, expired };
  }

  private checkAction(req: OutboxConsoleRequest, body: ConsoleParams): void {
    if (this.runtime.options.readOnly)
      throw new ForbiddenException('The console is read-only (option readOnly).');
    if (body === null || typeof body !== 'object') throw new ConsoleInputError(MISSING_FORM);
    const refusal = this.runtime.csrf.refusal(req, body.csrf, this.runtime.principal(req));
    if (refusal !== null) throw new ForbiddenException(`Refused: ${refusal}.`);
  }

  /** The message ids of the dead letters matching `filter` now, in queue order. */
  private async deadIdsMatching(filter: OutboxDeadLetterFilter): Promise<string[]> {
    const ids: string[] = [];
    let after: string | null = null;
    do {
      const page = await this.runtime.admin.list(
        { ...filter, status: 'dead' },
        { after, limit: OUTBOX_ADMIN_MAX_LIMIT },
      );
      ids.push(...page.items.map((item) => item.messageId));
      after = page.nextCursor;
    } while (after !== null);
    return ids;
  }

  /** Dead letters among the selection, or matching the filter, counted now. */
  private async matching(selection: ConsoleSelection): Promise<number> {
    const admin = this.runtime.admin;
    if (selection.scope === 'filter')
      return (await admin.counts({ ...selection.filter, status: 'dead' })).dead;
    let dead = 0;
    for (const id of selection.ids) if ((await admin.get(id))?.status === 'dead') dead += 1;
    return dead;
  }
}

/** A re-drive refused before sending anything, in words for the page; null for other errors. */
function redriveRefusal(error: unknown): string | null {
  if (!(error instanceof Error)) return null;
  if ((error as { code?: unknown }).code !== 'OUTBOX_REDRIVE_REFUSED') return null;
  return error.message;
}

function actionOf(body: ConsoleParams): 'retry' | 'purge' {
  const action = text(body, 'action');
  if (action !== 'retry' && action !== 'purge') {
    throw new ConsoleInputError(
      `action must be retry or purge, got ${JSON.stringify(action ?? '')}`,
    );
  }
  return action;
}

function selectionOf(body: ConsoleParams): ConsoleSelection {
  const scope = text(body, 'scope');
  if (scope === 'selection') {
    const ids = [...new Set(list(body, 'id').map((id) => uuid(id.trim())))];
    if (ids.length === 0) throw new ConsoleInputError('tick at least one dead letter');
    if (ids.length > MAX_SELECTION)
      throw new ConsoleInputError(`at most ${MAX_SELECTION} ids at a time; act by filter instead`);
    return { scope, ids };
  }
  if (scope === 'filter') {
    const filter: OutboxDeadLetterFilter = deadLetterFilter(body);
    if (Object.keys(filter).length === 0) {
      // Never a whole-table action by an empty form: "older than 0 minutes" says "every one".
      throw new ConsoleInputError(
        'a filter action needs at least one filter field (olderThanMinutes=0 selects every dead letter)',
      );
    }
    return { scope, filter };
  }
  throw new ConsoleInputError(
    `scope must be selection or filter, got ${JSON.stringify(scope ?? '')}`,
  );
}

function describe(selection: ConsoleSelection): string {
  return selection.scope === 'filter'
    ? describeFilter(selection.filter)
    : selection.ids.length <= 3
      ? `ids ${selection.ids.join(', ')}`
      : `${selection.ids.length} selected ids`;
}
