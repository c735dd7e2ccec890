import { execFile } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

/**
 * Runs every ```js block of docs/databases.md as its own CommonJS module in a
 * child process, requiring the built package by name (test/.tmp is inside the
 * package, so `otel-deadline` resolves to this checkout's dist).
 */
const root = fileURLToPath(new URL('../../', import.meta.url));
const tmp = fileURLToPath(new URL('../.tmp/', import.meta.url));
const run = promisify(execFile);
const markdown = readFileSync(new URL('../../docs/databases.md', import.meta.url), 'utf8');
const blocks = [...markdown.matchAll(/```js\n([\s\S]*?)```/g)].map((m) => m[1]);

describe('docs/databases.md code samples', () => {
  it('has samples to run', () => {
    expect(blocks.length).toBeGreaterThanOrEqual(1);
  });

  it.each(blocks.map((code, i) => [i + 1, code]))('sample %i runs and exits 0', async (index, code) => {
    mkdirSync(tmp, { recursive: true });
    const file = `${tmp}docs-databases-${index}.cjs`;
    writeFileSync(file, code as string);
    const { stderr } = await run(process.execPath, [file], { cwd: root, timeout: 20_000 });
    expect(stderr).toBe('');
  });
});
