import { defineConfig } from 'vitest/config';

// The protocol model check alone, without the dev stack (no global setup): it needs no server.
//   npx vitest run -c vitest.model.config.ts
export default defineConfig({
  test: {
    include: ['test/unit/cutover-model.test.ts'],
    setupFiles: ['test/setup-file.ts'],
    testTimeout: 30_000,
  },
});
