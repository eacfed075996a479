// A running worker learns the shards added to its config file (`shards add` writes it) without a
// restart: the file is polled, and shards it now lists that the worker lacks are added to the
// worker's config in place (every lookup, pool and bucket resolves through that object). Only
// additions: a shard whose entry changed, or that vanished, is reported and left as it is, since
// moves in flight hold its pools; restart the worker to apply those. The file stays the allowlist:
// nothing connects to a shard it does not name. Node-only.
import fs from 'node:fs';
import type { Logger } from 'pino';
import { loadConfig, type Config } from './config';

export interface ShardsLearned {
  /** Shards added to the running config. */
  added: string[];
  /** Shards whose entry in the file differs from the running one, or that the file no longer lists: not applied. */
  ignored: string[];
}

const same = (a: Config['shards'][number], b: Config['shards'][number]) => JSON.stringify(a) === JSON.stringify(b);

/**
 * Reads `file` (as the worker did at start: `env` resolves `dsnEnv`) and adds to `config.shards`
 * the shards it lacks. Throws the config's own error when the file does not load (an unset
 * variable of a new shard names itself).
 */
export function learnAddedShards(config: Config, file: string, env: NodeJS.ProcessEnv = process.env): ShardsLearned {
  const fresh = loadConfig({ file, env });
  const added: string[] = [];
  const ignored: string[] = [];
  for (const s of fresh.shards) {
    const have = config.shards.find((x) => x.name === s.name);
    if (!have) {
      config.shards.push(s);
      added.push(s.name);
    } else if (!same(have, s)) ignored.push(s.name);
  }
  for (const s of config.shards) if (!fresh.shards.some((x) => x.name === s.name)) ignored.push(s.name);
  return { added, ignored };
}

/** Polls `file` every `intervalMs` and applies learnAddedShards on each change, logging what it did. */
export function watchConfigShards(config: Config, file: string, log: Logger, opts: { env?: NodeJS.ProcessEnv; intervalMs?: number } = {}): { stop(): void } {
  const reported = new Set<string>();
  const onChange = (cur: fs.Stats, prev: fs.Stats) => {
    if (cur.mtimeMs === prev.mtimeMs && cur.size === prev.size) return;
    try {
      const r = learnAddedShards(config, file, opts.env);
      if (r.added.length) log.info({ shards: r.added, file }, 'config: learned added shard(s)');
      const fresh = r.ignored.filter((n) => !reported.has(n));
      for (const n of fresh) reported.add(n);
      if (fresh.length)
        log.warn({ shards: fresh, file }, 'config: shard entries changed or removed in the file are not applied by a running worker: restart it');
    } catch (e: any) {
      log.warn({ err: e?.message ?? String(e), file }, 'config: the changed file does not load; the worker keeps its shards');
    }
  };
  fs.watchFile(file, { interval: opts.intervalMs ?? 1000, persistent: false }, onChange);
  return { stop: () => fs.unwatchFile(file, onChange) };
}
