import { OUTBOX_HEADER_TENANT } from '../../outbox.constants';
import type { OutboxRecord } from '../../message/outbox-record.interface';

/** The `tenant` label of a message past the bound of distinct tenants. */
export const OTHER_TENANTS = 'other';

/**
 * The `tenant` label of the delivery counters (`tenantLabel`): a message's tenant
 * (`x-outbox-tenant`), '' without one, and `other` for tenants first seen after `maxTenants`
 * others, so that the metrics' cardinality stays bounded however many tenants there are.
 */
export class TenantLabels {
  private readonly seen = new Set<string>();

  constructor(private readonly maxTenants: number) {}

  of(record: OutboxRecord): string {
    const tenant = record.headers[OUTBOX_HEADER_TENANT];
    if (tenant === undefined) return '';
    if (this.seen.has(tenant)) return tenant;
    if (this.seen.size >= this.maxTenants) return OTHER_TENANTS;
    this.seen.add(tenant);
    return tenant;
  }
}
