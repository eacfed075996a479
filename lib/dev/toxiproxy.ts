// Shopify's toxiproxy, the dev stack's fault-injecting TCP proxy (issue 14): installed on demand
// into .dev/tools/toxiproxy by `go install` of a pinned version through the Go module proxy,
// run as a daemon of the stack (.dev/run/toxiproxy.pid), and driven through its HTTP API.
// Only the network-fault suite and `dev up --with-proxies` need it, so nothing else pays for
// its install (about 1.5 min on a cold Go module cache, a second when cached). Node-only.
import fs from 'node:fs';
import path from 'node:path';
import { run, spawnDaemon, pidAlive, readPid, stopGroup, portOpen, sleep, tail, onPath } from './proc';
import { StackError } from './stack-error';

export const TOXIPROXY_MODULE = 'github.com/Shopify/toxiproxy/v2';
export const TOXIPROXY_VERSION = 'v2.12.0';

/** The parts of a dev stack this file needs (lib/dev/stack.ts `Stack`), without importing it. */
export interface ToxiproxyHome {
  dev: string;
}

const toolDir = (s: ToxiproxyHome) => path.join(s.dev, 'tools', 'toxiproxy');
export const toxiproxyBin = (s: ToxiproxyHome) => path.join(toolDir(s), 'toxiproxy-server');
const pidFile = (s: ToxiproxyHome) => path.join(s.dev, 'run', 'toxiproxy.pid');
const logFile = (s: ToxiproxyHome) => path.join(s.dev, 'logs', 'toxiproxy.log');

/** The pinned toxiproxy-server, installed if missing (or of another version); returns its path. */
export function ensureToxiproxy(s: ToxiproxyHome, log: (m: string) => void): string {
  const bin = toxiproxyBin(s);
  const stamp = path.join(toolDir(s), 'VERSION');
  if (fs.existsSync(bin) && readText(stamp) === TOXIPROXY_VERSION) return bin;
  if (!onPath('go')) {
    throw new StackError(`toxiproxy ${TOXIPROXY_VERSION} is installed with \`go install\`, and no \`go\` is on PATH: install Go 1.23 or newer`);
  }
  // Its own GOBIN per install, renamed into place at the end: two installs racing never leave a
  // half-written binary, and the package's binary name (`server`) becomes a telling one.
  const gobin = path.join(toolDir(s), `gobin-${process.pid}`);
  fs.mkdirSync(gobin, { recursive: true });
  log(`installing toxiproxy-server ${TOXIPROXY_VERSION} into ${path.relative(path.dirname(s.dev), toolDir(s))} (go install)`);
  const t0 = Date.now();
  const r = run('go', ['install', `${TOXIPROXY_MODULE}/cmd/server@${TOXIPROXY_VERSION}`], { env: { ...process.env, GOBIN: gobin } });
  try {
    if (r.code !== 0 || !fs.existsSync(path.join(gobin, 'server'))) {
      throw new StackError(`could not install toxiproxy with go install: ${r.stderr.trim().slice(-500)}`);
    }
    fs.renameSync(path.join(gobin, 'server'), bin);
    fs.writeFileSync(stamp, TOXIPROXY_VERSION);
  } finally {
    fs.rmSync(gobin, { recursive: true, force: true });
  }
  log(`installed toxiproxy-server in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  return bin;
}

function readText(file: string): string | undefined {
  try {
    return fs.readFileSync(file, 'utf8').trim();
  } catch {
    return undefined;
  }
}

/** Starts toxiproxy-server with its API on 127.0.0.1:apiPort (installing it first); idempotent. */
export async function upToxiproxy(s: ToxiproxyHome, apiPort: number, log: (m: string) => void = () => {}): Promise<ToxiproxyApi> {
  const api = new ToxiproxyApi(`http://127.0.0.1:${apiPort}`);
  if (pidAlive(readPid(pidFile(s))) && (await api.healthy())) return api;
  if (await portOpen(apiPort)) throw new StackError(`port ${apiPort} (toxiproxy API) is taken by another process; set SHARDCTL_DEV_TOXIPROXY_PORT`);
  const bin = ensureToxiproxy(s, log);
  for (const d of ['run', 'logs']) fs.mkdirSync(path.join(s.dev, d), { recursive: true });
  log(`starting toxiproxy on ${apiPort}`);
  fs.writeFileSync(pidFile(s), String(spawnDaemon(bin, ['-host', '127.0.0.1', '-port', String(apiPort)], logFile(s), process.env)));
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    if (await api.healthy()) return api;
    if (!pidAlive(readPid(pidFile(s)))) break;
    await sleep(100);
  }
  throw new StackError(`toxiproxy did not answer on ${apiPort}. Last lines of ${logFile(s)}:\n${tail(logFile(s))}`);
}

