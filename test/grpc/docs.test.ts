import { execFile } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

/**
 * Runs every ```js block of docs/grpc.md as an ES module in a child process
 * (the samples assert on their own). test/.tmp is inside the package, so
 * `otel-deadline` resolves to this checkout's dist/ through its exports.
 */
const root = fileURLToPath(new URL('../../', import.meta.url));
const tmp = fileURLToPath(new URL('../.tmp/', import.meta.url));
const run = promisify(execFile);

const markdown = readFileSync(new URL('../../docs/grpc.md', import.meta.url), 'utf8');
const samples = [...markdown.matchAll(/```js\n([\s\S]*?)```/g)].map((m, i) => [i + 1, m[1]] as const);

describe('docs/grpc.md code samples', () => {
  it('has the client-and-server sample', () => {
    expect(samples).toHaveLength(1);
  });

  it.each(samples)('sample %i runs and exits 0', async (index, code) => {
    mkdirSync(tmp, { recursive: true });
    const file = `${tmp}docs-grpc-${index}.mjs`;
    writeFileSync(file, code);
    const { stderr } = await run(process.execPath, [file], { cwd: root, timeout: 20_000 });
    expect(stderr).toBe('');
  });
});
