import { defineConfig } from 'vitest/config';

// Forks, not threads: the Temporal SDK's native bridge misbehaves in worker threads.
// The real stack comes up once per run in the global setup; tests isolate themselves by
// their own tenants, tables, task queues and workflow ids.
export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    exclude: ['test/chaos/**', 'node_modules/**'],
    pool: 'forks',
    poolOptions: { forks: { maxForks: 2, minForks: 1 } },
    globalSetup: ['test/global-setup.ts'],
    setupFiles: ['test/setup-file.ts'],
    testTimeout: 120_000,
    hookTimeout: 180_000,
    teardownTimeout: 60_000,
  },
});
