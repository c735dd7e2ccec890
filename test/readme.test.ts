import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const run = promisify(execFile);
const root = resolve(__dirname, '..');
const readme = readFileSync(join(root, 'README.md'), 'utf8');
const pages = readdirSync(join(root, 'docs'))
  .filter((name) => name.endsWith('.md'))
  .map((name) => `docs/${name}`);
/** README parts: assembled into README.md, so their links are relative to the repository root. */
const readmeParts = ['docs/intro.md', 'docs/demo.md', 'docs/install.md'];

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
    // No collector listens here: without this, NodeSDK's default metric exporter retries for ~8 s at shutdown (as the docs say).
    const env = { ...process.env, OTEL_METRICS_EXPORTER: 'none' };
    const { stdout } = await run(process.execPath, [file], { cwd: root, env, timeout: 30_000 });
    const match = /^tool has (\d+) ms$/m.exec(stdout);
    expect(match).not.toBeNull();
    // The tool saw the caller's cutoff: never more than the 1500 ms budget, and a real remainder.
    expect(Number(match![1])).toBeLessThanOrEqual(1500);
    expect(Number(match![1])).toBeGreaterThan(0);
  });

  it('stays a five-minute read: under 400 lines', () => {
    expect(readme.split('\n').length).toBeLessThan(400);
  });

  it('links every docs page that has a tour entry, and every page it links exists', () => {
    const linked = new Set([...readme.matchAll(/\]\((docs\/[^)#]+\.md)(#[^)]*)?\)/g)].map((m) => m[1]));
    const toured = pages.flatMap((page) =>
      [...readFileSync(join(root, page), 'utf8').matchAll(/<!-- tour \d+(?: ([\w.-]+\.md))? -->/g)].map((m) => (m[1] ? `docs/${m[1]}` : page)),
    );
    expect(toured.length).toBeGreaterThanOrEqual(6);
    for (const page of toured) expect(linked, page).toContain(page);
    for (const page of linked) expect(existsSync(join(root, page)), page).toBe(true);
  });

  it('has no relative link, in the README or a docs page, to a file that does not exist', () => {
    const documents = [['README.md', readme], ...pages.filter((page) => !readmeParts.includes(page)).map((page) => [page, readFileSync(join(root, page), 'utf8')])];
    for (const [path, text] of documents) {
      for (const [, target] of text.matchAll(/\]\(([^)#\s]+)(?:#[^)]*)?\)/g)) {
        if (/^[a-z]+:/.test(target)) continue;
        expect(existsSync(join(root, dirname(path), target)), `${path} links ${target}`).toBe(true);
      }
    }
  });

  it('mentions only npm scripts that exist, in the README and the docs', () => {
    const scripts = Object.keys(JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')).scripts);
    const text = [readme, ...pages.map((page) => readFileSync(join(root, page), 'utf8'))].join('\n');
    // Placeholders such as `npm run bench:NAME` (a format example) are not script names.
    const mentioned = [...text.matchAll(/npm run ([a-z0-9:]*[a-z0-9])(?![:A-Za-z0-9])/g)].map((m) => m[1]);
    expect(mentioned.length).toBeGreaterThan(3);
    for (const name of new Set(mentioned)) expect(scripts, `npm run ${name}`).toContain(name);
  });
});
