// A fleet of the test's own on the shared stack: a directory database of its own (so closing or
// draining a shard there changes nothing the other suites see), the stack's real shards and
// buckets (units are the test's own tenants, so fences and rows never meet another suite's), a
// rebalance workflow id of its own, a worker on its own task queue, and a config file for the CLI.
import type { Pool } from 'pg';
import { WorkflowNotFoundError, type Client, type WorkflowHandle } from '@temporalio/client';
import { moveWorkflowId } from '../../lib/ids';
import { rebalanceStatusQuery, type RebalanceStatus } from '../../workflows/rebalance-messages';
import type { Config } from '../../lib/config';
import { openPool } from '../../lib/connections';
import { inTransaction } from '../../lib/pg';
import { ensureDirectory } from '../../lib/directory/ensure';
import { createTenant } from '../../lib/tenants';
import { seedTenant } from '../../lib/seed';
import { Router } from '../../lib/router';
import { createDeps } from '../../activities/deps';
import { startWorker } from '../../worker';
import { testConfig, shardPool, uniq } from './stack';
import { prepareStack, temporal } from './move';
import { configFile } from './cli';

export type Fleet = Awaited<ReturnType<typeof ownFleet>>;

/** Creates the directory database `<prefix>_...`, migrated, with the config's shards open. `worker: false` starts none. */
export async function ownFleet(prefix: string, o: { worker?: boolean; configure?: (c: Config) => Config } = {}) {
  await prepareStack();
  const base = testConfig();
  const name = uniq(prefix).replace(/-/g, '_');
  const admin = openPool(base.directory.dsn, { max: 1 });
  try {
    await admin.query(`create database ${name}`);
  } finally {
    await admin.end();
  }
  const url = new URL(base.directory.dsn);
  url.pathname = `/${name}`;
  const own: Config = {
    ...base,
    directory: { ...base.directory, dsn: url.toString() },
    temporal: { ...base.temporal, rebalanceWorkflowId: `rebalance-${name}` },
  };
  // A test's own tenant tables (schemas, split columns): the worker's config too.
  const config = o.configure ? o.configure(own) : own;
  const directory: Pool = openPool(config.directory.dsn, { max: 4 });
  await ensureDirectory(directory, config);
  const file = configFile(config);
  const tq = uniq(prefix);
  const worker = o.worker === false ? undefined : await startWorker(config, { taskQueue: tq });
  const t = await temporal();
  return {
    name,
    config,
    directory,
    tq,
    t,
    configFile: file.file,
    /** A tenant of this fleet on `shard`, with `rows` rows and `blobs` objects written through the router. */
    async tenant(shard: string, o: { rows?: number; blobs?: number; load?: number; prefix?: string } = {}): Promise<string> {
      const tenant = uniq(o.prefix ?? 'ft');
      await createTenant({ directory, shardPool, config }, { tenant, shard, expectedLoad: o.load, actor: 'test' });
      if (o.rows || o.blobs) {
        const router = await Router.create(config);
        const deps = createDeps(config);
        try {
          await seedTenant({ router, s3For: (s) => deps.s3For(s), config, tenant, rows: o.rows ?? 0, blobs: o.blobs ?? 0 });
        } finally {
          await router.close();
          await deps.close();
        }
      }
      return tenant;
    },
    async close() {
      // A run a failed test left behind (paused, say) would wait forever on the stack.
      await t.client.workflow
        .getHandle(config.temporal.rebalanceWorkflowId)
        .terminate('test over')
        .catch(() => {});
      await t.close();
      await worker?.shutdown();
      await directory.end();
      file.remove();
      const a = openPool(base.directory.dsn, { max: 1 });
      try {
        await a.query(`drop database if exists ${name} with (force)`);
      } finally {
        await a.end();
      }
    },
  };
}

/** Polls a rebalance run's status query (its latest run) until `pred` holds; a failing query is retried until the deadline. */
export async function waitForRebalance(handle: WorkflowHandle, pred: (s: RebalanceStatus) => boolean, timeoutMs = 120_000): Promise<RebalanceStatus> {
  const deadline = Date.now() + timeoutMs;
  let last: RebalanceStatus | undefined;
  while (Date.now() < deadline) {
    last = await handle.query(rebalanceStatusQuery).catch(() => last);
    if (last && pred(last)) return last;
    await new Promise((r) => setTimeout(r, 300));
  }
  throw new Error(`rebalance status never matched within ${timeoutMs} ms; last: ${JSON.stringify(last)}`);
}

/** Whether a move workflow of `unit` was ever started (its id is derived from the unit). */
export async function moveExists(client: Client, unit: string): Promise<boolean> {
  return client.workflow
    .getHandle(moveWorkflowId(unit))
    .describe()
    .then(
      () => true,
      (e) => {
        if (e instanceof WorkflowNotFoundError) return false;
        throw e;
      },
    );
}

/** Every run of a workflow from its first, following continue-as-new: each run's id and full history. */
export async function runsOf(client: Client, workflowId: string, firstRunId: string) {
  const runs: { runId: string; history: Awaited<ReturnType<WorkflowHandle['fetchHistory']>> }[] = [];
  for (let runId: string | undefined = firstRunId; runId;) {
    const history = await client.workflow.getHandle(workflowId, runId).fetchHistory();
    runs.push({ runId, history });
    const last = history.events?.at(-1);
    runId = last?.workflowExecutionContinuedAsNewEventAttributes?.newExecutionRunId ?? undefined;
  }
  return runs;
}

/** A row of `tenant` written on `shard` behind the fence (replica role), as a half-done restore would leave it. */
export async function strayRow(shard: string, tenant: string): Promise<void> {
  await inTransaction(shardPool(shard), async (c) => {
    await c.query('set local session_replication_role = replica');
    await c.query(`insert into public.events(tenant_id, kind) values ($1, 'stray')`, [tenant]);
  });
}
