// The client handed to a tenant callback: the pooled connection behind a revocable proxy that
// records the first query error (so a COMMIT that silently became ROLLBACK can be explained)
// and that stops working once the router has released the connection, so a leaked reference
// can never run queries outside its fenced transaction or on another tenant's connection.
import type { PoolClient } from 'pg';

export interface TxClientHandle {
  client: PoolClient;
  /** The first error any promise-style query of this transaction rejected with. */
  firstError(): unknown;
  revoke(): void;
}

export function wrapTxClient(target: PoolClient): TxClientHandle {
  let first: unknown;
  let seen = false;
  const query = (...args: unknown[]) => {
    const r = (target.query as (...a: unknown[]) => unknown)(...args);
    if (r && typeof (r as Promise<unknown>).then === 'function') {
      // A side branch: the caller still gets (and must handle) the original promise.
      (r as Promise<unknown>).then(undefined, (e) => {
        if (!seen) {
          seen = true;
          first = e;
        }
      });
    }
    return r;
  };
  const release = () => {
    throw new Error('shardctl router: the transaction client belongs to the router; do not release it');
  };
  const { proxy, revoke } = Proxy.revocable(target, {
    get(t, prop) {
      if (prop === 'query') return query;
      if (prop === 'release') return release;
      const v = Reflect.get(t, prop, t);
      return typeof v === 'function' ? v.bind(t) : v;
    },
  });
  return { client: proxy, firstError: () => first, revoke };
}
