import { execFile } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

/**
 * What a newcomer gets from `npm pack`: the package is packed from a copy of
 * the sources that has no dist/ at all (so only `prepack` can have built it),
 * the tarball's contents are checked against package.json, and it is
 * installed into an empty folder outside this repository with the install
 * lines of docs/install.md, where its entry points, bin, types, quick start
 * and register entry run as a user would run them.
 */
const exec = promisify(execFile);
const root = resolve(__dirname, '..');
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
const installDocs = readFileSync(join(root, 'docs', 'install.md'), 'utf8');
const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';

const scratch = mkdtempSync(join(tmpdir(), 'otel-deadline-pack-'));
const source = join(scratch, 'source');
const app = join(scratch, 'app');
let tarball = '';
let packed: string[] = [];
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}
// No collector listens here: without this, NodeSDK's default metric exporter retries for ~8 s at shutdown (as the docs say).
const env = { ...process.env, OTEL_METRICS_EXPORTER: 'none' };
async function run(file: string, args: string[], cwd: string, timeout = 120_000): Promise<Run> {
  try {
    const { stdout, stderr } = await exec(file, args, { cwd, env, timeout, maxBuffer: 16 * 1024 * 1024 });
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code?: number; stdout?: string; stderr?: string; message: string };
    return { code: typeof e.code === 'number' ? e.code : -1, stdout: e.stdout ?? '', stderr: e.stderr ?? e.message };
  }
}
const node = (args: string[]) => run(process.execPath, args, app, 30_000);

/** The packages of a documented `npm install` line, each pinned to the version this checkout tests against. */
function installLine(marker: string): string[] {
  const line = new RegExp(`<!-- ${marker}:[^>]*-->\\n\`\`\`sh\\nnpm install ([^\\n]+)\\n\`\`\``).exec(installDocs);
  expect(line, `docs/install.md has an npm install line marked ${marker}`).not.toBeNull();
  return line![1].split(/\s+/).map((name) => {
    if (name === pkg.name) return tarball;
    const { version } = JSON.parse(readFileSync(join(root, 'node_modules', name, 'package.json'), 'utf8'));
    return `${name}@${version}`;
  });
}

async function npmInstall(packages: string[]): Promise<void> {
  // --prefer-offline: every version here is one this checkout installed, so npm's cache has it.
  const result = await run(npm, ['install', '--prefer-offline', '--no-audit', '--no-fund', ...packages], app);
  expect(result.code, result.stderr).toBe(0);
}

beforeAll(async () => {
  // The sources the build reads, without dist/: a tarball with a built dist/ proves prepack ran.
  mkdirSync(source);
  for (const path of ['package.json', 'README.md', 'LICENSE', 'tsconfig.json', 'tsconfig.build.json', 'src', 'instrumentation', 'scripts', 'docs', 'BENCHMARKS.md', 'examples']) {
    cpSync(join(root, path), join(source, path), { recursive: true });
  }
  symlinkSync(join(root, 'node_modules'), join(source, 'node_modules'), 'dir');
  const packing = await run(npm, ['pack', '--json', '--pack-destination', scratch], source);
  expect(packing.code, packing.stderr).toBe(0);
  const [report] = JSON.parse(packing.stdout.slice(packing.stdout.indexOf('['))) as { filename: string; files: { path: string }[] }[];
  tarball = join(scratch, report.filename);
  packed = report.files.map((file) => file.path);

  mkdirSync(app);
  writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'newcomer', private: true, type: 'module' }));
}, 180_000);

