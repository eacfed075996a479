// The one configuration of shardctl: parsed once with zod at the edge (worker, cli) and passed
// down. Invalid config fails with the path of the bad field and what was expected.
import { z } from 'zod';
import { ShardctlError } from './errors';
import fs from 'node:fs';
import path from 'node:path';
import { MAX_BUCKETS } from './buckets/units';
import { sharedBucketProblems } from './blobs/bucket-identity';
import { ConfigError } from './config-error';
import { unknownKeyLines } from './config-keys';
import { resolveSecretFiles } from './config-secrets';

const shardName = z.string().regex(/^[a-z][a-z0-9-]{0,62}$/, 'shard names are lower-case letters, digits and dashes');
const datasetName = z.string().regex(/^[a-z][a-z0-9_]{0,31}$/, 'dataset names are 1-32 lower-case letters, digits and underscores, starting with a letter');
const bucketCount = z
  .number({ invalid_type_error: 'the bucket count B is a number' })
  .int('the bucket count B is an integer')
  .min(1, 'the bucket count B is at least 1')
  .max(MAX_BUCKETS, `the bucket count B is at most ${MAX_BUCKETS}`);

export const configSchema = z
  .object({
    temporal: z
      .object({
        address: z.string().min(1),
        namespace: z.string().min(1).default('default'),
        taskQueue: z.string().min(1).default('shardctl-moves'),
        /**
         * The workflow id of the fleet's one rebalance run (a drain and an isolate are runs too):
         * two fleets (directories) that share a namespace give theirs different ids.
         */
        rebalanceWorkflowId: z
          .string()
          .regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$/, 'a workflow id of letters, digits, dots, dashes and underscores')
          .default('rebalance'),
        uiUrl: z.string().url().optional(),
        tls: z
          .object({
            serverName: z.string().optional(),
            caPath: z.string().optional(),
            certPath: z.string().optional(),
            keyPath: z.string().optional(),
          })
          .strict()
          .optional(),
        apiKeyEnv: z.string().optional(),
      })
      .strict(),
    directory: z
      .object({
        dsn: z.string().min(1),
        /** A file holding the DSN's password (lib/config-secrets.ts); the DSN then names none. */
        passwordFile: z.string().min(1).optional(),
      })
      .strict(),
    shards: z
      .array(
        z
          .object({
            name: shardName,
            /** Resolved before validation from `dsnEnv` when the file names a variable instead (lib/config-secrets.ts). */
            dsn: z.string().min(1),
            bucket: z.string().min(3),
            s3Endpoint: z.string().url().optional(),
            passwordFile: z.string().min(1).optional(),
          })
          .strict(),
      )
      .min(1),
    s3: z
      .object({
        endpoint: z.string().url().optional(),
        region: z.string().min(1).default('us-east-1'),
        /**
         * Both or neither: without them the AWS SDK's default chain supplies credentials
         * (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, a shared profile, web identity, instance roles).
         */
        accessKeyId: z.string().min(1).optional(),
        secretAccessKey: z.string().min(1).optional(),
        /** A file holding the secret key, instead of secretAccessKey (lib/config-secrets.ts). */
        secretAccessKeyFile: z.string().min(1).optional(),
        forcePathStyle: z.boolean().default(true),
      })
      .strict(),
    tenant: z
      .object({
        column: z.string().min(1).default('tenant_id'),
        schemas: z.array(z.string().min(1)).min(1).default(['public']),
        tables: z.array(z.string().min(1)).optional(),
        /** Writes without an epoch are refused unless this is true (fail closed). */
        allowUnfencedWrites: z.boolean().default(false),
        /**
         * Split columns (docs/architecture.md, "Splitting a tenant"): tenant table (`schema.table`)
         * → the column whose stable_hash names a row's sub-unit once its tenant is split. A tenant
         * splits only if every tenant table that holds its rows has one (`tenant split` checks).
         */
        splitColumns: z.record(z.string().min(1), z.string().min(1)).optional(),
      })
      .strict()
      .default({}),
    /**
     * Datasets routed by bucket (docs/architecture.md, "Buckets"): a row's unit is
     * `bucket:<name>:<stable_hash(column) mod buckets>`. B is fixed when the dataset is created:
     * `shards prepare` records it on each shard and refuses a config that changes it.
     */
    datasets: z
      .array(
        z
          .object({
            name: datasetName,
            /** The routing key column, hashed as text. */
            column: z.string().min(1),
            buckets: bucketCount,
            /**
             * The dataset's stored bucket column (an ordinary int column that leads the primary key,
             * bound to the key by `check (<bucket> = shardctl.bucket_of(<column>, B))`): a move's row
             * filter, the fence and retire select a bucket by it (docs/architecture.md, "Buckets").
             */
            bucketColumn: z.string().min(1).default('bucket'),
            /** The dataset's tables; default: every table in tenant.schemas with both columns and no tenant column. */
            tables: z.array(z.string().min(1)).optional(),
            /**
             * The dataset's job queue (`schema.table`, one of its tables, shaped by
             * `datasetJobsTableSql`): its bucket units' jobs, claimed per bucket unit
             * (lib/jobs/queue.ts). Absent: the dataset has no jobs.
             */
            jobsTable: z
              .string()
              .regex(/^[a-z_][a-z0-9_]{0,62}\.[a-z_][a-z0-9_]{0,62}$/, 'schema.table, lower-case identifiers')
              .optional(),
          })
          .strict(),
      )
      .default([]),
    limits: z
      .object({
        copyBatchRows: z.number().int().positive().default(5000),
        applyMaxTxBytes: z
          .number()
          .int()
          .positive()
          .default(64 * 1024 * 1024),
        lagThresholdMs: z.number().int().positive().default(1000),
        fenceBudgetMs: z.number().int().positive().default(2000),
        /**
         * A cutover's fence raise waits this long for writers in flight on every try but the last;
         * past it the attempt unfreezes, waits for them outside the pause and freezes again (at most
         * fenceLockRetries times; the last try waits the whole fence budget). A write running long
         * at the freeze then pauses the tenant this long, not its length. 0: one try, whole budget.
         */
        fenceLockWaitMs: z.number().int().nonnegative().default(150),
        fenceLockRetries: z.number().int().min(0).max(10).default(3),
        /**
         * Before each freeze, outside the pause, the cutover waits until no writer of the unit has
         * held its write open this long (lib/shard/unit-writers.ts), at most longWriteMaxWaitMs for
         * all of an attempt's tries together (then it freezes anyway, bounded by fenceLockWaitMs).
         * 0: no wait.
         */
        longWriteMs: z.number().int().nonnegative().default(50),
        longWriteMaxWaitMs: z.number().int().nonnegative().max(30_000).default(15_000),
        /**
         * The source's freeze is a lease of the fence budget plus this (lib/cutover/lease.ts): a
         * worker cut off from the source cannot keep the unit frozen longer (DESIGN.md §5.8).
         */
        freezeLeaseExtraMs: z.number().int().min(1500).default(3000),
        /**
         * Each statement a cutover sends inside its frozen window (source, target, directory) fails
         * after this, and those connections use TCP keepalive: a blackholed link fails the step
         * instead of hanging. Keep it well under the lease (fence budget + freezeLeaseExtraMs).
         */
        frozenWindowQueryTimeoutMs: z.number().int().positive().default(2500),
        soakSeconds: z
          .number()
          .int()
          .nonnegative()
          .default(72 * 3600),
        headroomFraction: z.number().min(0).max(0.9).default(0.1),
        rowsPerSecond: z.number().int().nonnegative().default(0),
        slotRetentionWarnBytes: z
          .number()
          .int()
          .positive()
          .default(512 * 1024 * 1024),
        /**
         * Catch-up gives a replication stream up after this long without a byte from the source
         * (a half-open link), and bounds each control statement on the source; unset: the default of
         * lib/cdc/stream.ts (10 s). Keep it under the activities' heartbeat timeout.
         */
        replicationReceiveTimeoutMs: z.number().int().min(500).optional(),
        /** Each statement of the catch-up's apply session on the target gives up after this; unset: lib/cdc/apply.ts's default (30 s). */
        applyStatementTimeoutMs: z.number().int().min(500).optional(),
        routerRetryBudget: z.number().int().positive().default(5),
        routerDeadlineMs: z.number().int().positive().default(5000),
        routerSnapshotTtlMs: z.number().int().positive().default(2000),
        /**
         * Every worker runs the blob collector (lib/blobs/gc-loop.ts) this often, one pass at a time
         * across the fleet; 0 turns it off (then only `shardctl blobs gc` collects).
         */
        blobGcIntervalMs: z
          .number()
          .int()
          .nonnegative()
          .default(15 * 60_000),
        /** The worker's collector keeps unreferenced objects younger than this (keep it above routerDeadlineMs and any upload's duration). */
        blobGcGraceMs: z.number().int().nonnegative().default(3_600_000),
      })
      .strict()
      .default({}),
    /**
     * The shard's write gate (docs/production.md, "The native fence"). `library`: the native
     * fence's shared library on every shard server (`$libdir/shardctl_fence` once installed there,
     * or an absolute path), built by scripts/build-native-fence.sh; `shards prepare` then installs
     * the C twin of the fence's hot functions and fails, saying why, if a shard cannot load it.
     * Absent: the plpgsql fence.
     */
    fence: z
      .object({
        library: z
          .string()
          .regex(/^(\$libdir\/|\/)[A-Za-z0-9_./-]+$/, 'an absolute path or $libdir/<name>, of letters, digits, _ . / -')
          .optional(),
      })
      .strict()
      .default({}),
    /** Who may approve what (docs/production.md, "Separation of duties"). */
    approvals: z
      .object({
        /** `move approve` by the operator who started the move is refused (the CLI's actor: --actor, $SHARDCTL_ACTOR, $USER). */
        requireDistinctApprover: z.boolean().default(false),
      })
      .strict()
      .default({}),
    /** The worker's metrics endpoint and logs (docs/production.md, "Metrics" and "Logs"). */
    observability: z
      .object({
        /** `[host]:port` the worker serves GET /metrics on (e.g. ":9464"); absent = no endpoint. */
        metricsAddr: z.string().min(1).optional(),
      })
      .strict()
      .default({}),
  })
  .strict();

