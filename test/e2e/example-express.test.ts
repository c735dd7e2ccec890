/**
 * examples/express/server.mjs under `node --import otel-deadline/register`, as
 * its README starts it: called with a roomy deadline it answers and its fetch
 * passes the deadline on; called with a short one while its statement sleeps,
 * it answers 504 `{ code }` without the refusal marker, and the statement is
 * no longer running on PostgreSQL when that answer arrives. Real child
 * process, real PostgreSQL. Runs against the build.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { root } from './run-node';

const APP_NAME = `firsthour-express-example-${process.pid}`;
let child: ChildProcess;
let url: string;
let stderr = '';
let exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;

beforeAll(async () => {
  child = spawn(process.execPath, ['--import', 'otel-deadline/register', join(root, 'examples', 'express', 'server.mjs')], {
    cwd: root,
    env: {
      PATH: process.env.PATH ?? '',
      PORT: '0', PG_APPLICATION_NAME: APP_NAME, OTEL_TRACES_EXPORTER: 'none', OTEL_METRICS_EXPORTER: 'none', OTEL_LOGS_EXPORTER: 'none',
      // auto-instrumentations-node's cloud detectors warn on a machine with no network.
      OTEL_NODE_RESOURCE_DETECTORS: 'env,host,os,process,serviceinstance',
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk));
  exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
  url = await new Promise<string>((resolve, reject) => {
    let out = '';
    child.stdout!.on('data', (chunk: Buffer) => {
      out += chunk;
      const match = /listening on (http:\S+)/.exec(out);
      if (match) resolve(match[1]);
    });
    child.once('exit', () => reject(new Error(`the example exited before listening: ${stderr}`)));
  });
}, 90_000);

afterAll(async () => {
  if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
});

/** Statements of the example's own pool still running on the server. */
async function runningSleeps(): Promise<number> {
  const client = new pg.Client({ host: '127.0.0.1', port: 5432, database: 'test', user: 'postgres' });
  await client.connect();
  try {
    const { rows } = await client.query(
      "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1 AND state = 'active' AND query LIKE 'SELECT pg_sleep%'",
      [APP_NAME],
    );
    return rows[0].n as number;
  } finally {
    await client.end();
  }
}

describe('examples/express under the register entry', { timeout: 90_000 }, () => {
  it('answers within a roomy deadline, and its fetch carried the deadline on', async () => {
    const res = await fetch(`${url}/report/7?work=0.05`, { headers: { 'x-deadline-remaining-ms': '20000' } });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { id: string; price: { price: number; remainingMs: number } };
    expect(body.price.price).toBe(42);
    expect(body.price.remainingMs).toBeGreaterThan(0);
    expect(body.price.remainingMs).toBeLessThanOrEqual(20_000);
  });

  it('answers 504 { code } at the cutoff, with the statement cancelled on the server', async () => {
    const res = await fetch(`${url}/report/7?work=20`, { headers: { 'x-deadline-remaining-ms': '1500' } });
    expect(res.status).toBe(504);
    expect(res.headers.get('x-deadline-expired')).toBeNull();
    expect(await res.json()).toEqual({ code: 'DEADLINE_EXCEEDED' });
    // pg_sleep(20) would still be running for most of 20 s had it not been cancelled.
    expect(await runningSleeps()).toBe(0);
  });

  it('stops on SIGTERM through its own handler', async () => {
    child.kill('SIGTERM');
    expect(await exited).toEqual({ code: 0, signal: null });
    expect(stderr).toBe('');
  });
});
