// A Temporal client from config (address, namespace, TLS / API key for a remote cluster).
import fs from 'node:fs';
import { Client, Connection } from '@temporalio/client';
import type { Config } from './config';

/** TLS and API-key options for a remote cluster (Temporal Cloud, mTLS), shared by client and worker. */
export function temporalConnectionOptions(config: Config) {
  const t = config.temporal;
  const tls = t.tls
    ? {
        serverNameOverride: t.tls.serverName,
        serverRootCACertificate: t.tls.caPath ? fs.readFileSync(t.tls.caPath) : undefined,
        clientCertPair: t.tls.certPath && t.tls.keyPath ? { crt: fs.readFileSync(t.tls.certPath), key: fs.readFileSync(t.tls.keyPath) } : undefined,
      }
    : undefined;
  return { address: t.address, tls, apiKey: t.apiKeyEnv ? process.env[t.apiKeyEnv] : undefined };
}

export async function temporalClient(config: Config): Promise<{ client: Client; close: () => Promise<void> }> {
  const t = config.temporal;
  const connection = await Connection.connect({ ...temporalConnectionOptions(config), connectTimeout: 5000 });
  return { client: new Client({ connection, namespace: t.namespace }), close: () => connection.close() };
}
