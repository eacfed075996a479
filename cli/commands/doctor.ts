// `shardctl doctor`: what an SRE needs at 3 a.m. — orphaned slots and publications, slots holding
// too much WAL, units frozen with no move, fences that disagree with the directory, unreachable or
// unprepared shards, blocked moves, reservations of gone moves, objects written behind shardctl's
// back into a non-owner's bucket — each with the command that fixes it. It changes nothing
// unless told `--fix <finding>` for one of the safe ones (lib/doctor/fix.ts). Exit 0 when clean,
// 1 when something needs attention; with --fix, 0 when every named fix was applied.
import { Command } from 'commander';
import { configOf } from '../run';
import { createConnections } from '../../lib/connections';
import { temporalClient } from '../../lib/temporal-client';
import { gatherFacts } from '../../lib/doctor/facts';
import { parseDurationMs } from '../../lib/duration';
import { judge, type Finding } from '../../lib/doctor/findings';
import { applyFix } from '../../lib/doctor/fix';
import { FENCE_LOCK_CLASS } from '../../lib/shard/schema';
import { ShardctlError, invalidInput } from '../../lib/errors';
import { EXIT } from '../exit';
import { examples } from '../help';
import { actorDefault } from '../actor';

/** "512MiB", "1GiB", "1000000" (bytes). */
export function parseBytes(text: string): number {
  const m = /^(\d+(?:\.\d+)?)\s*(b|kib|mib|gib|kb|mb|gb)?$/i.exec(text.trim());
  if (!m) throw invalidInput(`invalid size ${JSON.stringify(text)}: use e.g. 512MiB, 1GiB or a number of bytes`);
  const mult: Record<string, number> = { b: 1, kib: 1024, mib: 1024 ** 2, gib: 1024 ** 3, kb: 1e3, mb: 1e6, gb: 1e9 };
  return Math.round(Number(m[1]) * mult[(m[2] ?? 'b').toLowerCase()]);
}

function printFindings(findings: Finding[]) {
  for (const f of findings) {
    console.log(`${f.severity.toUpperCase()} ${f.id}`);
    console.log(`  ${f.message}`);
    console.log(`  fix: ${f.fix}`);
  }
}

export function register(program: Command) {
  const doctor = program
    .command('doctor')
    .description(
      "find what needs an operator: orphaned slots, frozen units, disagreeing fences, unreachable or unprepared shards, blocked moves or moves stuck in one phase, stale headroom reservations, blobs written behind shardctl's back, search attributes the namespace lacks",
    )
    .option('--json', 'print {ok, findings: [{id, kind, severity, message, fix, autoFix, shard?, unit?, object?, retainedBytes?}], checked}')
    .option('--wal-threshold <size>', 'report slots retaining more WAL than this (default limits.slotRetentionWarnBytes)')
    .option('--phase-threshold <duration>', 'report a move in one phase longer than this, or this long past its soak end', '6h')
    .option(
      '--fix <finding>',
      'apply the fix of this finding id (repeatable); only orphaned slots and publications, frozen units without a move and stale reservations',
      (v: string, acc: string[]) => [...acc, v],
      [] as string[],
    )
    .option('--actor <name>', 'operator identity for the audit log of a fix')
    .action(async (o: { json?: boolean; walThreshold?: string; phaseThreshold: string; fix: string[]; actor?: string }) => {
      const config = configOf(program)();
      const walThresholdBytes = o.walThreshold ? parseBytes(o.walThreshold) : config.limits.slotRetentionWarnBytes;
      const phaseThresholdMs = parseDurationMs(o.phaseThreshold, '--phase-threshold');
      const fixing = o.fix.length > 0;
      // A plain run only reads: its sessions refuse writes.
      const conns = createConnections(config, {
        applicationName: 'shardctl-doctor',
        max: 2,
        connectionTimeoutMillis: 3000,
        queryTimeoutMs: 15_000,
        readOnly: !fixing,
      });
      let t: Awaited<ReturnType<typeof temporalClient>> | undefined;
      let temporalError = '';
      try {
        t = await temporalClient(config);
      } catch (e) {
        temporalError = String((e as Error)?.message ?? e).split('\n')[0];
      }
      try {
        const run = async () =>
          judge(await gatherFacts({ config, conns, temporal: t ? { client: t.client } : { error: temporalError }, walThresholdBytes, phaseThresholdMs }), {
            fenceLockClass: FENCE_LOCK_CLASS,
          });
        let findings = await run();
        if (fixing) {
          if (!t) throw new ShardctlError('Unavailable', `cannot fix without Temporal: ${temporalError}`);
          const fixed: { id: string; result: string }[] = [];
          for (const id of o.fix) {
            // Judged again from fresh facts before each fix: what the operator saw may be stale.
            const f = findings.find((x) => x.id === id);
            if (!f) throw new ShardctlError('NotFound', `no finding ${id} now (run \`shardctl doctor\` to list them)`);
            fixed.push({ id, result: await applyFix({ conns, client: t.client, actor: o.actor || actorDefault() }, f) });
            findings = await run();
          }
          if (o.json) console.log(JSON.stringify({ fixed, findings }, null, 2));
          else for (const x of fixed) console.log(`fixed ${x.id}: ${x.result}`);
          return;
        }
        const checked = {
          shards: config.shards.map((s) => s.name),
          walThresholdBytes,
          phaseThresholdMs,
        };
        if (o.json) console.log(JSON.stringify({ ok: findings.length === 0, findings, checked }, null, 2));
        else if (findings.length === 0) console.log(`doctor: nothing needs attention (${config.shards.length} shards, the directory and Temporal checked)`);
        else {
          printFindings(findings);
          const critical = findings.filter((f) => f.severity === 'critical').length;
          console.log(`\n${findings.length} finding(s), ${critical} critical`);
        }
        if (findings.length) process.exitCode = EXIT.failure;
      } finally {
        await t?.close().catch(() => {});
        await conns.close();
      }
    });
  examples(
    doctor,
    'doctor',
    'doctor --json | jq ".findings[] | select(.severity == \\"critical\\")"',
    'doctor --wal-threshold 1GiB',
    'doctor --fix orphaned-slot:shard-a:shardctl_f_acme_e3_1a2b3c4d_00f1e2d3c4b5a697 --actor alice',
  );
}
