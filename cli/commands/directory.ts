// `shardctl directory migrate|status`: the placement directory's schema. `migrate` is the verb
// that changes it (read verbs refuse an outdated schema and name this one); `status` only reads.
import { Command } from 'commander';
import { loadConfig } from '../../lib/config';
import { createConnections } from '../../lib/connections';
import { DEFAULT_CONNECT_TIMEOUT_MS, onDirectory, poolDsn } from '../../lib/directory/db';
import { ensureDirectory } from '../../lib/directory/ensure';
import { directorySchemaStatus, MIGRATE_COMMAND } from '../../lib/directory/schema';
import { examples } from '../help';

export function register(program: Command) {
  const directory = program.command('directory').description("the placement directory's schema: migrate it, or show its version");
  const open = (readOnly: boolean) => {
    const config = loadConfig({ file: program.opts().config });
    return { config, conns: createConnections(config, { max: 2, connectionTimeoutMillis: DEFAULT_CONNECT_TIMEOUT_MS, readOnly }) };
  };

  const migrate = directory
    .command('migrate')
    .description("apply the directory's pending migrations and register the config's shards missing from it (idempotent)")
    .option('--json', 'as JSON: {migrated, shardsAdded}')
    .action(async (o: { json?: boolean }) => {
      const { config, conns } = open(false);
      try {
        const r = await ensureDirectory(conns.directoryPool(), config);
        if (o.json) console.log(JSON.stringify(r));
        else
          console.log(
            `directory: ${r.migrated.length ? `applied migration(s) ${r.migrated.join(', ')}` : 'schema already current'}` +
              `${r.shardsAdded.length ? `; registered shard(s) ${r.shardsAdded.join(', ')}` : ''}`,
          );
      } finally {
        await conns.close();
      }
    });
  examples(migrate, 'directory migrate', 'directory migrate --json   # {"migrated":[4,5],"shardsAdded":[]}');

  const status = directory
    .command('status')
    .description('the schema versions the directory has and those it lacks; changes nothing')
    .option('--json', 'as JSON: {applied, pending, current}')
    .action(async (o: { json?: boolean }) => {
      const { conns } = open(true);
      try {
        const pool = conns.directoryPool();
        const st = await onDirectory(() => directorySchemaStatus(pool), poolDsn(pool));
        const current = st.pending.length === 0;
        if (o.json) console.log(JSON.stringify({ ...st, current }));
        else
          console.log(
            current
              ? `directory: schema current (versions ${st.applied.join(', ')})`
              : `directory: ${st.applied.length ? `versions ${st.applied.join(', ')}` : 'never migrated'}; pending ${st.pending.join(', ')}: run \`${MIGRATE_COMMAND}\``,
          );
      } finally {
        await conns.close();
      }
    });
  examples(status, 'directory status', 'directory status --json   # {"applied":[1,2,4,5],"pending":[],"current":true}');
}