export type Config = z.infer<typeof configSchema>;
export type ShardConfig = Config['shards'][number];

export { ConfigError };

/** Turns zod issues into "path: expected ..." lines an operator can act on (an unknown key with the nearest known one). */
export function formatIssues(err: z.ZodError, source: string): string {
  const lines = err.issues.flatMap((i) =>
    i.code === 'unrecognized_keys' ? unknownKeyLines(configSchema, i).map((l) => `  ${l}`) : [`  ${i.path.join('.') || '(root)'}: ${i.message}`],
  );
  return `invalid configuration in ${source}:\n${lines.join('\n')}`;
}

/**
 * Validates a raw config (strict: an unknown key is an error), after reading the secret files it
 * names (lib/config-secrets.ts; relative paths from `baseDir`, default the working directory).
 */
export function parseConfig(raw: unknown, source = 'config', opts: { baseDir?: string; env?: NodeJS.ProcessEnv } = {}): Config {
  const res = configSchema.safeParse(resolveSecretFiles(raw, source, { baseDir: opts.baseDir ?? process.cwd(), env: opts.env ?? process.env }));
  if (!res.success) throw new ConfigError(formatIssues(res.error, source));
  const names = new Set<string>();
  for (const s of res.data.shards) {
    if (names.has(s.name)) throw new ConfigError(`invalid configuration in ${source}:\n  shards: duplicate shard name ${s.name}`);
    names.add(s.name);
  }
  if ((res.data.s3.accessKeyId === undefined) !== (res.data.s3.secretAccessKey === undefined))
    throw new ConfigError(
      `invalid configuration in ${source}:\n  s3: give both accessKeyId and secretAccessKey (or secretAccessKeyFile), or neither for the AWS SDK's default credential chain`,
    );
  // Two shards on one bucket: each one's undo or retire would delete the other's objects.
  const shared = sharedBucketProblems(res.data.shards, res.data.s3.endpoint);
  if (shared.length) throw new ConfigError(`invalid configuration in ${source}:\n${shared.map((m) => `  shards: ${m}`).join('\n')}`);
  const datasets = new Set<string>();
  res.data.datasets.forEach((d, i) => {
    const bad = (msg: string) => new ConfigError(`invalid configuration in ${source}:\n  datasets.${i}: ${msg}`);
    if (datasets.has(d.name)) throw bad(`duplicate dataset name ${d.name}`);
    datasets.add(d.name);
    if (d.column === res.data.tenant.column) {
      throw bad(`column ${d.column} is the tenant column: a table routes by tenant or by bucket, not both`);
    }
    if (d.bucketColumn === res.data.tenant.column || d.bucketColumn === d.column) {
      throw bad(`bucketColumn ${d.bucketColumn} must differ from the tenant column and from the key column ${d.column}`);
    }
    if (d.jobsTable !== undefined && d.tables !== undefined && !d.tables.includes(d.jobsTable)) {
      throw bad(`jobsTable ${d.jobsTable} is not one of the dataset's tables (${d.tables.join(', ')}): a bucket move would leave its jobs behind`);
    }
  });
  return res.data;
}

