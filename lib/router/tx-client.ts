// The client handed to a tenant callback: the pooled connection behind a revocable proxy that
// records the first query error (so a COMMIT that silently became ROLLBACK can be explained)
// and that stops working once the router has released the connection, so a leaked reference
// can never run queries outside its fenced transaction or on another tenant's connection.
//
// Built once per transaction, so it is cheap to build: the proxy's handler is the handle itself
// (its `get` a prototype method), and the wrapped `query` and the error recorder are one bound
// function each, not closures made per call (BENCHMARKS.md, "Where the router's time goes").
import type { PoolClient } from 'pg';

export interface TxClientHandle {
  client: PoolClient;
  /** The first error any promise-style query of this transaction rejected with. */
  firstError(): unknown;
  revoke(): void;
}

function refuseRelease(): never {
  throw new Error('shardctl router: the transaction client belongs to the router; do not release it');
}

class TxClient implements TxClientHandle, ProxyHandler<PoolClient> {
  readonly client: PoolClient;
  readonly revoke: () => void;
  private first: unknown;
  private seen = false;
  private readonly target: PoolClient;
  private readonly query: (...args: unknown[]) => unknown;
  private readonly record: (e: unknown) => void;

  constructor(target: PoolClient) {
    this.target = target;
    this.query = this.runQuery.bind(this);
    this.record = this.recordError.bind(this);
    const { proxy, revoke } = Proxy.revocable(target, this);
    this.client = proxy;
    this.revoke = revoke;
  }

  firstError(): unknown {
    return this.first;
  }

  get(t: PoolClient, prop: string | symbol): unknown {
    if (prop === 'query') return this.query;
    if (prop === 'release') return refuseRelease;
    const v = Reflect.get(t, prop, t);
    return typeof v === 'function' ? v.bind(t) : v;
  }

  private runQuery(...args: unknown[]): unknown {
    const r = (this.target.query as (...a: unknown[]) => unknown)(...args);
    // A side branch: the caller still gets (and must handle) the original promise.
    if (r && typeof (r as Promise<unknown>).then === 'function') (r as Promise<unknown>).then(undefined, this.record);
    return r;
  }

  private recordError(e: unknown): void {
    if (!this.seen) {
      this.seen = true;
      this.first = e;
    }
  }
}

export function wrapTxClient(target: PoolClient): TxClientHandle {
  return new TxClient(target);
}
