import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

export default defineConfig({
  resolve: {
    // instrumentation/load-patchers.ts requires the patchers on first use (the package
    // root loads none); the sources run here as ES modules, which cannot be required.
    alias: [{ find: /^\.\/load-patchers$/, replacement: fileURLToPath(new URL('test/helpers/load-patchers.ts', import.meta.url)) }],
  },
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 20_000,
    hookTimeout: 20_000,
    // Separate processes: each test file installs its own global OTel providers.
    pool: 'forks',
  },
});
