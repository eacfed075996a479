import { ListObjectsV2Command } from '@aws-sdk/client-s3';
import { createDeps } from '../activities/deps';
import { stackAt, stackConfig } from '../lib/dev/stack';
(async () => {
  const config = stackConfig(stackAt('/work/main'));
  const tenant = process.argv[2];
  const deps = createDeps(config);
  for (const sh of config.shards) {
    const s3 = deps.s3For(sh.name);
    let token: string | undefined; let n = 0, v = 0; const samples: string[] = [];
    do {
      const r = await s3.send(new ListObjectsV2Command({ Bucket: sh.bucket, Prefix: `tenants/${tenant}/`, ContinuationToken: token }));
      for (const o of r.Contents ?? []) { n++; if (/@[0-9a-z]+-[0-9a-f]{16}$/.test(o.Key!)) v++; else if (samples.length < 3) samples.push(o.Key!); }
      token = r.NextContinuationToken;
    } while (token);
    console.log(sh.name, sh.bucket, 'objects', n, 'version keys', v, samples);
  }
  await deps.close();
})();
