// A blob sync stuck mid-request, inside a real worker: S3 clients whose reads and server-side
// copies of one tenant's objects, made by the copyBlobs activity (never by the cutover, the undo
// or retire), are held until the test releases them. Each held request also notes when its
// activity saw Temporal's cancellation, so a test can release it only after that.
import { Context } from '@temporalio/activity';
import type { S3Client } from '@aws-sdk/client-s3';
import { s3ClientFor } from '../../lib/s3';
import { tenantBlobPrefix } from '../../lib/blobs';
import { testConfig } from './stack';

const HELD_COMMANDS = new Set(['GetObjectCommand', 'CopyObjectCommand', 'UploadPartCopyCommand']);

/** The running activity's type and cancellation signal; undefined outside an activity. */
function currentActivity(): { type: string; signal: AbortSignal } | undefined {
  try {
    const c = Context.current();
    return { type: c.info.activityType, signal: c.cancellationSignal };
  } catch {
    return undefined;
  }
}

export interface HeldSync {
  /** The client to use for `shard` (held), or undefined for a shard this hold does not cover. */
  clientFor(shard: string): S3Client | undefined;
  /** Resolves when the first request is held. */
  reached: Promise<void>;
  /** Resolves when the activity of a held request has been cancelled (Temporal's cancellation reached it). */
  cancelled: Promise<void>;
  held(): number;
  /** Held requests that went on: none until `release()`. */
  passed(): number;
  release(): void;
  destroy(): void;
}

/** Holds the copyBlobs activity's GetObject / CopyObject / UploadPartCopy of `tenant`'s keys on `shards` until released. */
export function holdBlobSync(tenant: string, shards: string[]): HeldSync {
  const prefix = tenantBlobPrefix(tenant);
  let release!: () => void;
  let reach!: () => void;
  let cancel!: () => void;
  const open = new Promise<void>((r) => (release = r));
  const reached = new Promise<void>((r) => (reach = r));
  const cancelled = new Promise<void>((r) => (cancel = r));
  let held = 0;
  let passed = 0;
  const clients = new Map<string, S3Client>();
  for (const shard of shards) {
    const s3 = s3ClientFor(testConfig(), shard);
    s3.middlewareStack.add(
      (next, context) => async (args) => {
        const key = String((args.input as { Key?: string }).Key ?? '');
        const act = currentActivity();
        if (HELD_COMMANDS.has(context.commandName ?? '') && key.startsWith(prefix) && act?.type === 'copyBlobs') {
          held++;
          if (act.signal.aborted) cancel();
          else act.signal.addEventListener('abort', () => cancel(), { once: true });
          reach();
          await open;
          passed++;
        }
        return next(args);
      },
      { step: 'initialize', name: 'hold-blob-sync' },
    );
    clients.set(shard, s3);
  }
  return {
    clientFor: (shard) => clients.get(shard),
    reached,
    cancelled,
    held: () => held,
    passed: () => passed,
    release,
    destroy: () => {
      for (const c of clients.values()) c.destroy();
    },
  };
}
