import { describe, it, expect } from 'vitest';
import { parseConfig, applyEnvOverrides } from '../../lib/config';
import { resolveSecretFiles } from '../../lib/config-secrets';
import { nearestKey } from '../../lib/config-keys';
import { stackConfig, stackAt } from '../../lib/dev/stack';

const good = () => JSON.parse(JSON.stringify(stackConfig(stackAt('/nonexistent', {}))));

describe('configuration', () => {
  it('accepts the dev stack config and fills defaults', () => {
    const raw = good();
    delete raw.limits;
    const c = parseConfig(raw);
    expect(c.limits.soakSeconds).toBe(72 * 3600);
    expect(c.limits.lagThresholdMs).toBe(1000);
    expect(c.limits.fenceBudgetMs).toBe(2000);
  });

  it('names the path of a bad field and what was expected', () => {
    const raw = good();
    raw.shards[1].name = 'Shard B!';
    raw.limits.lagThresholdMs = -5;
    expect(() => parseConfig(raw, 'x.json')).toThrowError(/shards\.1\.name: shard names are lower-case[\s\S]*limits\.lagThresholdMs/);
  });

  it('refuses duplicate shard names', () => {
    const raw = good();
    raw.shards[1].name = raw.shards[0].name;
    expect(() => parseConfig(raw)).toThrowError(/duplicate shard name shard-a/);
  });

  it('lets environment variables override the file', () => {
    const c = parseConfig(applyEnvOverrides(good(), { SHARDCTL_TEMPORAL_ADDRESS: 'temporal.prod:7233', SHARDCTL_SOAK_SECONDS: '30' }));
    expect(c.temporal.address).toBe('temporal.prod:7233');
    expect(c.limits.soakSeconds).toBe(30);
  });

  it('rejects a non-numeric override naming the variable, not the file', () => {
    expect(() => parseConfig(applyEnvOverrides(good(), { SHARDCTL_SOAK_SECONDS: 'soon' }))).toThrowError(
      'invalid environment variable SHARDCTL_SOAK_SECONDS: expected a whole number, got "soon"',
    );
  });

  it('refuses unknown keys at any depth, naming each path and the nearest known key', () => {
    const raw = good();
    raw.limits.soakSecond = 60;
    raw.shards[2].bukcet = 'x';
    raw.tempral = {};
    raw.s3.colour = 'blue';
    let message = '';
    try {
      parseConfig(raw, 'x.json');
    } catch (e: any) {
      message = e.message;
      expect(e.type).toBe('ConfigError');
    }
    expect(message.split('\n')).toEqual(
      expect.arrayContaining([
        'invalid configuration in x.json:',
        '  limits.soakSecond: unknown key (did you mean limits.soakSeconds?)',
        '  shards.2.bukcet: unknown key (did you mean shards.2.bucket?)',
        '  tempral: unknown key (did you mean temporal?)',
        '  s3.colour: unknown key (known keys here: endpoint, region, accessKeyId, secretAccessKey, secretAccessKeyFile, forcePathStyle)',
      ]),
    );
  });

  it('accepts every key it writes: a parsed config parses again to itself', () => {
    const c = parseConfig(good());
    expect(parseConfig(JSON.parse(JSON.stringify(c)))).toEqual(c);
  });

  it('accepts bucketed datasets and defaults to none', () => {
    expect(parseConfig(good()).datasets).toEqual([]);
    const raw = good();
    raw.datasets = [{ name: 'events', column: 'device_id', buckets: 1024 }];
    expect(parseConfig(raw).datasets).toEqual([{ name: 'events', column: 'device_id', buckets: 1024, bucketColumn: 'bucket' }]);
  });

  it('names a bad bucket count or dataset name with its path and the rule', () => {
    const raw = good();
    raw.datasets = [
      { name: 'events', column: 'device_id', buckets: 0 },
      { name: 'orders', column: 'order_id', buckets: 1.5 },
      { name: 'Big-Set', column: 'k', buckets: 70000 },
      { name: 'nob', column: 'k' },
    ];
    expect(() => parseConfig(raw, 'x.json')).toThrowError(
      /datasets\.0\.buckets: the bucket count B is at least 1[\s\S]*datasets\.1\.buckets: the bucket count B is an integer[\s\S]*datasets\.2\.name: dataset names[\s\S]*datasets\.2\.buckets: the bucket count B is at most 65536[\s\S]*datasets\.3\.buckets: Required/,
    );
  });

  it('refuses a duplicate dataset, and a dataset routed by the tenant column', () => {
    const raw = good();
    raw.datasets = [
      { name: 'events', column: 'device_id', buckets: 64 },
      { name: 'events', column: 'device_id', buckets: 64 },
    ];
    expect(() => parseConfig(raw)).toThrowError(/datasets\.1: duplicate dataset name events/);
    raw.datasets = [{ name: 'events', column: 'tenant_id', buckets: 64 }];
    expect(() => parseConfig(raw)).toThrowError(/datasets\.0: column tenant_id is the tenant column/);
  });

  it("accepts a dataset's jobs table among its tables, and refuses one its tables leave out or that is not schema.table", () => {
    const raw = good();
    raw.datasets = [{ name: 'events', column: 'device_id', buckets: 64, tables: ['app.events', 'app.jobs'], jobsTable: 'app.jobs' }];
    expect(parseConfig(raw).datasets[0].jobsTable).toBe('app.jobs');
    raw.datasets = [{ name: 'events', column: 'device_id', buckets: 64, tables: ['app.events'], jobsTable: 'app.jobs' }];
    expect(() => parseConfig(raw)).toThrowError(/datasets\.0: jobsTable app\.jobs is not one of the dataset's tables \(app\.events\)/);
    raw.datasets = [{ name: 'events', column: 'device_id', buckets: 64, jobsTable: 'jobs' }];
    expect(() => parseConfig(raw)).toThrowError(/datasets\.0\.jobsTable: schema\.table/);
  });
});

describe('secrets from files', () => {
  const files: Record<string, string> = { '/s/dir-pw': 'p@ss/w:rd%41\n', '/s/shard-pw': 'shard-secret', '/s/s3': 'S3-SECRET\n', '/s/empty': '\n' };
  const readFile = (f: string) => {
    if (!(f in files)) throw Object.assign(new Error(`ENOENT: ${f}`), { code: 'ENOENT' });
    return files[f];
  };
  const withFiles = () => {
    const raw = good();
    raw.directory = { dsn: 'postgres://shardctl@db:5432/shardctl', passwordFile: 'dir-pw' };
    raw.shards[0] = { ...raw.shards[0], dsn: 'postgres://app@a:5432/app?sslmode=require', passwordFile: '/s/shard-pw' };
    delete raw.s3.secretAccessKey;
    raw.s3.secretAccessKeyFile = 's3';
    return raw;
  };

  it('puts each file in as the DSN password (percent-encoded) and the S3 secret, relative to the config file', () => {
    const c = parseConfig(resolveSecretFiles(withFiles(), 'x.json', { baseDir: '/s', readFile }), 'x.json');
    const dir = new URL(c.directory.dsn);
    expect(decodeURIComponent(dir.password)).toBe('p@ss/w:rd%41');
    expect(dir.host).toBe('db:5432');
    expect(new URL(c.shards[0].dsn).password).toBe('shard-secret');
    expect(new URL(c.shards[0].dsn).search).toBe('?sslmode=require');
    expect(c.s3.secretAccessKey).toBe('S3-SECRET');
    expect(c.directory).not.toHaveProperty('passwordFile');
  });

  it('names the field and the file, never the secret, when it cannot use one', () => {
    const cases: [(r: any) => void, RegExp][] = [
      [(r) => (r.directory.passwordFile = 'missing'), /directory\.passwordFile: cannot read \/s\/missing \(ENOENT\)/],
      [(r) => (r.directory.passwordFile = 'empty'), /directory\.passwordFile: \/s\/empty is empty/],
      [(r) => (r.shards[0].dsn = 'postgres://app:inline@a/app'), /shards\.0\.passwordFile: shards\.0\.dsn already has a password/],
      [(r) => (r.shards[0].dsn = 'host=a user=app'), /shards\.0\.passwordFile: needs shards\.0\.dsn as a URL/],
      [(r) => (r.s3.secretAccessKey = 'both'), /s3\.secretAccessKeyFile: s3\.secretAccessKey is set too/],
    ];
    for (const [edit, why] of cases) {
      const raw = withFiles();
      edit(raw);
      let message = '';
      try {
        resolveSecretFiles(raw, 'x.json', { baseDir: '/s', readFile });
      } catch (e: any) {
        message = e.message;
      }
      expect(message).toMatch(why);
      for (const secret of ['p@ss', 'shard-secret', 'S3-SECRET', 'inline']) expect(message).not.toContain(secret);
    }
  });

  it('suggests a key only when it is near', () => {
    expect(nearestKey('soakSecond', ['soakSeconds', 'lagThresholdMs'])).toBe('soakSeconds');
    expect(nearestKey('PasswordFile', ['dsn', 'passwordFile'])).toBe('passwordFile');
    expect(nearestKey('colour', ['endpoint', 'region'])).toBeUndefined();
  });

  it("takes a shard's DSN from the environment variable it names, and names a missing one", () => {
    const raw = good();
    const dsn = raw.shards[1].dsn;
    delete raw.shards[1].dsn;
    raw.shards[1].dsnEnv = 'SHARD_B_DSN';
    expect(parseConfig(structuredClone(raw), 'x.json', { env: { SHARD_B_DSN: dsn } }).shards[1].dsn).toBe(dsn);
    expect(() => parseConfig(structuredClone(raw), 'x.json', { env: {} })).toThrowError(
      /x\.json:\n {2}shards\.1\.dsnEnv: environment variable SHARD_B_DSN is not set/,
    );
    expect(() =>
      parseConfig({ ...structuredClone(raw), shards: [raw.shards[0], { ...raw.shards[1], dsn }] }, 'x.json', { env: { SHARD_B_DSN: dsn } }),
    ).toThrowError(/shards\.1\.dsnEnv: shards\.1\.dsn is set too/);
  });

  it('S3 keys are both given or both left to the SDK default chain', () => {
    const raw = good();
    delete raw.s3.accessKeyId;
    delete raw.s3.secretAccessKey;
    expect(parseConfig(structuredClone(raw)).s3.accessKeyId).toBeUndefined();
    expect(() => parseConfig({ ...raw, s3: { ...raw.s3, accessKeyId: 'AKIA' } }, 'x.json')).toThrowError(
      /s3: give both accessKeyId and secretAccessKey \(or secretAccessKeyFile\), or neither/,
    );
  });
});
