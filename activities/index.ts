// Builds every activity from injected dependencies (no module-level clients).
import { createSmokeActivities } from './smoke';
import type { Deps } from '../worker/deps';

export function createActivities(deps: Deps) {
  void deps;
  return { ...createSmokeActivities() };
}
