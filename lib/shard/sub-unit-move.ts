// What a split tenant's sub-unit needs on its source before it can move (docs/architecture.md,
// "Splitting a tenant", "Moving a sub-unit"): the split complete there (the tenant itself disowned,
// so no write under the tenant's own route can add a row the move does not see as the sub-unit's),
// the sub-unit's fence knowing the directory's K, and each table's split column in its replica
// identity: the stream is filtered on the tenant only (a publication's row filter refuses the split
// expression), so the applier tells sub-units apart by the split column, which a DELETE or a
// key-changing UPDATE carries only when it is part of the identity.
import type { Pool } from 'pg';
import { getUnitFence } from './fence';
import { subUnitFences } from './split';
import type { TenantTable } from './tables';

export async function subUnitProblems(
  pool: Pool,
  shard: string,
  unit: string,
  sub: { tenant: string; ways: number; index: number },
  tables: TenantTable[],
): Promise<string[]> {
  const out: string[] = [];
  const own = await getUnitFence(pool, sub.tenant);
  if (!own || own.owned) {
    out.push(
      `tenant ${sub.tenant} is ${own ? 'still owned' : 'not fenced'} on ${shard}: its split is not complete there (run \`shardctl tenant split ${sub.tenant} --ways ${sub.ways}\` again to complete it)`,
    );
  }
  const [f] = await subUnitFences(pool, [unit]);
  if (!f) out.push(`${shard} has no fence for ${unit}`);
  else if (f.ways !== sub.ways) out.push(`${shard}'s fence for ${unit} records ${f.ways ?? 'no'} ways, the directory's split ${sub.ways}`);
  for (const t of tables) out.push(...splitIdentityProblems(t));
  return out;
}

/** Why a table's changes would not say which sub-unit they belong to (empty when they do). */
export function splitIdentityProblems(t: TenantTable): string[] {
  if (!t.split) return [];
  const col = t.split.column;
  // A NULL split column hashes to no sub-unit: no sub-unit's predicate selects it, so no move would
  // carry it (the fence refuses writing one in a sub-unit's transaction; one may predate that).
  if (t.columns.find((c) => c.name === col)?.notNull === false) {
    return [`${t.schema}.${t.name}: its split column ${col} may be NULL, and a NULL row belongs to no sub-unit (no move would carry it); make ${col} NOT NULL`];
  }
  if (t.replicaIdentity === 'full') return [];
  if (t.replicaIdentity === 'default' && t.primaryKey.includes(col)) return [];
  return [
    `${t.schema}.${t.name}: its split column ${col} is not in its replica identity (${t.replicaIdentity === 'default' ? `primary key (${t.primaryKey.join(', ')})` : t.replicaIdentity}): a DELETE would not say which sub-unit it belongs to; make ${col} part of the primary key, or set REPLICA IDENTITY FULL`,
  ];
}
