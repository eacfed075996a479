// The fence's proof (DESIGN.md §3) against the plpgsql fence, the one a shard gets without
// `fence.library` (managed servers that load no library of ours): the suite is
// test/integration/fence-suite.ts.
import { describe } from 'vitest';
import { fenceSuite } from './fence-suite';

describe('plpgsql fence', () => fenceSuite('plpgsql'));
