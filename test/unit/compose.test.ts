import { describe, it, expect } from 'vitest';
import fs from 'node:fs';
import path from 'node:path';
import { parse } from 'yaml';
import * as T from '../../lib/dev/topology';

const compose = parse(fs.readFileSync(path.join(__dirname, '..', '..', 'temporal-dev.yml'), 'utf8'), { merge: true });

function hostPort(svc: any): number[] {
  return (svc.ports as string[]).map((p) => Number(String(p).split(':')[0]));
}

describe('temporal-dev.yml agrees with `shardctl dev up`', () => {
  it('has one postgres service per dev server on the same host ports', () => {
    for (const name of T.PG_SERVERS) {
      expect(compose.services[name], name).toBeDefined();
      expect(hostPort(compose.services[name])).toEqual([T.DEFAULT_PORTS.pg[name]]);
    }
  });

  it('runs every postgres with the replication settings dev up uses', () => {
    for (const name of T.PG_SERVERS) {
      const args: string[] = compose.services[name].command;
      for (const key of ['wal_level', 'max_replication_slots', 'max_wal_senders', 'max_slot_wal_keep_size', 'max_connections']) {
        expect(args, `${name} ${key}`).toContain(`${key}=${T.PG_SETTINGS[key]}`);
      }
      expect(compose.services[name].environment.POSTGRES_USER).toBe(T.PG_USER);
      expect(compose.services[name].environment.POSTGRES_DB).toBe(T.PG_DATABASE);
    }
  });

  it('exposes temporal and its UI on the dev ports with every search attribute', () => {
    const t = compose.services.temporal;
    expect(hostPort(t)).toEqual([T.DEFAULT_PORTS.temporal, T.DEFAULT_PORTS.temporalUi]);
    const args: string[] = t.command;
    expect(args.slice(0, 2)).toEqual(['server', 'start-dev']);
    expect(args[args.indexOf('--namespace') + 1]).toBe(T.TEMPORAL_NAMESPACE);
    const attrs = args.filter((_, i) => args[i - 1] === '--search-attribute');
    expect(attrs.sort()).toEqual(
      Object.entries(T.SEARCH_ATTRIBUTES)
        .map(([k, v]) => `${k}=${v}`)
        .sort(),
    );
  });

  it('exposes an S3 server on the dev port', () => {
    expect(hostPort(compose.services.s3)).toEqual([T.DEFAULT_PORTS.s3]);
  });
});
