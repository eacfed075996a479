// `dev up --shards 5` for real: a second stack, in a checkout of its own (a temp dir sharing this
// checkout's downloaded tools), on free ports from 40 above the test stack's (none of the test
// stack's own), with five real Postgres shards, each prepared, its bucket created
// and marked, and named in the config it writes. Stopped and wiped at the end.
import { describe, it, expect } from 'vitest';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import * as stack from '../../lib/dev/stack';
import { freeRun, stackPorts } from '../helpers/ports';
import { projectRoot, loadConfig } from '../../lib/config';
import { openPool } from '../../lib/connections';
import { ListBucketsCommand } from '@aws-sdk/client-s3';

describe('dev up --shards 5', () => {
  it(
    'starts five Postgres shards (shard-d and shard-e real servers), each prepared, with its bucket, in the config; refuses to shrink',
    { timeout: 300_000 },
    async () => {
      const mine = stack.stackAt(projectRoot()).ports;
      const taken = stackPorts(mine);
      const env = {
        SHARDCTL_DEV_PG_PORT: String(await freeRun(mine.pg.directory + 40, 6, taken)),
        SHARDCTL_DEV_TEMPORAL_PORT: String(await freeRun(mine.temporal + 40, 3, taken)),
        SHARDCTL_DEV_UI_PORT: String(await freeRun(mine.temporalUi + 40, 1, taken)),
        SHARDCTL_DEV_S3_PORT: String(await freeRun(mine.s3 + 40, 1, taken)),
        SHARDCTL_DEV_TOXIPROXY_PORT: String(await freeRun(mine.toxiproxy + 40, 1, taken)),
      };
      const root = fs.mkdtempSync(path.join(os.tmpdir(), 'shardctl-five-'));
      fs.mkdirSync(path.join(root, '.dev'));
      fs.symlinkSync(path.join(projectRoot(), '.dev', 'tools'), path.join(root, '.dev', 'tools'));
      const s = stack.stackAt(root, env, { shards: 5 });
      try {
        await stack.up(s, (m) => process.stderr.write(`five: ${m}\n`));
        const parts = await stack.status(stack.stackAt(root, env));
        expect(parts.filter((p) => p.part.startsWith('postgres ')).map((p) => [p.part, p.healthy])).toEqual([
          ['postgres directory', true],
          ['postgres shard-a', true],
          ['postgres shard-b', true],
          ['postgres shard-c', true],
          ['postgres shard-d', true],
          ['postgres shard-e', true],
        ]);
        expect(parts.every((p) => p.healthy)).toBe(true);

        const config = loadConfig({ file: path.join(root, '.dev', 'config.json'), env: {} });
        expect(config.shards.map((x) => [x.name, Number(new URL(x.dsn).port), x.bucket])).toEqual(
          s.shards.map((n, i) => [n, Number(env.SHARDCTL_DEV_PG_PORT) + 1 + i, `shardctl-${n}`]),
        );
        // Five servers, not five schemas: each answers on its own port with its own system id.
        const ids = new Set<string>();
        for (const x of config.shards) {
          const pool = openPool(x.dsn, { max: 1 });
          try {
            ids.add((await pool.query('select system_identifier::text as id from pg_control_system()')).rows[0].id);
            const fence = await pool.query(`select count(*)::int as n from pg_namespace where nspname = 'shardctl'`);
            expect(fence.rows[0].n, `${x.name} prepared`).toBe(1);
            expect((await pool.query('show wal_level')).rows[0].wal_level).toBe('logical');
          } finally {
            await pool.end();
          }
        }
        expect(ids.size).toBe(5);
        const s3 = stack.s3Client(s);
        try {
          const buckets = ((await s3.send(new ListBucketsCommand({}))).Buckets ?? []).map((b) => b.Name).sort();
          expect(buckets).toEqual(s.shards.map((n) => `shardctl-${n}`));
        } finally {
          s3.destroy();
        }
        expect(() => stack.stackAt(root, env, { shards: 3 })).toThrow(/this stack has 5 shards; --shards 3/);
      } finally {
        await stack.reset(stack.stackAt(root, env), (m) => process.stderr.write(`five: ${m}\n`));
        fs.rmSync(root, { recursive: true, force: true });
      }
    },
  );
});
