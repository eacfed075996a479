// Validation of untrusted identifiers (tenant ids, shard names) and derived names. Pure.
import { invalidInput } from './errors';

const TENANT_RE = /^[a-z0-9][a-z0-9_-]{0,62}$/;
const SHARD_RE = /^[a-z][a-z0-9-]{0,62}$/;

/** A tenant id is untrusted input: lower-case letters, digits, '-' and '_', 1..63 chars. */
export function validateTenantId(id: unknown): string {
  if (typeof id !== 'string' || id.length === 0) throw invalidInput('tenant id is empty');
  if (!TENANT_RE.test(id)) {
    throw invalidInput(`invalid tenant id ${JSON.stringify(id.slice(0, 80))}: use 1-63 of a-z, 0-9, '-' and '_', starting with a letter or digit`);
  }
  return id;
}

export function validateShardName(name: unknown): string {
  if (typeof name !== 'string' || !SHARD_RE.test(name)) {
    throw invalidInput(`invalid shard name ${JSON.stringify(String(name).slice(0, 80))}: use a-z, 0-9 and '-', starting with a letter`);
  }
  return name;
}

/** Move id, workflow id, slot and publication names are derived from the unit, never random. */
export function moveWorkflowId(unit: string): string {
  return `move-${unit}`;
}

/** The move id: derived from the unit and the epoch it held when the move began (the only place it is derived). */
export function moveIdFor(unit: string, epoch: number): string {
  return `${unit}.e${epoch}`;
}

/** Postgres identifiers for a move's objects: [a-z0-9_], ≤ 63 chars, unique per (move, direction). */
export function replicationNames(moveId: string, direction: 'forward' | 'reverse') {
  const safe = moveId.replace(/[^a-z0-9_]/g, '_').slice(0, 40);
  const d = direction === 'forward' ? 'f' : 'r';
  return { slot: `shardctl_${d}_${safe}`, publication: `shardctl_${d}_${safe}` };
}
