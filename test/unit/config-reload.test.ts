// A running worker learns shards added to its config file (lib/config-reload.ts): additions are
// applied to the running config in place; a changed or removed entry is reported, never applied;
// a file that does not load (a new shard's variable unset) changes nothing and says why.
import { describe, it, expect, afterEach } from 'vitest';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { loadConfig } from '../../lib/config';
import { learnAddedShards, watchConfigShards } from '../../lib/config-reload';
import { stackConfig, stackAt } from '../../lib/dev/stack';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
});

function configFile(): { file: string; raw: any; write: (raw: any) => void } {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'reload-'));
  dirs.push(dir);
  const file = path.join(dir, 'config.json');
  const raw = JSON.parse(JSON.stringify(stackConfig(stackAt('/nonexistent', {}))));
  const write = (r: any) => fs.writeFileSync(file, JSON.stringify(r));
  write(raw);
  return { file, raw, write };
}

const shardD = { name: 'shard-d', dsnEnv: 'RELOAD_TEST_DSN', bucket: 'shardctl-shard-d' };
const env: NodeJS.ProcessEnv = { ...process.env, RELOAD_TEST_DSN: 'postgres://u:p@127.0.0.1:5999/db' };

describe('learning added shards from the config file', () => {
  it('adds a new shard to the running config in place, resolving its DSN variable', () => {
    const { file, raw, write } = configFile();
    const config = loadConfig({ file, env });
    const shards = config.shards;
    write({ ...raw, shards: [...raw.shards, shardD] });
    expect(learnAddedShards(config, file, env)).toEqual({ added: ['shard-d'], ignored: [] });
    expect(config.shards).toBe(shards);
    expect(config.shards.find((s) => s.name === 'shard-d')).toMatchObject({ name: 'shard-d', dsn: env.RELOAD_TEST_DSN, bucket: 'shardctl-shard-d' });
    expect(learnAddedShards(config, file, env)).toEqual({ added: [], ignored: [] });
  });

  it('reports a changed or removed shard entry and leaves the running one as it is', () => {
    const { file, raw, write } = configFile();
    const config = loadConfig({ file, env });
    const before = JSON.stringify(config.shards);
    const changed = raw.shards.slice(1).map((s: any, i: number) => (i === 0 ? { ...s, bucket: 'elsewhere' } : s));
    write({ ...raw, shards: changed });
    expect(learnAddedShards(config, file, env)).toEqual({ added: [], ignored: ['shard-b', 'shard-a'] });
    expect(JSON.stringify(config.shards)).toBe(before);
  });

  it('changes nothing when the file does not load, and names the unset variable', () => {
    const { file, raw, write } = configFile();
    const config = loadConfig({ file, env });
    write({ ...raw, shards: [...raw.shards, shardD] });
    const noVar: NodeJS.ProcessEnv = { ...env, RELOAD_TEST_DSN: undefined };
    expect(() => learnAddedShards(config, file, noVar)).toThrowError(/environment variable RELOAD_TEST_DSN is not set/);
    expect(config.shards.map((s) => s.name)).toEqual(['shard-a', 'shard-b', 'shard-c']);
  });

  it('the watcher applies an addition written to the file while it runs', async () => {
    const { file, raw, write } = configFile();
    const config = loadConfig({ file, env });
    const w = watchConfigShards(config, file, pino({ level: 'silent' }), { env, intervalMs: 50 });
    try {
      await new Promise((r) => setTimeout(r, 120));
      write({ ...raw, shards: [...raw.shards, shardD] });
      const deadline = Date.now() + 5000;
      while (!config.shards.some((s) => s.name === 'shard-d') && Date.now() < deadline) await new Promise((r) => setTimeout(r, 25));
      expect(config.shards.map((s) => s.name)).toEqual(['shard-a', 'shard-b', 'shard-c', 'shard-d']);
    } finally {
      w.stop();
    }
  });
});
