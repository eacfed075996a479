import { defineConfig } from 'vitest/config';

// Forks, not threads: the Temporal SDK's native bridge misbehaves in worker threads.
// Two projects: `unit` (pure logic, no I/O, no stack) and `stack` (integration, e2e, crash),
// whose global setup brings the real stack up once per run. vitest runs a project's global
// setup only when files of that project are selected, so `vitest run test/unit` never
// touches the stack. Stack tests isolate themselves by their own tenants, tables, task
// queues and workflow ids.
const common = { pool: 'forks' as const, setupFiles: ['test/setup-file.ts'] };

export default defineConfig({
  test: {
    poolOptions: { forks: { maxForks: 2, minForks: 1 } },
    teardownTimeout: 60_000,
    projects: [
      { test: { ...common, name: 'unit', include: ['test/unit/**/*.test.ts'], testTimeout: 60_000 } },
      {
        test: {
          ...common,
          name: 'stack',
          include: ['test/{integration,e2e,crash}/**/*.test.ts'],
          globalSetup: ['test/global-setup.ts'],
          testTimeout: 120_000,
          hookTimeout: 180_000,
        },
      },
    ],
  },
});
