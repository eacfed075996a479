// Builds every activity from injected dependencies (no module-level clients).
import { createSmokeActivities } from './smoke';
import { createPlanActivities } from './move/plan';
import { createDataActivities } from './move/data';
import { createCutoverActivities } from './move/cutover';
import { createLifecycleActivities } from './move/lifecycle';
import { createRebalanceActivities } from './rebalance';
import type { Deps } from './deps';

export function createActivities(deps: Deps) {
  return {
    ...createSmokeActivities(),
    ...createPlanActivities(deps),
    ...createDataActivities(deps),
    ...createCutoverActivities(deps),
    ...createLifecycleActivities(deps),
    ...createRebalanceActivities(deps),
  };
}
export type Activities = ReturnType<typeof createActivities>;
