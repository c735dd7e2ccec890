import { execFile } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const run = promisify(execFile);
const root = resolve(__dirname, '..');
const readme = readFileSync(join(root, 'README.md'), 'utf8');

describe('README', () => {
  it('is the current assembly of docs/*.md (npm run readme)', async () => {
    await expect(run(process.execPath, ['scripts/build-readme.mjs', '--check'], { cwd: root })).resolves.toBeDefined();
  });

  it('runs its quick start as written', async () => {
    const block = /<!-- quickstart[^>]*-->\n```js\n([\s\S]*?)\n```/.exec(readme);
    expect(block).not.toBeNull();
    mkdirSync(join(root, 'test', '.tmp'), { recursive: true });
    const file = join(root, 'test', '.tmp', 'quickstart.mjs');
    writeFileSync(file, block![1]);
    const { stdout } = await run(process.execPath, [file], { cwd: root, timeout: 30_000 });
    const match = /^tool has (\d+) ms$/m.exec(stdout);
    expect(match).not.toBeNull();
    // The tool saw the caller's cutoff: never more than the 1500 ms budget, and a real remainder.
    expect(Number(match![1])).toBeLessThanOrEqual(1500);
    expect(Number(match![1])).toBeGreaterThan(0);
  });

  it('mentions only npm scripts that exist', () => {
    const scripts = Object.keys(JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')).scripts);
    const mentioned = [...readme.matchAll(/npm run ([a-z0-9:]+)/g)].map((m) => m[1]);
    expect(mentioned.length).toBeGreaterThan(3);
    for (const name of new Set(mentioned)) expect(scripts, `npm run ${name}`).toContain(name);
  });
});
