// Seeds a tenant with realistic demo data through the router: accounts, documents (a quarter
// with incompressible bodies large enough to be TOASTed out of line, some with a blob), events
// with jsonb payloads and queued jobs. Written in write transactions of a few hundred rows; a
// document's blob is put into the bucket of the shard the transaction runs on before the row
// naming it commits there.
import { randomBytes, randomUUID } from 'node:crypto';
import type { PoolClient } from 'pg';
import type { Config } from './config';
import { invalidInput } from './errors';
import { validateTenantId } from './ids';
import { tenantBlobPrefix } from './blobs/prefix';
import { forEachLimit } from './blobs/concurrency';
import { incompressibleText } from './loadgen/model';
import { S3For, blobsOfTransaction, shardOfTransaction, TenantRouter } from './loadgen/route';
import { blobNameOf, type TenantBlobs } from './blobs/fenced';
import { ownedClients } from './loadgen/clients';
import { blobWritesOf, type BlobWrites } from './loadgen/log';
import { Router } from './router';

export interface SeedOptions {
  config: Config;
  /** Default: a router of its own, created from config and closed at the end. */
  router?: TenantRouter;
  /** Default: S3 clients of its own from config. */
  s3For?: S3For;
  tenant: string;
  /** Approximate total rows: 10% accounts, 30% documents (at least `blobs`), 45% events, 15% jobs. */
  rows: number;
  /** Documents that get a blob object. */
  blobs: number;
  /** 'direct' (default): each object under the key the document names; 'index': through the blob index (a version object per name, recorded in shardctl.blob_index by the same transaction). */
  blobWrites?: BlobWrites;
  /** Size of the large document bodies (default 24 000 characters, > 20 KB). */
  bodyBytes?: number;
  batchRows?: number;
  actor?: string;
}

export interface SeedSummary {
  tenant: string;
  /** Shard of the last transaction (the owner while seeding). */
  shard: string;
  accounts: number;
  documents: number;
  events: number;
  jobs: number;
  blobs: number;
  /** Documents whose body is `bodyBytes` long (TOASTed). */
  largeBodies: number;
  blobKeys: string[];
  bytes: number;
  transactions: number;
  elapsedMs: number;
}

const FIRST = ['Ada', 'Grace', 'Alan', 'Edsger', 'Barbara', 'Donald', 'Margaret', 'Ken', 'Frances', 'John'];
const LAST = ['Lovelace', 'Hopper', 'Turing', 'Dijkstra', 'Liskov', 'Knuth', 'Hamilton', 'Thompson', 'Allen', 'Backus'];
const EVENT_KINDS = ['login', 'invoice.created', 'invoice.paid', 'document.shared', 'member.invited', 'plan.changed'];
const JOB_KINDS = ['send_email', 'reindex_document', 'export_csv', 'charge_card', 'thumbnail'];

export function seedPlan(rows: number, blobs: number) {
  if (!Number.isInteger(rows) || rows < 0) throw invalidInput(`rows must be a non-negative integer (got ${rows})`);
  if (!Number.isInteger(blobs) || blobs < 0) throw invalidInput(`blobs must be a non-negative integer (got ${blobs})`);
  const accounts = Math.max(1, Math.round(rows * 0.1));
  const documents = Math.max(blobs, Math.round(rows * 0.3));
  const jobs = Math.round(rows * 0.15);
  const events = Math.max(0, rows - accounts - documents - jobs);
  return { accounts, documents, events, jobs };
}

export async function seedTenant(opts: SeedOptions): Promise<SeedSummary> {
  const tenant = validateTenantId(opts.tenant);
  const plan = seedPlan(opts.rows, opts.blobs);
  blobWritesOf(opts.blobWrites, 'seed blobWrites');
  const clients = ownedClients(opts.config, { s3For: opts.s3For });
  const router = opts.router ?? (await Router.create(opts.config));
  try {
    return await seedWith(opts, tenant, plan, router, clients.s3For);
  } finally {
    if (!opts.router) await (router as Router).close();
    await clients.close();
  }
}

