// Which physical bucket a shard's config names, so two shards can never be configured onto one
// bucket under two spellings. Pure (no I/O): config validation and plan use it. What spelling
// cannot show (a DNS alias, a second deployment) the bucket's identity marker catches (./marker).
//
// Normalized: host lower-cased; every loopback spelling (localhost, *.localhost, 127.0.0.0/8,
// ::1, 0.0.0.0, ::ffff:127.x) is one host; the scheme's default port made explicit; a trailing
// slash dropped; AWS's own S3 endpoints (and no endpoint at all) are the one global namespace.

const DEFAULT_PORTS: Record<string, string> = { 'http:': '80', 'https:': '443' };

function normalizeHost(hostname: string): string {
  const h = hostname.toLowerCase().replace(/^\[|\]$/g, '');
  if (h === 'localhost' || h.endsWith('.localhost') || h === '::1' || h === '0:0:0:0:0:0:0:1' || h === '0.0.0.0' || h === '::') return 'loopback';
  if (/^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(h) || /^::ffff:(127\.|7f[0-9a-f]{2}:)/.test(h)) return 'loopback';
  return h.replace(/\.$/, '');
}

/** A stable identity for (endpoint, bucket): equal strings name the same bucket. */
export function bucketIdentity(endpoint: string | undefined, bucket: string): string {
  const name = bucket.toLowerCase();
  if (endpoint === undefined) return `aws/${name}`;
  let u: URL;
  try {
    u = new URL(endpoint);
  } catch {
    return `${endpoint.toLowerCase()}/${name}`;
  }
  const host = normalizeHost(u.hostname);
  if (/^s3([.-][a-z0-9-]+)*\.amazonaws\.com(\.cn)?$/.test(host)) return `aws/${name}`;
  const port = u.port || DEFAULT_PORTS[u.protocol] || '';
  const path = u.pathname.replace(/\/+$/, '');
  return `${host}:${port}${path}/${name}`;
}

interface BucketOwnerLike {
  name: string;
  bucket: string;
  s3Endpoint?: string;
}

/** The shard's bucket identity under the config's default endpoint. */
export function shardBucketIdentity(shard: BucketOwnerLike, defaultEndpoint: string | undefined): string {
  return bucketIdentity(shard.s3Endpoint ?? defaultEndpoint, shard.bucket);
}

/** One line per pair of shards whose configs name the same bucket (empty when every bucket is its own). */
export function sharedBucketProblems(shards: readonly BucketOwnerLike[], defaultEndpoint: string | undefined): string[] {
  const seen = new Map<string, BucketOwnerLike>();
  const out: string[] = [];
  for (const s of shards) {
    const id = shardBucketIdentity(s, defaultEndpoint);
    const first = seen.get(id);
    if (first) {
      out.push(
        `shards ${first.name} and ${s.name} share one bucket (${first.bucket} at ${first.s3Endpoint ?? defaultEndpoint ?? 'AWS'} and ${s.bucket} at ${s.s3Endpoint ?? defaultEndpoint ?? 'AWS'} are the same bucket ${id}): ` +
          `a move's undo or a retire would delete the owner's objects; give each shard a bucket of its own`,
      );
    } else seen.set(id, s);
  }
  return out;
}
