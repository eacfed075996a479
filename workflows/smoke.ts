// A trivial workflow used by the foundation's smoke test and `npm run demo` before a move.
import { proxyActivities } from '@temporalio/workflow';
import type { SmokeActivities } from '../activities/smoke';

const { echo } = proxyActivities<SmokeActivities>({ startToCloseTimeout: '30 seconds' });

export async function smokeWorkflow(name: string): Promise<string> {
  return await echo({ text: `hello, ${name}` });
}
