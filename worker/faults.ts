// Fault injection for the crash suite: when the worker reaches an armed fault point it is
// killed with SIGKILL — a real kill of the real process, not an exception — or, with
// SHARDCTL_FAULT_ACTION=stop, frozen with SIGSTOP (a GC or VM pause; the test sends SIGCONT).
// Armed by SHARDCTL_FAULT_POINT=<name>[,<name>...]; each hit is first appended to SHARDCTL_FAULT_LOG.
import fs from 'node:fs';

export function faultHookFromEnv(env: NodeJS.ProcessEnv = process.env): ((name: string) => Promise<void>) | undefined {
  const armed = new Set(
    (env.SHARDCTL_FAULT_POINT ?? '')
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean),
  );
  if (armed.size === 0) return undefined;
  const log = env.SHARDCTL_FAULT_LOG;
  const stop = env.SHARDCTL_FAULT_ACTION === 'stop';
  return async (name: string) => {
    if (!armed.has(name)) return;
    if (log) fs.appendFileSync(log, JSON.stringify({ point: name, pid: process.pid, action: stop ? 'stop' : 'kill', at: new Date().toISOString() }) + '\n');
    if (stop) {
      armed.delete(name); // paused once; after SIGCONT it carries on as the stale attempt
      process.kill(process.pid, 'SIGSTOP');
      return;
    }
    process.kill(process.pid, 'SIGKILL');
    await new Promise(() => {}); // never resumes
  };
}
