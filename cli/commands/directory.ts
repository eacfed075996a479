// `shardctl directory migrate|status`: the placement directory's schema. `migrate` is the verb
// that changes it (read verbs refuse an outdated schema and name this one), audited under its
// operator (`directory.migrate`, `shard.register`); `status` only reads.
import { Command } from 'commander';
import { onDirectory, poolDsn } from '../../lib/directory/db';
import { ensureDirectory } from '../../lib/directory/ensure';
import { directorySchemaStatus, MIGRATE_COMMAND } from '../../lib/directory/schema';
import { examples } from '../help';
import { operatorOf } from '../actor';
import { configOf, printResult, withConnections } from '../run';

export function register(program: Command) {
  const directory = program.command('directory').description("the placement directory's schema: migrate it, or show its version");
  const cfg = configOf(program);

  const migrate = directory
    .command('migrate')
    .description(
      "apply the directory's pending migrations and register the config's shards missing from it (idempotent; what it changed is audited under the operator)",
    )
    .option('--reason <text>', 'why, for the audit log')
    .option('--actor <name>', 'operator identity for the audit log (directory.migrate, shard.register)')
    .option('--json', 'as JSON: {migrated, shardsAdded}')
    .action(async (o: { json?: boolean; reason?: string; actor?: string }) => {
      const config = cfg();
      const operator = operatorOf(o);
      const r = await withConnections(config, { readOnly: false }, (conns) => ensureDirectory(conns.directoryPool(), config, operator));
      printResult(o.json, r, () =>
        console.log(
          `directory: ${r.migrated.length ? `applied migration(s) ${r.migrated.join(', ')}` : 'schema already current'}` +
            `${r.shardsAdded.length ? `; registered shard(s) ${r.shardsAdded.join(', ')}` : ''}`,
        ),
      );
    });
  examples(migrate, 'directory migrate --reason "release 42"', 'directory migrate --actor alice --json   # {"migrated":[4,5],"shardsAdded":[]}');

  const status = directory
    .command('status')
    .description('the schema versions the directory has and those it lacks; changes nothing')
    .option('--json', 'as JSON: {applied, pending, current}')
    .action(async (o: { json?: boolean }) => {
      const st = await withConnections(cfg(), { readOnly: true }, (conns) => {
        const pool = conns.directoryPool();
        return onDirectory(() => directorySchemaStatus(pool), poolDsn(pool));
      });
      const current = st.pending.length === 0;
      printResult(o.json, { ...st, current }, () =>
        console.log(
          current
            ? `directory: schema current (versions ${st.applied.join(', ')})`
            : `directory: ${st.applied.length ? `versions ${st.applied.join(', ')}` : 'never migrated'}; pending ${st.pending.join(', ')}: run \`${MIGRATE_COMMAND}\``,
        ),
      );
    });
  examples(status, 'directory status', 'directory status --json   # {"applied":[1,2,4,5],"pending":[],"current":true}');
}
