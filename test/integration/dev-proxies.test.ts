// `dev up --with-proxies` for real (issue 14): a second stack, in a checkout of its own (a temp
// dir sharing this checkout's downloaded tools, toxiproxy among them), on free ports from 50 above
// the test stack's. `up` with proxies (what the flag runs) starts toxiproxy with one proxy per
// server and writes .dev/config.proxied.json; a CLI verb with that config reaches every server
// through its proxy, and disabling one proxy through toxiproxy's API cuts that server off from it
// alone; `down` stops toxiproxy. Stopped and wiped at the end.
import { describe, it, expect } from 'vitest';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import * as stack from '../../lib/dev/stack';
import { freeRun, stackPorts } from '../helpers/ports';
import { ToxiproxyApi } from '../../lib/dev/toxiproxy';
import { projectRoot, loadConfig } from '../../lib/config';
import { pidAlive, portOpen, readPid } from '../../lib/dev/proc';

/** This checkout's CLI with the config `configFile`. */
function cli(configFile: string, args: string[]): Promise<{ code: number; out: string; err: string }> {
  return new Promise((resolve) =>
    execFile(
      process.execPath,
      [path.join(projectRoot(), 'cli', 'shardctl.js'), ...args],
      { env: { ...process.env, SHARDCTL_CONFIG: configFile }, timeout: 120_000 },
      (e, stdout, stderr) => resolve({ code: e ? Number((e as { code?: number }).code ?? 1) : 0, out: stdout, err: stderr }),
    ),
  );
}

/** `shardctl shards list --json`: each shard's reachability and the directory's error, if any. */
async function shardsList(configFile: string): Promise<{ rows: { name: string; reachable: boolean; error?: string; directoryError?: string }[]; err: string }> {
  const r = await cli(configFile, ['shards', 'list', '--json', '--rate-window', '0']);
  let rows = [];
  try {
    rows = JSON.parse(r.out);
  } catch {
    rows = [];
  }
  return { rows, err: `exit ${r.code}: ${r.err}` };
}

