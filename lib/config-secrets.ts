// Secrets from files named in the config, resolved once when it is loaded: `passwordFile` beside
// a DSN (the directory's, each shard's) puts the file's content in as the DSN's password, and
// `s3.secretAccessKeyFile` supplies the S3 secret; a shard's `dsnEnv` names the environment
// variable holding its whole DSN (`shards add --dsn-env`). Paths are relative to the config file. An
// error names the field and the file, never the content; logs scrub the resolved values
// (lib/obs/log.ts) as they do any DSN password. Node-only.
import fs from 'node:fs';
import path from 'node:path';
import { ConfigError } from './config-error';

export interface SecretFileOptions {
  /** Relative paths are read from here (the config file's directory). */
  baseDir: string;
  /** Where a shard's `dsnEnv` is looked up (default: none, so a `dsnEnv` is an error naming its variable). */
  env?: NodeJS.ProcessEnv;
  readFile?: (file: string) => string;
}

/** A copy of the raw config with each named secret file read into its field. */
export function resolveSecretFiles(raw: unknown, source: string, opts: SecretFileOptions): unknown {
  if (!raw || typeof raw !== 'object') return raw;
  const out: any = structuredClone(raw);
  const read = (field: string, file: unknown): string => {
    if (typeof file !== 'string' || !file) throw bad(source, field, 'expected the path of a file');
    const full = path.resolve(opts.baseDir, file);
    let text: string;
    try {
      text = (opts.readFile ?? ((f) => fs.readFileSync(f, 'utf8')))(full);
    } catch (e: any) {
      throw bad(source, field, `cannot read ${full} (${e?.code ?? 'error'})`);
    }
    const secret = text.replace(/\r?\n$/, '');
    if (!secret) throw bad(source, field, `${full} is empty`);
    return secret;
  };
  const withPassword = (holder: any, at: string) => {
    if (!holder || typeof holder !== 'object' || holder.passwordFile === undefined) return;
    const field = `${at}.passwordFile`;
    const password = read(field, holder.passwordFile);
    let url: URL;
    try {
      url = new URL(String(holder.dsn ?? ''));
    } catch {
      throw bad(source, field, `needs ${at}.dsn as a URL (postgres://user@host:port/db)`);
    }
    if (url.password) throw bad(source, field, `${at}.dsn already has a password: give one or the other`);
    if (!url.username) throw bad(source, field, `${at}.dsn names no user`);
    // Percent-encoded here, decoded by node-postgres: any character may be in the password.
    url.password = encodeURIComponent(password);
    holder.dsn = url.toString();
    // Resolved: a config written back out (a child's file) parses again the same.
    delete holder.passwordFile;
  };
  // A shard's DSN from an environment variable (`shards add --dsn-env`): the file names the
  // variable, never its value. Resolved before passwordFile so the two compose.
  const withEnvDsn = (holder: any, at: string) => {
    if (!holder || typeof holder !== 'object' || holder.dsnEnv === undefined) return;
    const field = `${at}.dsnEnv`;
    const name = holder.dsnEnv;
    if (typeof name !== 'string' || !/^[A-Za-z_][A-Za-z0-9_]*$/.test(name)) throw bad(source, field, 'expected the name of an environment variable');
    if (holder.dsn !== undefined) throw bad(source, field, `${at}.dsn is set too: give one or the other`);
    const value = opts.env?.[name];
    if (!value) throw bad(source, field, `environment variable ${name} is not set (it holds this shard's DSN)`);
    holder.dsn = value;
    delete holder.dsnEnv;
  };
  withPassword(out.directory, 'directory');
  if (Array.isArray(out.shards))
    out.shards.forEach((s: unknown, i: number) => {
      withEnvDsn(s, `shards.${i}`);
      withPassword(s, `shards.${i}`);
    });
  const s3 = out.s3;
  if (s3 && typeof s3 === 'object' && s3.secretAccessKeyFile !== undefined) {
    if (s3.secretAccessKey !== undefined) throw bad(source, 's3.secretAccessKeyFile', 's3.secretAccessKey is set too: give one or the other');
    s3.secretAccessKey = read('s3.secretAccessKeyFile', s3.secretAccessKeyFile);
    delete s3.secretAccessKeyFile;
  }
  return out;
}

const bad = (source: string, field: string, why: string) => new ConfigError(`invalid configuration in ${source}:\n  ${field}: ${why}`);
