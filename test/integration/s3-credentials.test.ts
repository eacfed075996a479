// S3 credentials are optional in the config (issue 12): without them, the AWS SDK's default chain
// supplies them (here its environment variables), so instance roles and web identity work in
// production. Against the stack's real S3 server: the client and a CLI verb that reads and
// writes the bucket (shards prepare's identity marker) work with the chain, and fail without it.
import { describe, it, expect, afterAll } from 'vitest';
import { GetObjectCommand, PutObjectCommand } from '@aws-sdk/client-s3';
import { testConfig, uniq, closePools } from '../helpers/stack';
import { runCli, configFile } from '../helpers/cli';
import { parseConfig, type Config } from '../../lib/config';
import { s3ClientFor } from '../../lib/s3';

const base = testConfig();
/** The stack's config without S3 credentials: parsed as the config file would be. */
const noKeys = (): Config => {
  const raw = structuredClone(base) as any;
  delete raw.s3.accessKeyId;
  delete raw.s3.secretAccessKey;
  return parseConfig(raw, 'test');
};
const chainEnv = { AWS_ACCESS_KEY_ID: base.s3.accessKeyId!, AWS_SECRET_ACCESS_KEY: base.s3.secretAccessKey! };

afterAll(async () => {
  await closePools();
});

describe('S3 credentials from the SDK default chain', () => {
  it(
    'a config without keys uses the environment chain: the client and shards prepare reach the bucket; without the chain they are refused',
    { timeout: 120_000 },
    async () => {
      const config = noKeys();
      expect(config.s3.accessKeyId).toBeUndefined();
      const key = `chain-test/${uniq('k')}`;
      const saved = { id: process.env.AWS_ACCESS_KEY_ID, secret: process.env.AWS_SECRET_ACCESS_KEY };
      Object.assign(process.env, chainEnv);
      const s3 = s3ClientFor(config, 'shard-a');
      try {
        const bucket = config.shards.find((s) => s.name === 'shard-a')!.bucket;
        await s3.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: 'from the chain' }));
        const got = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
        expect(await got.Body!.transformToString()).toBe('from the chain');
      } finally {
        s3.destroy();
        if (saved.id === undefined) delete process.env.AWS_ACCESS_KEY_ID;
        else process.env.AWS_ACCESS_KEY_ID = saved.id;
        if (saved.secret === undefined) delete process.env.AWS_SECRET_ACCESS_KEY;
        else process.env.AWS_SECRET_ACCESS_KEY = saved.secret;
      }

      const file = configFile(config);
      try {
        const ok = await runCli(['shards', 'prepare', '--shard', 'shard-a'], { env: { SHARDCTL_CONFIG: file.file, ...chainEnv } });
        expect(ok.code, ok.stdout + ok.stderr).toBe(0);
        expect(ok.stdout).toContain('bucket identity marker: present');
        // No keys in the config and none in the chain: the bucket step fails, naming the shard.
        const none = await runCli(['shards', 'prepare', '--shard', 'shard-a'], {
          env: {
            SHARDCTL_CONFIG: file.file,
            AWS_ACCESS_KEY_ID: '',
            AWS_SECRET_ACCESS_KEY: '',
            AWS_PROFILE: uniq('no-such-profile'),
            AWS_EC2_METADATA_DISABLED: 'true',
          },
        });
        expect(none.code).not.toBe(0);
        expect(none.stdout).toMatch(/shard-a: FAILED: .*credential/i);
      } finally {
        file.remove();
      }
    },
  );
});
