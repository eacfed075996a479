// S3 clients from config, one place for their settings: path-style addressing, and checksums
// only when required (recent SDKs otherwise send aws-chunked bodies some servers store corrupted).
import { S3Client } from '@aws-sdk/client-s3';
import { Config, shardByName } from './config';

export function s3ClientFor(config: Config, shard: string): S3Client {
  return new S3Client({
    endpoint: shardByName(config, shard).s3Endpoint ?? config.s3.endpoint,
    region: config.s3.region,
    forcePathStyle: config.s3.forcePathStyle,
    // Absent from the config: the SDK's default chain (environment, profile, web identity, instance role).
    ...(config.s3.accessKeyId && config.s3.secretAccessKey
      ? { credentials: { accessKeyId: config.s3.accessKeyId, secretAccessKey: config.s3.secretAccessKey } }
      : {}),
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
  });
}

/** Both shards' buckets are on one endpoint, so objects can be copied server-side. */
export function sameS3Endpoint(config: Config, a: string, b: string): boolean {
  const endpoint = (s: string) => shardByName(config, s).s3Endpoint ?? config.s3.endpoint;
  return endpoint(a) === endpoint(b);
}