/** Stops the stack's toxiproxy-server if it runs (every proxy goes with it). */
export async function downToxiproxy(s: ToxiproxyHome, log: (m: string) => void = () => {}): Promise<void> {
  const pid = readPid(pidFile(s));
  if (pidAlive(pid)) {
    await stopGroup(pid!);
    log('stopped toxiproxy');
  }
  fs.rmSync(pidFile(s), { force: true });
}

export interface ProxySpec {
  name: string;
  /** host:port toxiproxy listens on for clients. */
  listen: string;
  /** host:port of the server behind it. */
  upstream: string;
  enabled: boolean;
}

/** A toxic (https://github.com/Shopify/toxiproxy#toxics): `stream` is the direction data flows. */
export interface Toxic {
  name: string;
  type: 'latency' | 'bandwidth' | 'slow_close' | 'timeout' | 'reset_peer' | 'slicer' | 'limit_data';
  /** downstream: server → client; upstream: client → server. */
  stream: 'upstream' | 'downstream';
  /** Probability (0..1) that a connection gets the toxic; 1 by default. */
  toxicity?: number;
  attributes: Record<string, number>;
}

/** The HTTP API of one toxiproxy-server. Every call throws with the server's answer on failure. */
export class ToxiproxyApi {
  constructor(readonly base: string) {}

  async healthy(): Promise<boolean> {
    try {
      const r = await fetch(`${this.base}/version`, { signal: AbortSignal.timeout(1000) });
      return r.ok;
    } catch {
      return false;
    }
  }

  private async call(method: string, p: string, body?: unknown): Promise<unknown> {
    const r = await fetch(`${this.base}${p}`, {
      method,
      headers: body === undefined ? undefined : { 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(10_000),
    });
    const text = await r.text();
    if (!r.ok) throw new Error(`toxiproxy ${method} ${p}: ${r.status} ${text.trim()}`);
    return text ? JSON.parse(text) : undefined;
  }

  createProxy(p: ProxySpec): Promise<unknown> {
    return this.call('POST', '/proxies', p);
  }
  /** Enabled false closes every connection through the proxy and stops listening; true listens again. */
  setEnabled(proxy: string, enabled: boolean): Promise<unknown> {
    return this.call('POST', `/proxies/${encodeURIComponent(proxy)}`, { enabled });
  }
  deleteProxy(proxy: string): Promise<unknown> {
    return this.call('DELETE', `/proxies/${encodeURIComponent(proxy)}`);
  }
  async proxies(): Promise<Record<string, ProxySpec & { toxics: Toxic[] }>> {
    return (await this.call('GET', '/proxies')) as Record<string, ProxySpec & { toxics: Toxic[] }>;
  }
  addToxic(proxy: string, t: Toxic): Promise<unknown> {
    return this.call('POST', `/proxies/${encodeURIComponent(proxy)}/toxics`, { toxicity: 1, ...t });
  }
  removeToxic(proxy: string, toxic: string): Promise<unknown> {
    return this.call('DELETE', `/proxies/${encodeURIComponent(proxy)}/toxics/${encodeURIComponent(toxic)}`);
  }
  /** Every proxy enabled, every toxic removed. */
  reset(): Promise<unknown> {
    return this.call('POST', '/reset');
  }
}
