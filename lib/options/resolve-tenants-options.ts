import type { OutboxTenantsOptions } from './outbox.options';
import { checks, fail, section } from './outbox-option-checks';

/** `tenants` with its defaults applied and its values checked. */
export interface ResolvedTenantsOptions {
  readonly resolve: (() => string | undefined) | undefined;
  /** null: claims are not shared between tenants. */
  readonly fair: { readonly weights: ReadonlyMap<string, number> } | null;
}

/** The largest weight of a tenant's share (shares are whole rows of a batch). */
const MAX_WEIGHT = 1_000;

/** Checks `tenants`; null when it is left out (tenant ids off). */
export function resolveTenantsOptions(
  value: OutboxTenantsOptions | undefined,
): ResolvedTenantsOptions | null {
  if (value === undefined) return null;
  const tenants = section(value, 'tenants');
  if (tenants.resolve !== undefined && typeof tenants.resolve !== 'function') {
    fail(
      'tenants.resolve',
      'it is not a function',
      "Pass () => tenantId, called in the caller's context at each enqueue (e.g. () => cls.get('tenantId')).",
    );
  }
  return { resolve: tenants.resolve, fair: resolveFair(tenants.fair) };
}

function resolveFair(fair: OutboxTenantsOptions['fair']): ResolvedTenantsOptions['fair'] {
  if (fair === undefined || fair === false) return null;
  if (fair === true) return { weights: new Map() };
  const { weights } = section(fair, 'tenants.fair');
  const resolved = new Map<string, number>();
  if (weights === undefined) return { weights: resolved };
  const given = section(weights, 'tenants.fair.weights');
  for (const [tenant, weight] of Object.entries(given)) {
    resolved.set(
      tenant,
      checks.integer(weight, 1, `tenants.fair.weights.${tenant}`, 1, MAX_WEIGHT),
    );
  }
  return { weights: resolved };
}
