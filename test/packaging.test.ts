import { execFile } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';

const run = promisify(execFile);
const root = resolve(__dirname, '..');
mkdirSync(join(root, 'test', '.tmp'), { recursive: true });
// Inside the repo so the copy resolves @opentelemetry/api from the repo's node_modules.
const scratch = mkdtempSync(join(root, 'test', '.tmp', 'copy-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/** Runs a script file with node from the repo root, so `otel-deadline` resolves to this package. */
async function node(file: string, source: string): Promise<{ stdout: string; ms: number }> {
  const path = join(root, 'test', '.tmp', file);
  writeFileSync(path, source);
  const started = Date.now();
  const { stdout } = await run(process.execPath, [path], { cwd: root, timeout: 15_000 });
  return { stdout, ms: Date.now() - started };
}

describe('packaging (built output, real child processes)', () => {
  it('gives import and require one module instance', async () => {
    const { stdout } = await node(
      'dual.mjs',
      `import * as esm from 'otel-deadline';
       import { createRequire } from 'node:module';
       const cjs = createRequire(import.meta.url)('otel-deadline');
       const d = esm.openDeadline({ operation: 'x', timeoutMs: 1000, parent: null });
       const { context, ROOT_CONTEXT } = await import('@opentelemetry/api');
       const ctx = esm.setDeadline(ROOT_CONTEXT, d);
       console.log(JSON.stringify({
         sameFn: esm.openDeadline === cjs.openDeadline,
         sameError: esm.DeadlineExceededError === cjs.DeadlineExceededError,
         sharedKey: cjs.getDeadline(ctx) === d,
       }));
       d.dispose();`,
    );
    expect(JSON.parse(stdout)).toEqual({ sameFn: true, sameError: true, sharedKey: true });
  });

  it('lets two separate copies of the package agree on errors and the context key', async () => {
    const copy = join(scratch, 'node_modules', 'otel-deadline');
    cpSync(join(root, 'dist'), join(copy, 'dist'), { recursive: true });
    cpSync(join(root, 'package.json'), join(copy, 'package.json'));
    const { stdout } = await node(
      'copies.cjs',
      `const a = require('otel-deadline');
       const b = require(${JSON.stringify(copy)});
       const { ROOT_CONTEXT } = require('@opentelemetry/api');
       const err = new b.DeadlineExceededError('op', Date.now());
       const budget = new b.InsufficientBudgetError('op', 10, 5);
       const cancelled = new b.DeadlineCancelledError('op', 'why');
       const d = b.openDeadline({ operation: 'x', timeoutMs: 1000, parent: null });
       console.log(JSON.stringify({
         distinct: a.DeadlineExceededError !== b.DeadlineExceededError,
         exceeded: err instanceof a.DeadlineExceededError,
         budget: budget instanceof a.InsufficientBudgetError,
         cancelled: cancelled instanceof a.DeadlineCancelledError,
         crossWrong: err instanceof a.InsufficientBudgetError,
         isDeadline: a.isDeadlineError(err) && a.isDeadlineError(budget) && a.isDeadlineError(cancelled),
         plainError: new Error('x') instanceof a.DeadlineExceededError,
         sharedKey: a.getDeadline(b.setDeadline(ROOT_CONTEXT, d)) === d,
       }));
       d.dispose();`,
    );
    expect(JSON.parse(stdout)).toEqual({
      distinct: true,
      exceeded: true,
      budget: true,
      cancelled: true,
      crossWrong: false,
      isDeadline: true,
      plainError: false,
      sharedKey: true,
    });
  });

  it('exports each name once, at the package root', async () => {
    const { stdout } = await node('exports.cjs', `console.log(JSON.stringify(Object.keys(require('otel-deadline')).sort()));`);
    expect(JSON.parse(stdout)).toEqual(
      [
        ...['openDeadline', 'withDeadline', 'getDeadline', 'setDeadline', 'MAX_DEADLINE_MS'],
        ...['DeadlineExceededError', 'InsufficientBudgetError', 'DeadlineCancelledError', 'isDeadlineError', 'DeadlineEnvError'],
        ...['DEADLINE_HTTP_STATUS', 'CANCELLED_HTTP_STATUS', 'expressDeadlineErrors', 'koaDeadlineErrors', 'honoDeadlineErrors'],
        ...['DeadlinePropagator', 'DeadlineSpanProcessor', 'DeadlineInstrumentation'],
        ...['DeadlineAttributes', 'DeadlineMetrics', 'DeadlineHeaders', 'RetryEvent', 'ToolEvents', 'ToolAttributes'],
        ...['retryWithinDeadline', 'defaultRetryable', 'carriesDeadlineExpired', 'admit', 'withAdmission'],
        ...['toDeadlineEnvelope', 'readDeadlineEnvelope', 'admitEnvelope', 'withEnvelope', 'detach', 'recordToolEvent', 'runTool'],
      ].sort(),
    );
  });

  // The transport patchers and the drivers they patch: what the package root must not load.
  const patcherFiles = `Object.keys(require.cache).filter((file) =>
    /[\\\\/]instrumentation[\\\\/](client|db|grpc|server)[\\\\/]/.test(file) ||
    /[\\\\/]node_modules[\\\\/](undici|pg|mysql2|ioredis|@grpc[\\\\/]grpc-js)[\\\\/]/.test(file)).length`;

  it('loads no transport patcher until a DeadlineInstrumentation is made (require)', async () => {
    const { stdout } = await node(
      'lazy.cjs',
      `const root = require('otel-deadline');
       const atRoot = ${patcherFiles};
       new root.DeadlineInstrumentation({ enabled: false });
       console.log(JSON.stringify({ atRoot, made: ${patcherFiles} > 0 }));`,
    );
    expect(JSON.parse(stdout)).toEqual({ atRoot: 0, made: true });
  });

  it('loads no transport patcher until a DeadlineInstrumentation is made (import)', async () => {
    const { stdout } = await node(
      'lazy.mjs',
      `import { createRequire } from 'node:module';
       import { DeadlineInstrumentation } from 'otel-deadline';
       const require = createRequire(import.meta.url);
       const atRoot = ${patcherFiles};
       new DeadlineInstrumentation({ enabled: false });
       console.log(JSON.stringify({ atRoot, made: ${patcherFiles} > 0 }));`,
    );
    expect(JSON.parse(stdout)).toEqual({ atRoot: 0, made: true });
  });

  it('does not keep a process alive for a pending one-hour deadline', async () => {
    const { stdout, ms } = await node(
      'pending.cjs',
      `const { openDeadline } = require('otel-deadline');
       const d = openDeadline({ operation: 'long', timeoutMs: 3_600_000, parent: null });
       const child = d.child('child', 3_600_000);
       child.signal.addEventListener('abort', () => console.log('aborted'));
       console.log('armed');`,
    );
    expect(stdout.trim()).toBe('armed');
    // The child process exits on its own: execFile would time out after 15 s otherwise.
    expect(ms).toBeLessThan(15_000);
  });
});
