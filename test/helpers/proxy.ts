// The network-fault harness (issue 14): toxiproxy between one client (a worker, a router) and
// one server of the dev stack, a link per pair, so cutting worker ↔ source leaves the router's
// own path to the source alone. Faults go through toxiproxy's HTTP API: down/up (connections
// closed, new ones refused), blackhole (the timeout toxic: bytes dropped, connections hang open,
// as in a partition), latency, bandwidth, reset_peer, limit_data.
import fs from 'node:fs';
import path from 'node:path';
import { stackAt, configVia, proxiedServers, ProxiedServer, serverPort, Stack } from '../../lib/dev/stack';
import { downToxiproxy, ToxiproxyApi, Toxic, upToxiproxy } from '../../lib/dev/toxiproxy';
import { projectRoot, Config } from '../../lib/config';
import { pidAlive, portOpen } from '../../lib/dev/proc';

export type { ProxiedServer };

/** One proxied path client → server; every fault on it leaves every other path alone. */
export class Link {
  private readonly toxics = new Set<string>();
  constructor(
    private readonly api: ToxiproxyApi,
    readonly name: string,
    readonly port: number,
  ) {}

  /** Closes every connection and refuses new ones (a host gone, a port closed). */
  down(): Promise<unknown> {
    return this.api.setEnabled(this.name, false);
  }
  up(): Promise<unknown> {
    return this.api.setEnabled(this.name, true);
  }

  /**
   * A partition: connections stay open and new ones are accepted, but no byte gets through in
   * either direction, so a client only notices by its own timeouts. Healing closes the
   * connections that were cut (their dropped bytes cannot be replayed) and lets new ones through.
   */
  async blackhole(): Promise<void> {
    await this.toxic({ name: 'blackhole-up', type: 'timeout', stream: 'upstream', attributes: { timeout: 0 } });
    await this.toxic({ name: 'blackhole-down', type: 'timeout', stream: 'downstream', attributes: { timeout: 0 } });
  }

  /** Every chunk from the server waits `ms` (± jitter) before it goes on. */
  latency(ms: number, jitter = 0, stream: Toxic['stream'] = 'downstream'): Promise<unknown> {
    return this.toxic({ name: `latency-${stream}`, type: 'latency', stream, attributes: { latency: ms, jitter } });
  }

  /** Each new connection, with probability `toxicity`, is reset (RST) after `afterMs`. */
  resetPeer(afterMs: number, toxicity = 1): Promise<unknown> {
    return this.toxic({ name: 'reset-peer', type: 'reset_peer', stream: 'downstream', toxicity, attributes: { timeout: afterMs } });
  }

  bandwidth(kbPerSecond: number, stream: Toxic['stream'] = 'downstream'): Promise<unknown> {
    return this.toxic({ name: `bandwidth-${stream}`, type: 'bandwidth', stream, attributes: { rate: kbPerSecond } });
  }

  /** Closes a connection (with probability `toxicity`, drawn per connection) once `bytes` went through it from the server. */
  limitData(bytes: number, toxicity = 1): Promise<unknown> {
    return this.toxic({ name: 'limit-data', type: 'limit_data', stream: 'downstream', toxicity, attributes: { bytes } });
  }

  /**
   * With probability `toxicity` (drawn per connection), a connection passes nothing either way
   * and is closed after `afterMs` (toxiproxy's `timeout` toxic: a stall a middlebox ends).
   */
  async stallThenClose(afterMs: number, toxicity = 1): Promise<void> {
    if (!(afterMs > 0)) throw new Error('stallThenClose needs afterMs > 0 (0 is blackhole(): never closed)');
    await this.toxic({ name: 'stall-up', type: 'timeout', stream: 'upstream', toxicity, attributes: { timeout: afterMs } });
    await this.toxic({ name: 'stall-down', type: 'timeout', stream: 'downstream', toxicity, attributes: { timeout: afterMs } });
  }

  async toxic(t: Toxic): Promise<void> {
    await this.api.addToxic(this.name, t);
    this.toxics.add(t.name);
  }

  /** Removes every toxic this link added and enables it again. */
  async heal(): Promise<void> {
    for (const t of [...this.toxics]) {
      await this.api.removeToxic(this.name, t);
      this.toxics.delete(t);
    }
    await this.up();
  }
}

/** toxiproxy for one test file: links created on demand, removed (and the server stopped) by close(). */
export class NetLab {
  private readonly links = new Map<string, Link>();
  private nextPort: number;

  private constructor(
    readonly stack: Stack,
    readonly api: ToxiproxyApi,
    private readonly dir: string,
  ) {
    // Above the ports `dev up --with-proxies` uses (toxiproxy + 1 .. + servers).
    this.nextPort = stack.ports.toxiproxy + 1 + proxiedServers(stack).length;
  }

  static async start(dir: string): Promise<NetLab> {
    const stack = stackAt(projectRoot());
    const api = await upToxiproxy(stack, stack.ports.toxiproxy, (m) => process.stderr.write(`toxiproxy: ${m}\n`));
    // Links of a test process that died before its close(): their ports are about to be reused.
    for (const name of Object.keys(await api.proxies())) {
      const owner = /^lab(\d+)-/.exec(name)?.[1];
      if (owner && !pidAlive(Number(owner))) await api.deleteProxy(name);
    }
    fs.mkdirSync(dir, { recursive: true });
    return new NetLab(stack, api, dir);
  }

  /** The link client → server (created on first use). */
  async link(client: string, server: ProxiedServer): Promise<Link> {
    // Named by this process: another test file's lab on the same toxiproxy keeps its own links.
    const name = `lab${process.pid}-${client}-${server}`;
    let l = this.links.get(name);
    if (l) return l;
    const taken = new Set(Object.values(await this.api.proxies()).map((x) => Number(x.listen.split(':').pop())));
    let port = this.nextPort++;
    for (let tries = 0; ; tries++, port = this.nextPort++) {
      if (taken.has(port) || (await portOpen(port))) continue;
      try {
        await this.api.createProxy({ name, listen: `127.0.0.1:${port}`, upstream: `127.0.0.1:${serverPort(this.stack, server)}`, enabled: true });
        break;
      } catch (e) {
        if (tries > 50 || !/in use/i.test(String((e as Error).message))) throw e;
      }
    }
    l = new Link(this.api, name, port);
    this.links.set(name, l);
    return l;
  }

  /**
   * The config `client` runs with: each of `servers` through its link, every other server
   * direct. Written to a file too, for a child process (SHARDCTL_CONFIG).
   */
  async configFor(client: string, servers: ProxiedServer[]): Promise<{ config: Config; file: string; links: Record<string, Link> }> {
    const via: Partial<Record<ProxiedServer, number>> = {};
    const links: Record<string, Link> = {};
    for (const s of servers) {
      links[s] = await this.link(client, s);
      via[s] = links[s].port;
    }
    const config = configVia(this.stack, via);
    const file = path.join(this.dir, `${client}.config.json`);
    fs.writeFileSync(file, JSON.stringify(config, null, 2));
    return { config, file, links };
  }

  /** Heals every link (between cases). */
  async healAll(): Promise<void> {
    for (const l of this.links.values()) await l.heal();
  }

  async close(o: { stopServer?: boolean } = {}): Promise<void> {
    for (const name of this.links.keys()) await this.api.deleteProxy(name).catch(() => {});
    this.links.clear();
    // Only when nothing else has proxies on it (another lab, `dev up --with-proxies`).
    const others = Object.keys(await this.api.proxies().catch(() => ({})));
    if (o.stopServer && others.length === 0) await downToxiproxy(this.stack);
  }
}