describe('npm pack', () => {
  it('builds dist/ on pack (prepack), from sources that had none', () => {
    expect(pkg.scripts.prepack).toMatch(/npm run build/);
    expect(existsSync(join(root, 'dist'))).toBe(true);
    expect(packed).toContain('dist/cjs/src/index.js');
  });

  it('ships every file package.json points at: main, types, each exports entry and the bin', () => {
    const targets: string[] = [pkg.main, pkg.types, ...Object.values<string>(pkg.bin)];
    for (const entry of Object.values<string | Record<string, string>>(pkg.exports)) {
      targets.push(...(typeof entry === 'string' ? [entry] : Object.values(entry)));
    }
    for (const target of targets) expect(packed, target).toContain(target.replace(/^\.\//, ''));
  });

  it('ships the Apache-2.0 LICENSE that package.json names', () => {
    expect(pkg.license).toBe('Apache-2.0');
    expect(packed).toContain('LICENSE');
    const text = readFileSync(join(root, 'LICENSE'), 'utf8');
    expect(text).toMatch(/^\s*Apache License\s+Version 2\.0, January 2004/);
    expect(text).toContain('END OF TERMS AND CONDITIONS');
  });

  it('ships every file the README links to, so its links work in node_modules too', () => {
    const readme = readFileSync(join(root, 'README.md'), 'utf8');
    const links = [...readme.matchAll(/\]\(([^)#:\s]+)(?:#[^)]*)?\)/g)].map((match) => match[1]!);
    expect(links.length).toBeGreaterThan(5);
    for (const link of links) expect(packed, link).toContain(link);
  });

  it('ships only the build, the docs, the README, the LICENSE and package.json: no sources, tests or tooling', () => {
    const docs = (path: string) => /^docs\/[\w.-]+\.(md|png)$/.test(path) || ['BENCHMARKS.md', 'examples/express/README.md'].includes(path);
    const unexpected = packed.filter((path) => !/^dist\/(cjs|esm)\//.test(path) && !docs(path) && !['README.md', 'LICENSE', 'package.json'].includes(path));
    expect(unexpected).toEqual([]);
    expect(packed.filter((path) => /(^|\/)test\//.test(path) || path.endsWith('.ts') && !path.endsWith('.d.ts'))).toEqual([]);
  });
});

describe('installed from the tarball into an empty folder', () => {
  beforeAll(async () => {
    await npmInstall(installLine('install'));
  }, 180_000);

  it('loads both entry points with import and with require', async () => {
    writeFileSync(
      join(app, 'entries.mjs'),
      `import * as esm from 'otel-deadline';
       import * as lineage from 'otel-deadline/lineage';
       import { createRequire } from 'node:module';
       const require = createRequire(import.meta.url);
       const cjs = require('otel-deadline');
       console.log(JSON.stringify({
         sameModule: esm.openDeadline === cjs.openDeadline,
         envError: typeof esm.DeadlineEnvError === 'function',
         outcome: esm.DeadlineAttributes.OUTCOME,
         lineage: typeof lineage.renderText === 'function' && lineage.renderText === require('otel-deadline/lineage').renderText,
       }));`,
    );
    const result = await node(['entries.mjs']);
    expect(result.stderr).toBe('');
    expect(JSON.parse(result.stdout)).toEqual({ sameModule: true, envError: true, outcome: 'deadline.outcome', lineage: true });
  });

  describe('types, compiled as a strict nodenext project of the user compiles them', () => {
    const consumer = `import { openDeadline, DeadlineEnvError, DeadlineAttributes, DeadlineExceededError, expressDeadlineErrors, type ManagedDeadline } from 'otel-deadline';
       import { renderText } from 'otel-deadline/lineage';
       import 'otel-deadline/register';
       const d: ManagedDeadline = openDeadline({ operation: 'typed', timeoutMs: 1_000, parent: null });
       const left: number = d.remainingMs();
       const name: 'deadline.outcome' = DeadlineAttributes.OUTCOME;
       const error: Error = new DeadlineEnvError('x');
       const status: 504 = new DeadlineExceededError('typed', 0).status;
       const render: typeof renderText = renderText;
       const handler: typeof expressDeadlineErrors = expressDeadlineErrors;
       export { left, name, error, status, render, handler };`;

    beforeAll(async () => {
      // As a user has it: @types/node installed beside the package.
      const typesNode = JSON.parse(readFileSync(join(root, 'node_modules', '@types', 'node', 'package.json'), 'utf8')).version;
      await npmInstall([`@types/node@${typesNode}`]);
      writeFileSync(join(app, 'typed-esm.mts'), consumer);
      writeFileSync(join(app, 'typed-cjs.cts'), consumer);
    }, 180_000);

    // TypeScript 5 sees every installed @types package; from TypeScript 6, `types` defaults to [] and must name node.
    it.each([
      ['TypeScript 5', 'typescript', 5, {}],
      ['TypeScript 7', 'typescript7', 7, { types: ['node'] }],
    ] as const)('%s, ESM (.mts) and CommonJS (.cts)', async (_label, pkgDir, major, types) => {
      const tsc = join(root, 'node_modules', pkgDir, 'bin', 'tsc');
      const version = await run(process.execPath, [tsc, '--version'], app);
      expect(version.stdout).toMatch(new RegExp(`^Version ${major}\\.`));
      for (const file of ['typed-esm.mts', 'typed-cjs.cts']) {
        const config = `tsconfig-${pkgDir}-${file}.json`;
        const compilerOptions = { strict: true, module: 'nodenext', moduleResolution: 'nodenext', target: 'es2022', noEmit: true, ...types };
        writeFileSync(join(app, config), JSON.stringify({ compilerOptions, files: [file] }));
        const result = await run(process.execPath, [tsc, '-p', config], app);
        expect(result.code, `${file}: ${result.stdout}${result.stderr}`).toBe(0);
      }
      // A hang guard, not a speed check: tsc reads Node's and OTel's types cold, a few seconds on an idle
      // machine and over 20 s (the suite's default) on a loaded 2-core one; run() itself gives up at 120 s.
    }, 300_000);
  });

  it('installs the deadline-lineage bin', async () => {
    const result = await run(join(app, 'node_modules', '.bin', 'deadline-lineage'), ['--help'], app, 30_000);
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toContain('deadline-lineage');
  });

  it.each(['--import', '--require'])(
    'register under %s without its optional peers: one line naming the packages and the command, no app run',
    async (flag) => {
      writeFileSync(join(app, 'hello.cjs'), 'console.log("app ran");');
      const result = await node([flag, 'otel-deadline/register', 'hello.cjs']);
      expect(result.code).not.toBe(0);
      expect(result.stdout).not.toContain('app ran');
      const optional = installLine('install-register').map((spec) => spec.replace(/@[^@]*$/, ''));
      expect(result.stderr.trim().split('\n')).toEqual([
        `otel-deadline/register needs ${optional.join(', ')}, which are not installed. Install with: npm install ${optional.join(' ')}`,
      ]);
    },
  );

  describe('with the register line installed too', () => {
    beforeAll(async () => {
      await npmInstall(installLine('install-register'));
    }, 180_000);

    it('runs the quick start as written', async () => {
      const block = /<!-- quickstart[^>]*-->\n```js\n([\s\S]*?)\n```/.exec(installDocs);
      expect(block).not.toBeNull();
      writeFileSync(join(app, 'quickstart.mjs'), block![1]);
      const result = await node(['quickstart.mjs']);
      expect(result.code, result.stderr).toBe(0);
      const match = /^tool has (\d+) ms$/m.exec(result.stdout);
      expect(match, result.stdout).not.toBeNull();
      // The tool saw the caller's 1,500 ms cutoff: never more, and a real remainder.
      expect(Number(match![1])).toBeLessThanOrEqual(1_500);
      expect(Number(match![1])).toBeGreaterThan(0);
    });

    it('starts an app under node --import otel-deadline/register', async () => {
      writeFileSync(
        join(app, 'served.mjs'),
        `import http from 'node:http';
         import { getDeadline } from 'otel-deadline';
         const server = http.createServer((req, res) => res.end(String(getDeadline()?.source)));
         await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
         const res = await fetch('http://127.0.0.1:' + server.address().port + '/', { headers: { 'x-deadline-remaining-ms': '5000' } });
         console.log('handler saw a ' + (await res.text()) + ' deadline');
         server.close();`,
      );
      // No collector listens here: the trace exporter's failure must not stop the app.
      const result = await node(['--import', 'otel-deadline/register', 'served.mjs']);
      expect(result.stdout.trim()).toBe('handler saw a remote deadline');
    });
  });
});
