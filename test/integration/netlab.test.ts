// The network-fault harness itself (test/helpers/proxy.ts): each fault it claims to inject is
// seen by a real Postgres client on the link, and only on that link.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import path from 'node:path';
import { Client } from 'pg';
import { NetLab } from '../helpers/proxy';

let lab: NetLab;
beforeAll(async () => {
  lab = await NetLab.start(path.join(__dirname, '..', '..', 'test-results', 'network', 'netlab'));
}, 600_000);
afterAll(async () => lab?.close({ stopServer: true }));

async function client(dsn: string): Promise<Client> {
  const c = new Client({ connectionString: dsn, connectionTimeoutMillis: 1500, query_timeout: 1500 });
  c.on('error', () => {});
  await c.connect();
  return c;
}
const ask = (c: Client) => c.query('select 1 as one').then((r) => r.rows[0].one as number);
const outcome = (p: Promise<unknown>) =>
  p.then(
    () => 'ok',
    (e: Error & { code?: string }) => e.code ?? e.message,
  );

describe('network-fault harness (toxiproxy)', () => {
  it('down closes the connections of its link and refuses new ones; the other link and up are unaffected', async () => {
    const { config } = await lab.configFor('probe-a', ['directory']);
    const { config: other } = await lab.configFor('probe-b', ['directory']);
    const a = await client(config.directory.dsn);
    const b = await client(other.directory.dsn);
    expect([await ask(a), await ask(b)]).toEqual([1, 1]);
    const l = await lab.link('probe-a', 'directory');
    await l.down();
    expect(await outcome(ask(a))).not.toBe('ok');
    expect(await outcome(client(config.directory.dsn))).toBe('ECONNREFUSED');
    expect(await ask(b)).toBe(1);
    await l.heal();
    const again = await client(config.directory.dsn);
    expect(await ask(again)).toBe(1);
    await Promise.all([a, b, again].map((c) => c.end().catch(() => {})));
  });

  it('blackhole keeps the connection open but answers nothing (a timeout, not a refusal); heal lets new connections through', async () => {
    const { config, links } = await lab.configFor('probe-c', ['shard-a']);
    const c = await client(config.shards.find((s) => s.name === 'shard-a')!.dsn);
    expect(await ask(c)).toBe(1);
    await links['shard-a'].blackhole();
    expect(await outcome(ask(c))).toMatch(/timeout/i);
    expect(await outcome(client(config.shards.find((s) => s.name === 'shard-a')!.dsn))).toMatch(/timeout/i);
    await links['shard-a'].heal();
    const again = await client(config.shards.find((s) => s.name === 'shard-a')!.dsn);
    expect(await ask(again)).toBe(1);
    await Promise.all([c, again].map((x) => x.end().catch(() => {})));
  });

  it('latency delays every answer by at least its amount', async () => {
    const { config, links } = await lab.configFor('probe-d', ['shard-b']);
    const c = await client(config.shards.find((s) => s.name === 'shard-b')!.dsn);
    await links['shard-b'].latency(400);
    const t0 = Date.now();
    expect(await ask(c)).toBe(1);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(400);
    await links['shard-b'].heal();
    await c.end();
  });

  it('reset_peer resets new connections', async () => {
    const { config, links } = await lab.configFor('probe-e', ['shard-c']);
    await links['shard-c'].resetPeer(0);
    expect(await outcome(client(config.shards.find((s) => s.name === 'shard-c')!.dsn).then(ask))).not.toBe('ok');
    await links['shard-c'].heal();
    const c = await client(config.shards.find((s) => s.name === 'shard-c')!.dsn);
    expect(await ask(c)).toBe(1);
    await c.end();
  });
});
