/**
 * The register entry hooks the database drivers: an ESM app (the runnable
 * example, `import pg from 'pg'` through the loader hook) under --import and a
 * CommonJS app under --require, each a child process exporting to an OTLP
 * receiver run here. Runs against the build (`npm run build`).
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startOtlpReceiver, type OtlpReceiver } from '../../src/lineage/receiver';

const root = resolve(__dirname, '..', '..');
let receiver: OtlpReceiver;

function node(args: string[], env: Record<string, string>): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((done, fail) => {
    const child = spawn(process.execPath, args, {
      cwd: root,
      env: { PATH: process.env.PATH ?? '', OTEL_BSP_SCHEDULE_DELAY: '50', OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk));
    // Bounds a hung child; a run takes about a second.
    const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
    child.once('error', fail);
    child.once('close', (code) => {
      clearTimeout(timer);
      done({ code, stdout, stderr });
    });
  });
}

function lastJson(run: { code: number | null; stdout: string; stderr: string }): Record<string, unknown> {
  expect(run.stderr).toBe('');
  expect(run.code).toBe(0);
  return JSON.parse(run.stdout.trim().split('\n').at(-1)!) as Record<string, unknown>;
}

beforeAll(async () => {
  if (!existsSync(join(root, 'dist', 'esm', 'register.mjs'))) throw new Error('run `npm run build` first');
  receiver = await startOtlpReceiver();
});
afterAll(async () => {
  await receiver?.close();
});

describe('register entry with pg', () => {
  it('ESM (examples/db/cancel.mjs under --import): the statement is cancelled on the server at the cutoff', async () => {
    const result = lastJson(await node(['--import', 'otel-deadline/register', 'examples/db/cancel.mjs'], { OTEL_SERVICE_NAME: 'db-esm' }));
    expect(result).toMatchObject({ error: 'DeadlineExceededError', serverCode: '57014', stillRunning: 0, connectionReused: true });
    const spans = receiver.spans().filter((s) => s.service === 'db-esm' && s.name === 'pg.query:SELECT test');
    expect(spans.map((s) => s.attributes['deadline.outcome'])).toContain('expired');
  });

  it('CommonJS under --require, and OTEL_DEADLINE_PG_ENABLED=false leaves pg alone', async () => {
    const guarded = lastJson(await node(['--require', 'otel-deadline/register', 'test/db/fixtures/pg-app.cjs', '5'], { OTEL_SERVICE_NAME: 'db-cjs' }));
    expect(guarded).toMatchObject({ ok: false, error: 'DeadlineExceededError', serverCode: '57014' });
    // 1 s statement, 200 ms deadline: with pg switched off the statement runs to its end.
    const untouched = lastJson(
      await node(['--require', 'otel-deadline/register', 'test/db/fixtures/pg-app.cjs', '1'], { OTEL_SERVICE_NAME: 'db-off', OTEL_DEADLINE_PG_ENABLED: 'false' }),
    );
    expect(untouched).toMatchObject({ ok: true });
    expect(untouched.settledMs).toBeGreaterThanOrEqual(1_000);
  });
});
