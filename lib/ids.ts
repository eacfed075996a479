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

/**
 * The move id (the only place it is derived): the unit, the epoch it held when the move began,
 * and the workflow run that plans it, so a move started again after a cancel at the same epoch
 * never shares an id, slot or publication with the old one's late attempts.
 */
export function moveIdFor(unit: string, epoch: number, runId: string): string {
  const run = runId
    .toLowerCase()
    .replace(/[^a-z0-9]/g, '')
    .slice(0, 8);
  if (!run) throw invalidInput('a move id needs the run that plans it');
  return `${unit}.e${epoch}.${run}`;
}

/**
 * Postgres identifiers for a move's objects: [a-z0-9_], ≤ 63 chars, unique per (move, direction).
 * A readable prefix of the id plus a hash of the whole id, so ids that differ only in
 * punctuation (`acme-1`, `acme_1`) or past the prefix never share a slot or a publication.
 */
export function replicationNames(moveId: string, direction: 'forward' | 'reverse') {
  const d = direction === 'forward' ? 'f' : 'r';
  const name = `shardctl_${d}_${readable(moveId)}_${fnv1a64(moveId)}`;
  return { slot: name, publication: name };
}

function readable(moveId: string): string {
  return moveId
    .toLowerCase()
    .replace(/[^a-z0-9_]/g, '_')
    .slice(0, 28);
}

/** A LIKE pattern for every slot and publication of moves whose id starts with `moveIdPrefix` (tools, tests). */
export function replicationNamePattern(moveIdPrefix: string): string {
  return `shardctl\\__\\_${readable(moveIdPrefix).replace(/_/g, '\\_')}%`;
}

/** 64-bit FNV-1a of the UTF-8 bytes, as 16 hex digits. Pure (no node:crypto), so workflows may import it. */
function fnv1a64(s: string): string {
  let h = 0xcbf29ce484222325n;
  for (const byte of new TextEncoder().encode(s)) {
    h ^= BigInt(byte);
    h = (h * 0x100000001b3n) & 0xffffffffffffffffn;
  }
  return h.toString(16).padStart(16, '0');
}
