import { describe, it, expect, afterAll } from 'vitest';
import { Client, Connection } from '@temporalio/client';
import { PutObjectCommand, GetObjectCommand } from '@aws-sdk/client-s3';
import { testConfig, uniq, shardPool, closePools } from '../helpers/stack';
import { startWorker } from '../../worker';
import { createDeps } from '../../activities/deps';

afterAll(closePools);

describe('foundation smoke', () => {
  it('runs a trivial workflow to completion through a real worker', async () => {
    const config = testConfig();
    const taskQueue = uniq('smoke');
    const w = await startWorker(config, { taskQueue });
    const connection = await Connection.connect({ address: config.temporal.address });
    try {
      const client = new Client({ connection, namespace: config.temporal.namespace });
      const result = await client.workflow.execute('smokeWorkflow', { taskQueue, workflowId: uniq('smoke-wf'), args: ['shardctl'] });
      expect(result).toBe('hello, shardctl');
    } finally {
      await connection.close();
      await w.shutdown();
    }
  });

  it('writes and reads back an object through the S3 server', async () => {
    const config = testConfig();
    const deps = createDeps(config);
    try {
      const s3 = deps.s3For('shard-a');
      const key = `smoke/${uniq('obj')}`;
      const body = Buffer.from('x'.repeat(100_000) + 'end');
      await s3.send(new PutObjectCommand({ Bucket: config.shards[0].bucket, Key: key, Body: body }));
      const got = await s3.send(new GetObjectCommand({ Bucket: config.shards[0].bucket, Key: key }));
      const bytes = Buffer.from(await got.Body!.transformToByteArray());
      expect(bytes.equals(body)).toBe(true);
    } finally {
      await deps.close();
    }
  });

  it('runs every shard with wal_level=logical', async () => {
    for (const s of testConfig().shards) {
      const r = await shardPool(s.name).query('show wal_level');
      expect(r.rows[0].wal_level).toBe('logical');
    }
  });
});