/** Environment overrides: a few well-known variables win over the file. A bad value names its variable. */
export function applyEnvOverrides(raw: any, env: NodeJS.ProcessEnv): any {
  const out = structuredClone(raw ?? {});
  const set = (p: string[], v: string | undefined, conv: (s: string) => unknown = (s) => s) => {
    if (v === undefined || v === '') return;
    let o = out;
    for (const k of p.slice(0, -1)) o = o[k] ??= {};
    o[p[p.length - 1]] = conv(v);
  };
  const variable = (name: string) => (s: string) => {
    if (!/^\d{1,15}$/.test(s.trim()))
      throw new ConfigError(`invalid environment variable ${name}: expected a whole number, got ${JSON.stringify(s.slice(0, 40))}`);
    return Number(s.trim());
  };
  set(['temporal', 'address'], env.SHARDCTL_TEMPORAL_ADDRESS);
  set(['temporal', 'namespace'], env.SHARDCTL_TEMPORAL_NAMESPACE);
  set(['temporal', 'taskQueue'], env.SHARDCTL_TASK_QUEUE);
  set(['directory', 'dsn'], env.SHARDCTL_DIRECTORY_DSN);
  set(['limits', 'soakSeconds'], env.SHARDCTL_SOAK_SECONDS, variable('SHARDCTL_SOAK_SECONDS'));
  set(['limits', 'lagThresholdMs'], env.SHARDCTL_LAG_THRESHOLD_MS, variable('SHARDCTL_LAG_THRESHOLD_MS'));
  set(['observability', 'metricsAddr'], env.SHARDCTL_METRICS_ADDR);
  return out;
}

