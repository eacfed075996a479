import { defineConfig } from 'vitest/config';

// The nightly chaos run: one file, sequential, long timeouts.
export default defineConfig({
  test: {
    include: ['test/chaos/**/*.test.ts'],
    pool: 'forks',
    poolOptions: { forks: { maxForks: 1, minForks: 1 } },
    globalSetup: ['test/global-setup.ts'],
    setupFiles: ['test/setup-file.ts'],
    testTimeout: 400_000,
    hookTimeout: 180_000,
  },
});
