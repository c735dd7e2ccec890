/**
 * The register entry hooks the database drivers, each in a child process
 * exporting to an OTLP receiver run here: ESM apps under --import (through
 * the loader hook; the mysql2 one imports only `mysql2/promise`) and CommonJS
 * apps under --require, and the env switches that leave a driver alone. Runs
 * against the build (`npm run build`).
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startOtlpReceiver, type OtlpReceiver } from '../../src/lineage/receiver';
import { node as runNode, root, type Run } from '../e2e/run-node';

let receiver: OtlpReceiver;

function node(args: string[], env: Record<string, string>): Promise<Run> {
  return runNode(args, { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url, ...env });
}

function lastJson(run: Run): Record<string, unknown> {
  expect(run.stderr).toBe('');
  expect(run.code).toBe(0);
  return JSON.parse(run.stdout.trim().split('\n').at(-1)!) as Record<string, unknown>;
}

/** The outcomes on the spans `service` exported under `name`. */
function outcomes(service: string, name: string): unknown[] {
  return receiver.spans().filter((s) => s.service === service && s.name === name).map((s) => s.attributes['deadline.outcome']);
}

/**
 * How long a statement cut at its 200-300 ms cutoff may take to settle in a
 * child process on a loaded machine; uncut, the statements take 5 s.
 */
const CUT_WITHIN_MS = 2_000;

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
    expect(outcomes('db-esm', 'pg.query:SELECT test')).toContain('expired');
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

describe('register entry with mysql2', () => {
  it('ESM importing only mysql2/promise, under --import: KILL QUERY at the cutoff, 1317, the connection reused', async () => {
    const result = lastJson(await node(['--import', 'otel-deadline/register', 'test/db/fixtures/mysql2-app.mjs', '5'], { OTEL_SERVICE_NAME: 'mysql-esm' }));
    expect(result).toMatchObject({ ok: false, error: 'DeadlineExceededError', serverErrno: 1317, stillRunning: 0, connectionReused: true });
    expect(result.settledMs).toBeLessThan(CUT_WITHIN_MS);
    expect(outcomes('mysql-esm', 'SELECT')).toContain('expired');
  });

  it('CommonJS callback API under --require, and OTEL_DEADLINE_MYSQL2_ENABLED=false leaves mysql2 alone', async () => {
    const guarded = lastJson(await node(['--require', 'otel-deadline/register', 'test/db/fixtures/mysql2-app.cjs', '5'], { OTEL_SERVICE_NAME: 'mysql-cjs' }));
    expect(guarded).toMatchObject({ ok: false, error: 'DeadlineExceededError', serverErrno: 1317 });
    expect(guarded.settledMs).toBeLessThan(CUT_WITHIN_MS);
    // 1 s statement, 200 ms deadline: with mysql2 switched off it runs to its end.
    const untouched = lastJson(
      await node(['--require', 'otel-deadline/register', 'test/db/fixtures/mysql2-app.cjs', '1'], {
        OTEL_SERVICE_NAME: 'mysql-off',
        OTEL_DEADLINE_MYSQL2_ENABLED: 'false',
      }),
    );
    expect(untouched).toMatchObject({ ok: true });
    expect(untouched.settledMs).toBeGreaterThanOrEqual(1_000);
  });
});

describe('register entry with ioredis', () => {
  it('ESM under --import: BLPOP is clamped to the budget, nobody stays blocked, a refused INCR never reaches Redis', async () => {
    const result = lastJson(await node(['--import', 'otel-deadline/register', 'test/db/fixtures/ioredis-app.mjs', '5'], { OTEL_SERVICE_NAME: 'redis-esm' }));
    // The server's nil at the clamped timeout, or our rejection at the same cutoff.
    expect(result.value === null || result.error === 'DeadlineExceededError').toBe(true);
    expect(result.settledMs).toBeLessThan(CUT_WITHIN_MS);
    // The server let go of the connection by itself, at the clamped timeout: not after BLPOP's 5 s.
    expect(result.unblockedMs).toBeLessThan(CUT_WITHIN_MS);
    expect(result).toMatchObject({ blocked: 0, refused: 'DeadlineExceededError', incrSent: 0 });
    expect(outcomes('redis-esm', 'incr')).toEqual(['not_started']);
  });

  it('CommonJS under --require, and OTEL_DEADLINE_IOREDIS_ENABLED=false leaves ioredis alone', async () => {
    const guarded = lastJson(await node(['--require', 'otel-deadline/register', 'test/db/fixtures/ioredis-app.cjs', '5'], { OTEL_SERVICE_NAME: 'redis-cjs' }));
    expect(guarded.value === null || guarded.error === 'DeadlineExceededError').toBe(true);
    expect(guarded.settledMs).toBeLessThan(CUT_WITHIN_MS);
    // BLPOP for 1 s under a 300 ms deadline: switched off, the server holds it the full second.
    const untouched = lastJson(
      await node(['--require', 'otel-deadline/register', 'test/db/fixtures/ioredis-app.cjs', '1'], {
        OTEL_SERVICE_NAME: 'redis-off',
        OTEL_DEADLINE_IOREDIS_ENABLED: 'false',
      }),
    );
    expect(untouched).toMatchObject({ value: null });
    expect(untouched.settledMs).toBeGreaterThanOrEqual(1_000);
  });
});
