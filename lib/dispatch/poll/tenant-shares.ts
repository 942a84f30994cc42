import type { ResolvedTenantsOptions } from '../../options/resolve-tenants-options';
import { claimWindow } from '../../store/shared-sql/claim-window';
import type {
  ClaimedBatch,
  ClaimOptions,
  OutboxDeliveryPort,
} from '../../store/ports/outbox-store.port';

/**
 * The most tenants one claim shares its batch between: each share is a statement of its own,
 * so a claim over thousands of tenants serves them this many at a time, in turn (the next
 * claim starts after the last tenant served).
 */
export const TENANTS_PER_CLAIM = 16;

/** The most busy tenants the quiet lane reads past to find the quiet ones (one probe each). */
const BUSY_TENANTS_SKIPPED = 256;

/**
 * Splits `limit` rows between `tenants` in proportion to their weights (1 unless named), each
 * getting at least one row; the rows rounding leaves go by largest remainder, ties to the first.
 * Fewer rows than tenants: the first `limit` tenants get one each.
 */
export function tenantQuotas(
  limit: number,
  tenants: readonly (string | null)[],
  weights: ReadonlyMap<string, number>,
): number[] {
  if (tenants.length === 0) return [];
  if (limit <= tenants.length) return tenants.map((_, i) => (i < limit ? 1 : 0));
  const weight = tenants.map((t) => (t === null ? 1 : (weights.get(t) ?? 1)));
  const total = weight.reduce((a, b) => a + b, 0);
  const exact = weight.map((w) => (limit * w) / total);
  const quotas = exact.map((e) => Math.max(1, Math.floor(e)));
  let left = limit - quotas.reduce((a, b) => a + b, 0);
  // The floor of one row each can overshoot: the largest shares give it back.
  while (left < 0) {
    const largest = quotas.indexOf(Math.max(...quotas));
    quotas[largest] = (quotas[largest] ?? 1) - 1;
    left++;
  }
  const byRemainder = exact
    .map((e, i) => [e - Math.floor(e), i] as const)
    .sort((a, b) => b[0] - a[0] || a[1] - b[1]);
  for (const [, i] of byRemainder) {
    if (left <= 0) break;
    quotas[i] = (quotas[i] ?? 0) + 1;
    left--;
  }
  return quotas;
}

/**
 * A tenant-fair claim (docs/tenants.md): the tenants with due messages are found first (a skip
 * scan that never reads a backlog), the batch is split into their shares, and each share is
 * claimed with the ordinary claim narrowed to its tenant, under one lease token, so the batch
 * settles as one. Each share's claim finds the heads of its keys looking at every row of the
 * key, whatever its tenant, so per-key order holds as with any claim. Room a tenant leaves
 * unused goes to an ordinary claim of the rest of the batch.
 */
export class TenantShares {
  /** The last tenant served: the next claim starts after it. */
  private cursor: string | null = null;

  constructor(
    private readonly fair: NonNullable<ResolvedTenantsOptions['fair']>,
    private readonly store: OutboxDeliveryPort,
  ) {}

  /** Whether the store can share claims between tenants. */
  static supported(store: OutboxDeliveryPort): boolean {
    return store.dueTenants !== undefined;
  }

  async claim(options: ClaimOptions & { readonly token: string }): Promise<ClaimedBatch> {
    const tenants = await this.dueTenants(Math.min(options.limit, TENANTS_PER_CLAIM));
    // One tenant (or none) due: nothing to share.
    if (tenants.length <= 1) return this.store.claim(options);
    return this.claimShares(options, tenants, true);
  }

  /**
   * The quiet lane's claim (docs/tenants.md): the shares of the due tenants other than `busy`
   * (those with a message in a batch in flight) only, with no ordinary claim of the room left,
   * which would take the busy tenants' rows. Leaves the cursor of the ordinary claims alone.
   */
  async claimQuiet(
    options: ClaimOptions & { readonly token: string },
    busy: ReadonlySet<string | null>,
  ): Promise<ClaimedBatch> {
    // Asking for as many more tenants as are busy finds the first quiet ones among them; past
    // a few hundred busy tenants the fair claims serve the quiet ones about as soon.
    const limit = Math.min(options.limit, TENANTS_PER_CLAIM);
    const extra = Math.min(busy.size, BUSY_TENANTS_SKIPPED);
    const found = await this.dueTenants(limit + extra, false);
    const tenants = found.filter((t) => !busy.has(t)).slice(0, limit);
    if (tenants.length === 0) return merged(options.token, []);
    return this.claimShares(options, tenants, false);
  }

  private async claimShares(
    options: ClaimOptions & { readonly token: string },
    tenants: readonly (string | null)[],
    fillUp: boolean,
  ): Promise<ClaimedBatch> {
    const quotas = tenantQuotas(options.limit, tenants, this.fair.weights);
    const parts: ClaimedBatch[] = [];
    let full = false;
    let sent = false;
    for (const [i, tenant] of tenants.entries()) {
      const limit = quotas[i] ?? 0;
      if (limit === 0) continue;
      const part = await this.store.claim({
        ...options,
        limit,
        window: claimWindow(limit),
        tenant: { id: tenant },
        onSent: sent ? undefined : options.onSent,
      });
      sent = true;
      if (part.records.length >= limit) full = true;
      parts.push(part);
      if (tenant !== null && fillUp) this.cursor = tenant;
    }
    const taken = parts.reduce((n, p) => n + p.records.length, 0);
    if (fillUp && full && taken < options.limit) {
      parts.push(
        await this.store.claim({ ...options, limit: options.limit - taken, onSent: undefined }),
      );
    }
    return merged(options.token, parts);
  }

  /** Up to `limit` tenants with due messages, after the last one served, wrapping around. */
  private async dueTenants(limit: number, moveCursor = true): Promise<(string | null)[]> {
    const dueTenants = this.store.dueTenants?.bind(this.store);
    if (dueTenants === undefined) return [];
    const after = this.cursor;
    const found = [...(await dueTenants(after, limit))];
    if (after !== null && found.filter((t) => t !== null).length < limit) {
      const named = new Set(found);
      for (const tenant of await dueTenants(null, limit)) {
        if (found.length >= limit + 1) break;
        if (!named.has(tenant)) {
          named.add(tenant);
          found.push(tenant);
        }
      }
      if (found.length < 2 && moveCursor) this.cursor = null;
    }
    return found;
  }
}

/** The shares' claims as one batch: one token, every record, every key held back. */
function merged(token: string, parts: readonly ClaimedBatch[]): ClaimedBatch {
  return {
    token,
    records: parts.flatMap((p) => p.records),
    blockedKeys: [...new Set(parts.flatMap((p) => p.blockedKeys))],
    inFlightKeys: parts.reduce((n, p) => n + p.inFlightKeys, 0),
    contended: parts.reduce((n, p) => n + (p.contended ?? 0), 0),
  };
}
