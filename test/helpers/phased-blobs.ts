// Blob writes through the router's index API (putBlob / deleteBlob) during a move, each tagged
// with the move phase it was acknowledged in. A write counts for a phase only when the status
// query saw that phase both just before it started and just after its ack, so "a PUT during
// copy" means the whole call ran inside copy, not that it overlapped it.
import { createHash } from 'node:crypto';
import type { Router } from '../../lib/router';

export type BlobOp = 'put' | 'overwrite' | 'delete';
export const BLOB_OPS: readonly BlobOp[] = ['put', 'overwrite', 'delete'];

export interface AckedBlobWrite {
  op: BlobOp;
  name: string;
  /** The phase (or window, such as 'freeze') the whole call ran in; undefined when it spanned two. */
  window?: string;
}

export const sha256 = (s: string) => createHash('sha256').update(s).digest('hex');

/**
 * One tenant's blob names and what their last acknowledged write left (content, or undefined
 * after a delete). Writers must not share names: each call updates `expected` at its ack, which
 * is commit order only for a name that one caller writes at a time.
 */
export class BlobLedger {
  readonly expected = new Map<string, string | undefined>();
  readonly acked: AckedBlobWrite[] = [];
  private n = 0;

  constructor(
    private readonly router: Router,
    private readonly tenant: string,
    private readonly grant: { tenants: string[] },
  ) {}

  /** Names under `prefix` whose last acknowledged write put content. */
  live(prefix: string): string[] {
    return [...this.expected].filter(([n, v]) => n.startsWith(prefix) && v !== undefined).map(([n]) => n);
  }

  /** A new name under `prefix` (put), a new version of a live one (overwrite), or a live one removed (delete); through `via` when given. */
  async write(op: BlobOp, prefix: string, name?: string, via: Router = this.router): Promise<AckedBlobWrite> {
    const live = this.live(prefix);
    const target = name ?? (op === 'put' ? `${prefix}${this.n}` : op === 'overwrite' ? live[live.length - 1] : live[0]);
    if (target === undefined) throw new Error(`no live name under ${prefix} to ${op}`);
    const body = `${target} #${this.n++}`;
    const opts = { deadlineMs: 30_000 };
    if (op === 'delete') await via.deleteBlob(this.tenant, this.grant, target, opts);
    else await via.putBlob(this.tenant, this.grant, target, body, opts);
    this.expected.set(target, op === 'delete' ? undefined : body);
    return { op, name: target };
  }

  /** Runs `write` and records it under the phase seen before and after it, when both agree. */
  async writeInPhase(op: BlobOp, prefix: string, phaseOf: () => Promise<string | undefined>): Promise<void> {
    const before = await phaseOf();
    const w = await this.write(op, prefix);
    const after = await phaseOf();
    this.acked.push({ ...w, window: before !== undefined && before === after ? before : undefined });
  }

  /** Per window, the kinds of write acknowledged wholly inside it (sorted, for one readable diff). */
  opsByWindow(windows: readonly string[]): Record<string, BlobOp[]> {
    return Object.fromEntries(windows.map((w) => [w, BLOB_OPS.filter((op) => this.acked.some((a) => a.window === w && a.op === op))]));
  }
}
