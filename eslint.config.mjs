import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', 'coverage/**', '.bench-tmp/**', 'test/.tmp/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: {
      globals: {
        process: 'readonly', console: 'readonly', setTimeout: 'readonly', clearTimeout: 'readonly',
        setImmediate: 'readonly', performance: 'readonly', AbortController: 'readonly', AbortSignal: 'readonly',
        URL: 'readonly', URLSearchParams: 'readonly', TextEncoder: 'readonly', TextDecoder: 'readonly', fetch: 'readonly', Buffer: 'readonly', globalThis: 'readonly', require: 'readonly',
        module: 'writable', __dirname: 'readonly', structuredClone: 'readonly', queueMicrotask: 'readonly',
        setInterval: 'readonly', clearInterval: 'readonly', Response: 'readonly', Request: 'readonly', Headers: 'readonly',
      },
    },
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
    },
  },
);
