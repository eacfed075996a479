// The detail of a `shard.prepare` audit entry (lib/shard/prepare-audit.ts): what one shard's
// prepare did, and for a failed shard why, without fields it does not have.
import { describe, it, expect } from 'vitest';
import { prepareAuditDetail } from '../../lib/shard/prepare-audit';

describe('prepareAuditDetail', () => {
  it('names the shard, the tables fenced, those this run changed and the bucket marker', () => {
    const d = prepareAuditDetail(
      { shard: 'shard-a', tables: ['public.accounts', 'public.orders'], changed: ['public.orders'], problems: [], bucketMarker: 'created' },
      { demoSchema: true },
    );
    expect(d).toEqual({
      shard: 'shard-a',
      tables: ['public.accounts', 'public.orders'],
      changed: ['public.orders'],
      demoSchema: true,
      bucketMarker: 'created',
    });
  });

  it('records a failed shard with its error and its warnings, and no marker', () => {
    const d = prepareAuditDetail(
      { shard: 'shard-b', tables: [], changed: [], problems: ['public.t has no primary key'], error: 'lock timeout on public.t' },
      { demoSchema: false },
    );
    expect(d).toEqual({
      shard: 'shard-b',
      tables: [],
      changed: [],
      demoSchema: false,
      problems: ['public.t has no primary key'],
      error: 'lock timeout on public.t',
    });
  });
});