async function seedWith(opts: SeedOptions, tenant: string, plan: ReturnType<typeof seedPlan>, router: TenantRouter, s3For: S3For): Promise<SeedSummary> {
  const bodyBytes = opts.bodyBytes ?? 24_000;
  const batch = opts.batchRows ?? 250;
  const t0 = Date.now();
  const sum: SeedSummary = {
    tenant,
    shard: '',
    accounts: 0,
    documents: 0,
    events: 0,
    jobs: 0,
    blobs: 0,
    largeBodies: 0,
    blobKeys: [],
    bytes: 0,
    transactions: 0,
    elapsedMs: 0,
  };
  const grant = { tenants: [tenant] };
  // A bulk batch may take longer than an application call's default deadline (which bounds every statement).
  const SEED_CALL = { deadlineMs: 120_000 };
  const write = async (fn: (tx: PoolClient, shard: string, blobs: TenantBlobs) => Promise<void>) => {
    await router.withTenant(
      tenant,
      grant,
      'write',
      async (tx, route) => {
        const shard = shardOfTransaction(opts.config, tx, route);
        await fn(tx, shard, blobsOfTransaction(opts.config, tx, route, tenant, s3For));
        sum.shard = shard;
      },
      SEED_CALL,
    );
    sum.transactions++;
  };
  const pick = <T>(xs: T[]) => xs[Math.floor(Math.random() * xs.length)];

  const accountIds: string[] = [];
  for (let i = 0; i < plan.accounts; i += batch) {
    const n = Math.min(batch, plan.accounts - i);
    const ids = Array.from({ length: n }, () => randomUUID());
    const names = ids.map(() => `${pick(FIRST)} ${pick(LAST)}`);
    const balances = ids.map(() => (Math.random() * 10_000).toFixed(2));
    await write(async (tx) => {
      await tx.query(`insert into public.accounts (tenant_id, id, name, balance) select $1, * from unnest($2::uuid[], $3::text[], $4::numeric[])`, [
        tenant,
        ids,
        names,
        balances,
      ]);
    });
    accountIds.push(...ids);
    sum.accounts += n;
  }

  for (let i = 0; i < plan.documents; i += batch) {
    const n = Math.min(batch, plan.documents - i);
    const docs = Array.from({ length: n }, (_, j) => {
      const idx = i + j;
      const large = idx % 4 === 0;
      const body = large ? incompressibleText(bodyBytes) : `Notes ${idx}: ${randomBytes(16).toString('hex')} `.repeat(5);
      const id = randomUUID();
      const blob =
        idx < opts.blobs
          ? { key: `${tenantBlobPrefix(tenant)}docs/${randomUUID()}`, content: randomBytes(1024 + Math.floor(Math.random() * 31 * 1024)) }
          : null;
      return { id, account: pick(accountIds), title: `Document ${idx + 1}`, body, large, blob };
    });
    await write(async (tx, _shard, blobs) => {
      const withBlob = docs.filter((d) => d.blob);
      // Retried attempts (stale route) put again, into the bucket of the shard they run on; each
      // put is fenced by this transaction (lib/blobs/fenced.ts).
      await forEachLimit(withBlob, 8, async (d) => {
        const name = blobNameOf(tenant, d.blob!.key);
        if (opts.blobWrites === 'index') await blobs.write(name, d.blob!.content);
        else await blobs.put(name, d.blob!.content);
      });
      await tx.query(
        `insert into public.documents (tenant_id, id, account_id, title, body, blob_key)
         select $1, * from unnest($2::uuid[], $3::uuid[], $4::text[], $5::text[], $6::text[])`,
        [tenant, docs.map((d) => d.id), docs.map((d) => d.account), docs.map((d) => d.title), docs.map((d) => d.body), docs.map((d) => d.blob?.key ?? null)],
      );
    });
    for (const d of docs) {
      sum.bytes += d.body.length;
      if (d.large) sum.largeBodies++;
      if (d.blob) {
        sum.blobKeys.push(d.blob.key);
        sum.bytes += d.blob.content.length;
      }
    }
    sum.documents += n;
    sum.blobs += docs.filter((d) => d.blob).length;
  }

  for (let i = 0; i < plan.events; i += batch) {
    const n = Math.min(batch, plan.events - i);
    const kinds = Array.from({ length: n }, () => pick(EVENT_KINDS));
    const payloads = kinds.map((kind, j) =>
      JSON.stringify({
        kind,
        seq: i + j,
        account: pick(accountIds),
        ip: `10.${(i + j) % 256}.${j % 256}.7`,
        meta: { ua: 'seed/1.0', tags: [kind.split('.')[0]] },
      }),
    );
    const ats = kinds.map(() => new Date(Date.now() - Math.floor(Math.random() * 30 * 86_400_000)).toISOString());
    await write(async (tx) => {
      await tx.query(
        `insert into public.events (tenant_id, id, kind, payload, at)
         select $1, gen_random_uuid(), k, p, a from unnest($2::text[], $3::jsonb[], $4::timestamptz[]) as t(k, p, a)`,
        [tenant, kinds, payloads, ats],
      );
    });
    sum.events += n;
  }

  for (let i = 0; i < plan.jobs; i += batch) {
    const n = Math.min(batch, plan.jobs - i);
    const kinds = Array.from({ length: n }, () => pick(JOB_KINDS));
    // Spread from ten minutes ago (due now) to an hour ahead (not yet due).
    const runAts = kinds.map(() => new Date(Date.now() + Math.floor(-600_000 + Math.random() * 4_200_000)).toISOString());
    const payloads = kinds.map((kind) => JSON.stringify({ kind, account: pick(accountIds), priority: Math.floor(Math.random() * 3) }));
    await write(async (tx) => {
      await tx.query(
        `insert into public.jobs (tenant_id, id, kind, state, run_at, payload)
         select $1, gen_random_uuid(), k, 'queued', r, p from unnest($2::text[], $3::timestamptz[], $4::jsonb[]) as t(k, r, p)`,
        [tenant, kinds, runAts, payloads],
      );
    });
    sum.jobs += n;
  }
  sum.elapsedMs = Date.now() - t0;
  return sum;
}

export function formatSeedSummary(s: SeedSummary): string {
  return [
    `seeded ${s.tenant} on ${s.shard} in ${(s.elapsedMs / 1000).toFixed(1)}s (${s.transactions} transactions):`,
    `  accounts  ${s.accounts}`,
    `  documents ${s.documents} (${s.largeBodies} with bodies TOASTed out of line, ${s.blobs} with a blob)`,
    `  events    ${s.events}`,
    `  jobs      ${s.jobs} queued`,
    `  ${(s.bytes / 1024 / 1024).toFixed(1)} MiB of bodies and blobs`,
  ].join('\n');
}
