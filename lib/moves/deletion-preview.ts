// What deleting a unit's copy on a shard would remove — its rows per tenant table and its blobs
// under the tenant prefix — read (never written) so an operator sees it before saying yes to an
// irreversible step (`move retire`, a short soak). Node-only.
import type { Config } from '../config';
import { shardByName } from '../config';
import type { Connections } from '../connections';
import { countUnitRows, listTenantTables } from '../shard/tables';
import { listBlobs, unitBlobPrefix } from '../blobs';
import { unitRows } from '../unit-rows';
import { parseUnit } from '../buckets/units';
import { getSplit } from '../directory/splits';
import { renderTable } from '../text-table';

export interface DeletionPreview {
  unit: string;
  shard: string;
  bucket: string;
  blobPrefix: string;
  blobs: number;
  blobBytes: number;
  tables: { table: string; rows: number }[];
}

export async function previewUnitDeletion(config: Config, conns: Connections, shard: string, unit: string): Promise<DeletionPreview> {
  const pool = conns.shardPool(shard);
  // A split tenant's sub-unit: its rows are the tenant's in its sub-unit of the directory's K.
  const p = parseUnit(unit);
  const split = p.kind === 'tenant' && p.path.length > 0 ? await getSplit(conns.directoryPool(), p.tenant) : undefined;
  const rows = unitRows(config, unit, split);
  const tables = await listTenantTables(pool, rows.tables);
  const counted = [];
  for (const table of tables) counted.push({ table: `${table.schema}.${table.name}`, rows: await countUnitRows(pool, table, rows.column, rows.value) });
  const bucket = shardByName(config, shard).bucket;
  // A tenant's objects under tenants/<id>/, a bucket unit's under datasets/<dataset>/<n>/; a split
  // sub-unit has none (a split tenant holds no blobs).
  const withBlobs = !rows.subUnit;
  const blobPrefix = withBlobs ? unitBlobPrefix(unit) : '';
  const blobs = withBlobs ? await listBlobs(conns.s3For(shard), bucket, blobPrefix) : [];
  return { unit, shard, bucket, blobPrefix, blobs: blobs.length, blobBytes: blobs.reduce((n, b) => n + b.size, 0), tables: counted };
}

/** The preview as lines: the shard, each table with its row count (a table, boxed when `tty`), the blob prefix. */
export function formatDeletionPreview(p: DeletionPreview, tty = false): string[] {
  const rows = p.tables.reduce((n, t) => n + t.rows, 0);
  return [
    `  on shard ${p.shard}: ${rows} row(s) of ${p.unit} in ${p.tables.length} table(s)`,
    ...renderTable({ rows: p.tables.map((t) => [t.table, `${t.rows} row(s)`]), indent: '    ' }, tty),
    `  blobs: ${p.blobs} object(s), ${p.blobBytes} bytes under s3://${p.bucket}/${p.blobPrefix}`,
  ];
}
