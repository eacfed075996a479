// The fence's proof (DESIGN.md §3) against the native fence (native/shardctl_fence.c): the suite
// is test/integration/fence-suite.ts. With SHARDCTL_DEV_FENCE=plpgsql the stack has no native
// fence, and this file says so and skips; otherwise a stack without it fails here.
import { describe, it } from 'vitest';
import { devFenceKind } from '../../lib/dev/stack';
import { fenceSuite } from './fence-suite';

if (devFenceKind() === 'plpgsql') {
  describe.skip('native fence (SHARDCTL_DEV_FENCE=plpgsql: the stack runs without it)', () => it('runs the fence suite', () => {}));
} else {
  describe('native fence', () => fenceSuite('native'));
}