/** The file `loadConfig` reads: `file`, else $SHARDCTL_CONFIG, else .dev/config.json. */
export function configPath(file?: string, env: NodeJS.ProcessEnv = process.env): string {
  return file ?? env.SHARDCTL_CONFIG ?? defaultConfigPath();
}

export function defaultConfigPath(root = projectRoot()): string {
  return path.join(root, '.dev', 'config.json');
}

export function loadConfig(opts: { file?: string; env?: NodeJS.ProcessEnv } = {}): Config {
  const env = opts.env ?? process.env;
  const file = configPath(opts.file, env);
  let raw: unknown;
  try {
    raw = JSON.parse(fs.readFileSync(file, 'utf8'));
  } catch (e: any) {
    if (e.code === 'ENOENT') {
      throw new ConfigError(`no configuration at ${file}: run \`shardctl dev up\` for a local stack, or set SHARDCTL_CONFIG`);
    }
    throw new ConfigError(`cannot read configuration ${file}: ${e.message}`);
  }
  return parseConfig(applyEnvOverrides(raw, env), file, { baseDir: path.dirname(path.resolve(file)), env });
}

export function projectRoot(): string {
  return path.resolve(__dirname, '..');
}

const unknownShard = (config: Config, name: string) => `unknown shard "${name}" (known: ${config.shards.map((x) => x.name).join(', ')})`;

export function shardByName(config: Config, name: string): ShardConfig {
  const s = config.shards.find((x) => x.name === name);
  if (!s) throw new ConfigError(unknownShard(config, name));
  return s;
}

/** A shard an operator named (an argument, not the config): an unknown one is "not found". */
export function knownShard(config: Config, name: string): ShardConfig {
  const s = config.shards.find((x) => x.name === name);
  if (!s) throw new ShardctlError('NotFound', unknownShard(config, name));
  return s;
}