describe('dev up --with-proxies', () => {
  it(
    'starts toxiproxy with a proxy per server and writes config.proxied.json; a CLI verb through it works and one proxy disabled cuts its server off; dev down stops toxiproxy',
    { timeout: 300_000 },
    async () => {
      const mine = stack.stackAt(projectRoot()).ports;
      // toxiproxy's API and, above it, the network suite's and `dev up --with-proxies`' proxies
      const taken = stackPorts(mine, 40);
      const env = {
        SHARDCTL_DEV_PG_PORT: String(await freeRun(mine.pg.directory + 50, 4, taken)),
        SHARDCTL_DEV_TEMPORAL_PORT: String(await freeRun(mine.temporal + 50, 3, taken)),
        SHARDCTL_DEV_UI_PORT: String(await freeRun(mine.temporalUi + 50, 1, taken)),
        SHARDCTL_DEV_S3_PORT: String(await freeRun(mine.s3 + 50, 1, taken)),
        // The API and one listen port per server (directory, three shards, Temporal) above it:
        // above Linux's ephemeral range (32768-60999), where a connection's own port cannot take a
        // proxy's between the check and the bind (seen once: 500, address already in use).
        SHARDCTL_DEV_TOXIPROXY_PORT: String(await freeRun(61_000 + (mine.toxiproxy % 1000) * 4, 6, taken)),
      };
      const root = fs.mkdtempSync(path.join(os.tmpdir(), 'shardctl-proxies-'));
      fs.mkdirSync(path.join(root, '.dev'));
      fs.symlinkSync(path.join(projectRoot(), '.dev', 'tools'), path.join(root, '.dev', 'tools'));
      const s = stack.stackAt(root, env);
      const log = (m: string) => process.stderr.write(`proxies: ${m}\n`);
      try {
        await stack.up(s, log, { withProxies: true });
        const api = new ToxiproxyApi(`http://127.0.0.1:${s.ports.toxiproxy}`);
        expect(await api.healthy(), 'toxiproxy answers on the stack port').toBe(true);

        // One proxy per server, listening on the API port + 1, + 2, ..., each in front of its server.
        const proxies = await api.proxies();
        expect(
          Object.values(proxies)
            .map((p) => [p.name, p.listen, p.upstream, p.enabled])
            .sort(),
        ).toEqual(
          stack
            .proxiedServers(s)
            .map((server) => [`dev-${server}`, `127.0.0.1:${stack.devProxyPort(s, server)}`, `127.0.0.1:${stack.serverPort(s, server)}`, true])
            .sort(),
        );

        // The proxied config names the proxies' ports, nothing of the servers' own.
        const file = path.join(root, '.dev', 'config.proxied.json');
        const proxied = loadConfig({ file, env: {} });
        expect(Number(new URL(proxied.directory.dsn).port)).toBe(stack.devProxyPort(s, 'directory'));
        expect(proxied.shards.map((x) => [x.name, Number(new URL(x.dsn).port)])).toEqual(s.shards.map((n) => [n, stack.devProxyPort(s, n)]));
        expect(proxied.temporal.address).toBe(`127.0.0.1:${stack.devProxyPort(s, 'temporal')}`);

        // CLI verbs through the proxies: the directory's schema is migrated through its proxy, and
        // the shards are listed from every shard and the directory.
        const migrated = await cli(file, ['directory', 'migrate']);
        expect(migrated.code, migrated.err).toBe(0);
        const through = await shardsList(file);
        expect(
          through.rows.map((r) => [r.name, r.reachable, r.directoryError ?? null]),
          through.err,
        ).toEqual(s.shards.map((n) => [n, true, null]));

        // Disabled through the API, one proxy cuts its shard off from that verb, and only it.
        await api.setEnabled('dev-shard-b', false);
        const cut = await shardsList(file);
        expect(
          cut.rows.map((r) => [r.name, r.reachable]),
          cut.err,
        ).toEqual(s.shards.map((n) => [n, n !== 'shard-b']));
        expect(cut.rows.find((r) => r.name === 'shard-b')?.error, 'why shard-b is unreachable').toBeTruthy();
        // The server itself was never touched: the plain config still reaches it.
        const direct = await shardsList(path.join(root, '.dev', 'config.json'));
        expect(direct.rows.map((r) => [r.name, r.reachable])).toEqual(s.shards.map((n) => [n, true]));
        await api.setEnabled('dev-shard-b', true);
        const healed = await shardsList(file);
        expect(healed.rows.map((r) => [r.name, r.reachable])).toEqual(s.shards.map((n) => [n, true]));

        // Temporal, through its proxy too: the move list answers, and not with the proxy disabled.
        const moves = await cli(file, ['move', 'list', '--json']);
        expect([moves.code, JSON.parse(moves.out || '{}').moves], moves.err).toEqual([0, []]);
        await api.setEnabled('dev-temporal', false);
        const t0 = Date.now();
        const noTemporal = await cli(file, ['move', 'list', '--json']);
        expect(noTemporal.code, `move list with Temporal's proxy disabled (${Date.now() - t0} ms): ${noTemporal.err.slice(0, 300)}`).not.toBe(0);
        await api.setEnabled('dev-temporal', true);

        // `up` again leaves the running proxies as they are (idempotent).
        await stack.up(s, log, { withProxies: true });
        expect(Object.keys(await api.proxies()).sort()).toEqual(Object.keys(proxies).sort());

        const pid = readPid(path.join(s.dev, 'run', 'toxiproxy.pid'));
        expect(pidAlive(pid), 'toxiproxy runs as a daemon of the stack').toBe(true);
        await stack.down(s, log);
        expect(pidAlive(pid), 'toxiproxy after dev down').toBe(false);
        expect(await api.healthy()).toBe(false);
        expect(await portOpen(stack.devProxyPort(s, 'directory')), "the directory's proxy port after dev down").toBe(false);
      } finally {
        await stack.reset(stack.stackAt(root, env), log);
        fs.rmSync(root, { recursive: true, force: true });
      }
    },
  );
});
