// A schema of its own for a split-tenant test file: its tables (created by `ddl`) are the config's
// only tenant tables, each with its split column, and the shard is prepared for them; dropped
// afterwards. tenant-split, split-null-fence and loadgen-split share it.
import { testConfig, closePools, shardPool } from './stack';
import { prepareStack } from './move';
import { prepareShard } from '../../lib/shard/prepare';
import type { Config } from '../../lib/config';

/** `splitColumns`: table name (in `schema`) → its split column. */
export async function setUpSplitSchema(shard: string, schema: string, splitColumns: Record<string, string>, ddl: string): Promise<Config> {
  await prepareStack();
  const base = testConfig();
  const tables = Object.keys(splitColumns).map((t) => `${schema}.${t}`);
  const config: Config = {
    ...base,
    tenant: {
      ...base.tenant,
      schemas: [schema],
      tables,
      splitColumns: Object.fromEntries(Object.entries(splitColumns).map(([t, c]) => [`${schema}.${t}`, c])),
    },
  };
  await shardPool(shard).query(`create schema ${schema};\n${ddl}`);
  await prepareShard(shardPool(shard), config);
  return config;
}

export async function dropSplitSchema(shard: string, schema: string): Promise<void> {
  await shardPool(shard)
    .query(`drop schema if exists ${schema} cascade`)
    .catch(() => {});
  await closePools();
}
