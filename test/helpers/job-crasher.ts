// A job worker process that dies (SIGKILL, its own) inside the first job it runs: the crash a
// dead-letter test needs, for real. Usage: node -r tsx/cjs test/helpers/job-crasher.ts <tenant> <workerId> <leaseMs> <maxAttempts>
import { loadConfig } from '../../lib/config';
import { Router } from '../../lib/router';
import { runJobWorker } from '../../lib/jobs/worker';

async function main() {
  const [tenant, workerId, leaseMs, maxAttempts] = process.argv.slice(2);
  const router = await Router.create(loadConfig());
  await runJobWorker({
    router,
    tenants: [tenant],
    grant: { tenants: [tenant] },
    workerId,
    pollMs: 50,
    leaseMs: Number(leaseMs),
    maxAttempts: Number(maxAttempts),
    signal: new AbortController().signal,
    handler: async () => {
      process.stdout.write('crashing\n');
      process.kill(process.pid, 'SIGKILL');
      await new Promise(() => {});
    },
  });
}

main().catch((e) => {
  process.stderr.write(`job-crasher: ${e?.stack ?? e}\n`);
  process.exit(2);
});
