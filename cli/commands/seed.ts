// `shardctl seed <tenant> --rows N --blobs M`: realistic demo data for a tenant, written through
// the router (fenced write transactions), blobs into the owning shard's bucket first.
import { Command } from 'commander';
import { configOf } from '../run';
import { invalidInput } from '../../lib/errors';
import { Router } from '../../lib/router';
import { createDeps } from '../../activities/deps';
import { formatSeedSummary, seedTenant } from '../../lib/seed';
import { examples } from '../help';
import { blobWritesOf } from '../../lib/loadgen';

function count(v: string, what: string): number {
  if (!/^\d{1,9}$/.test(String(v).trim())) throw invalidInput(`${what} must be a non-negative integer, got ${JSON.stringify(String(v).slice(0, 40))}`);
  return Number(v);
}

export function register(program: Command) {
  const seed = program
    .command('seed <tenant>')
    .description('write realistic demo rows (accounts, documents with TOASTed bodies and blobs, events, queued jobs) for a tenant through the router')
    .option('--rows <n>', 'approximate total rows: 10% accounts, 30% documents, 45% events, 15% jobs', '1000')
    .option('--blobs <m>', "documents that get a blob in the owning shard's bucket", '0')
    .option('--body-bytes <n>', 'size of the large (TOASTed) document bodies', '24000')
    .option('--blob-writes <how>', "'direct' (an object under the key the document names) or 'index' (a version recorded in shardctl.blob_index)", 'direct')
    .option('--json', 'print the summary as JSON')
    .action(async (tenant: string, o: { rows: string; blobs: string; bodyBytes: string; blobWrites: string; json?: boolean }) => {
      const rows = count(o.rows, '--rows');
      const blobWrites = blobWritesOf(o.blobWrites, '--blob-writes');
      const blobs = count(o.blobs, '--blobs');
      const bodyBytes = count(o.bodyBytes, '--body-bytes');
      const config = configOf(program)();
      const deps = createDeps(config);
      const router = await Router.create(config);
      try {
        const sum = await seedTenant({ router, s3For: deps.s3For, config, tenant, rows, blobs, bodyBytes, blobWrites });
        if (o.json) console.log(JSON.stringify({ ...sum, blobKeys: undefined }));
        else console.log(formatSeedSummary(sum));
      } finally {
        await router.close();
        await deps.close();
      }
    });
  examples(seed, 'seed acme --rows 10000 --blobs 50', 'seed acme --rows 10000 --blobs 50 --blob-writes index', 'seed acme --rows 500 --json');
}
