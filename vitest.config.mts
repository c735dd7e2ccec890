import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 20_000,
    hookTimeout: 20_000,
    // Separate processes: each test file installs its own global OTel providers.
    pool: 'forks',
  },
});
