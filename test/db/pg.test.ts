/**
 * PostgreSQL through pg 8.x with DeadlineInstrumentation alone (no
 * instrumentation-pg): refusal, cancel at the cutoff, pool waits, outcomes on
 * our own spans. Every "nothing ran" is counted on the server (a log table the
 * statement itself writes), every "stopped" in pg_stat_activity.
 */
import { createRequire } from 'node:module';
import { context } from '@opentelemetry/api';
import { registerInstrumentations } from '@opentelemetry/instrumentation';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  DeadlineCancelledError,
  DeadlineExceededError,
  DeadlineInstrumentation,
  getDeadline,
  InsufficientBudgetError,
  openDeadline,
  withDeadline,
} from '../../src';
import type { DeadlineNode } from '../../src/deadline-node';
import { passedDeadline } from '../helpers/clock';
import { installOtel, sleep, type TestOtel } from '../helpers/otel';
import { startTcpProxy } from './tcp-proxy';
import { activeWith, createLogTable, eventually, LOG_TABLE, PG_CONFIG, ranOnServer, requirePg, tag, under, type Pg } from './pg-fixture';

let otel: TestOtel;
let instrumentation: DeadlineInstrumentation;
let pg: Pg;
let admin: import('pg').Client;
const cleanups: (() => Promise<unknown>)[] = [];

beforeAll(async () => {
  otel = installOtel();
  instrumentation = new DeadlineInstrumentation();
  registerInstrumentations({ instrumentations: [instrumentation] });
  pg = requirePg();
  admin = new pg.Client(PG_CONFIG);
  await admin.connect();
  await createLogTable(admin);
});
afterAll(async () => {
  await admin?.end();
  instrumentation.disable();
  await otel.shutdown();
});
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  otel.exporter.reset();
});

async function client(): Promise<import('pg').Client> {
  const c = new pg.Client(PG_CONFIG);
  await c.connect();
  cleanups.push(() => c.end());
  return c;
}

function pool(options: import('pg').PoolConfig = {}): import('pg').Pool {
  const p = new pg.Pool({ ...PG_CONFIG, ...options });
  cleanups.push(() => p.end());
  return p;
}

const insert = (value: string): [string, string[]] => [`INSERT INTO ${LOG_TABLE} (tag) VALUES ($1)`, [value]];


function pgSpans() {
  return otel.spans().filter((s) => s.name.startsWith('pg.query'));
}

describe('before sending', () => {
  it('refuses an expired statement in every calling style and nothing reaches the server', async () => {
    const c = await client();
    const p = pool();
    const values = [tag(), tag(), tag(), tag()];
    const deadline = await passedDeadline();
    const errors = await under(deadline, () =>
      Promise.all([
        c.query(...insert(values[0])).catch((e: unknown) => e),
        new Promise((resolve) => c.query(...insert(values[1]), (err) => resolve(err))),
        p.query(...insert(values[2])).catch((e: unknown) => e),
        new Promise((resolve) => p.connect((err) => resolve(err))),
      ]),
    );
    for (const err of errors) expect(err).toBeInstanceOf(DeadlineExceededError);
    for (const value of values) expect(await ranOnServer(admin, value)).toBe(0);
    // The pool never opened a connection for them.
    expect(p.totalCount).toBe(0);
    const spans = pgSpans();
    expect(spans.length).toBe(3);
    for (const span of spans) {
      expect(span.name).toBe('pg.query:INSERT test');
      expect(span.attributes['deadline.outcome']).toBe('not_started');
      expect(span.attributes['deadline.abort.code']).toBe('DEADLINE_EXCEEDED');
      expect(span.attributes['db.system.name']).toBe('postgresql');
      // Telemetry carries no SQL text.
      expect(JSON.stringify(span.attributes)).not.toContain(LOG_TABLE);
    }
  });

  it('refuses with InsufficientBudgetError below minUsefulMs', async () => {
    const c = await client();
    instrumentation.setConfig({ minUsefulMs: 60_000 });
    try {
      const value = tag();
      const deadline = openDeadline({ operation: 'short', timeoutMs: 5_000, parent: null });
      const err = await under(deadline, () => c.query(...insert(value)).catch((e: unknown) => e));
      expect(err).toBeInstanceOf(InsufficientBudgetError);
      expect(await ranOnServer(admin, value)).toBe(0);
      deadline.dispose();
    } finally {
      instrumentation.setConfig({});
    }
  });

  it('a statement queued behind a busy one leaves pg’s queue at the cutoff without being sent', async () => {
    const c = await client();
    const busy = c.query('SELECT pg_sleep(1)'); // no deadline: runs its full second
    const value = tag();
    // 200 ms: well inside the 1 s the connection is busy for.
    const deadline = openDeadline({ operation: 'queued', timeoutMs: 200, parent: null });
    const err = await under(deadline, () => c.query(...insert(value)).catch((e: unknown) => e));
    expect(err).toBeInstanceOf(DeadlineExceededError);
    await busy;
    await c.query('SELECT 1'); // the queue moved on: the connection still works
    expect(await ranOnServer(admin, value)).toBe(0);
    const span = pgSpans().find((s) => s.name === 'pg.query:INSERT test')!;
    expect(span.attributes['deadline.outcome']).toBe('expired');
  });
});

describe('in flight at the cutoff', () => {
  it('cancels SELECT pg_sleep(5) on the server; the caller gets DeadlineExceededError with the 57014 as cause', async () => {
    const c = await client();
    const { rows } = await c.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
    const marker = tag();
    const deadline = openDeadline({ operation: 'sleep', timeoutMs: 200, parent: null });
    const started = performance.now();
    const err = (await under(deadline, () => c.query(`SELECT pg_sleep(5), '${marker}'`).catch((e: unknown) => e))) as DeadlineExceededError;
    const elapsed = performance.now() - started;
    expect(err).toBeInstanceOf(DeadlineExceededError);
    expect((err.cause as { code?: string }).code).toBe('57014');
    // The bound is 500 ms; the statement alone would take 5,000.
    expect(elapsed).toBeLessThan(500);
    expect(await eventually(() => activeWith(admin, marker), 0)).toBe(0);
    // Same connection, same backend, usable.
    const after = await c.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
    expect(after.rows[0].pid).toBe(rows[0].pid);
    const span = pgSpans().find((s) => s.name === 'pg.query:SELECT test' && s.attributes['deadline.outcome'] !== 'completed')!;
    expect(span.attributes['deadline.outcome']).toBe('expired');
    expect(span.attributes['deadline.db.cancel']).toBe('confirmed');
    expect(span.attributes['deadline.abort.code']).toBe('DEADLINE_EXCEEDED');
  });

  it('a cancelled write is expired, not unknown, and its row is not there', async () => {
    const c = await client();
    const value = tag();
    const deadline = openDeadline({ operation: 'write', timeoutMs: 200, parent: null });
    const err = await under(deadline, () =>
      new Promise((resolve) => c.query(`INSERT INTO ${LOG_TABLE} (tag) SELECT $1 FROM pg_sleep(5)`, [value], (e) => resolve(e))),
    );
    expect(err).toBeInstanceOf(DeadlineExceededError);
    expect(await ranOnServer(admin, value)).toBe(0);
    const span = pgSpans().find((s) => s.name === 'pg.query:INSERT test')!;
    expect(span.attributes['deadline.outcome']).toBe('expired');
  });

  it('Pool#query: the cancelled statement’s connection goes back to the pool and is reused', async () => {
    const p = pool({ max: 1 });
    const first = await p.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
    const marker = tag();
    const deadline = openDeadline({ operation: 'pool', timeoutMs: 200, parent: null });
    const err = await under(deadline, () => p.query(`SELECT pg_sleep(5), '${marker}'`).catch((e: unknown) => e));
    expect(err).toBeInstanceOf(DeadlineExceededError);
    expect(p.totalCount).toBe(1);
    const again = await p.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
    expect(again.rows[0].pid).toBe(first.rows[0].pid);
    expect(await eventually(() => activeWith(admin, marker), 0)).toBe(0);
  });

  it('a parent’s abort cancels the statement with code CANCELLED', async () => {
    const c = await client();
    const controller = new AbortController();
    const marker = tag();
    const deadline = openDeadline({ operation: 'disconnect', timeoutMs: 10_000, parent: null, signal: controller.signal });
    const pending = under(deadline, () => c.query(`SELECT pg_sleep(5), '${marker}'`).catch((e: unknown) => e));
    // Aborted once the statement is running on the server.
    expect(await eventually(() => activeWith(admin, marker), 1)).toBe(1);
    controller.abort(new Error('caller went away'));
    const err = (await pending) as DeadlineCancelledError;
    expect(err).toBeInstanceOf(DeadlineCancelledError);
    expect((err.cause as { code?: string }).code).toBe('57014');
    expect(await eventually(() => activeWith(admin, marker), 0)).toBe(0);
    const span = pgSpans().find((s) => s.attributes['deadline.abort.code'] === 'CANCELLED')!;
    expect(span.attributes['deadline.outcome']).toBe('cancelled');
    deadline.dispose();
  });

  it('inside a transaction the cancel aborts the transaction: ROLLBACK, and nothing of it stays', async () => {
    const c = await client();
    const value = tag();
    await c.query('BEGIN');
    await c.query(...insert(value));
    const deadline = openDeadline({ operation: 'tx', timeoutMs: 200, parent: null });
    const err = await under(deadline, () => c.query('SELECT pg_sleep(5)').catch((e: unknown) => e));
    expect(err).toBeInstanceOf(DeadlineExceededError);
    const refused = await c.query('SELECT 1').catch((e: { code?: string }) => e.code);
    expect(refused).toBe('25P02'); // in_failed_sql_transaction: only ROLLBACK is accepted now
    await c.query('ROLLBACK');
    expect(await ranOnServer(admin, value)).toBe(0);
  });

  it('the driver’s own query_timeout wins when it is earlier', async () => {
    const c = await client();
    const deadline = openDeadline({ operation: 'timeout', timeoutMs: 5_000, parent: null });
    // 100 ms query_timeout against a 5 s deadline: pg's own timer fires first, with pg's own error.
    const err = (await under(deadline, () =>
      c.query({ text: 'SELECT pg_sleep(0.5)', query_timeout: 100 } as import('pg').QueryConfig).catch((e: unknown) => e),
    )) as Error;
    expect(err).not.toBeInstanceOf(DeadlineExceededError);
    expect(err.message).toBe('Query read timeout');
    deadline.dispose();
  });

  it('a callback that throws still gets the error, and the throw reaches the process as without us', async () => {
    const c = await client();
    const thrown = new Error('from the callback');
    const uncaught = new Promise((resolve) => process.once('uncaughtException', resolve));
    const deadline = openDeadline({ operation: 'throws', timeoutMs: 200, parent: null });
    let got: unknown;
    under(deadline, () =>
      c.query('SELECT pg_sleep(5)', (err) => {
        got = err;
        throw thrown;
      }),
    );
    expect(await uncaught).toBe(thrown);
    expect(got).toBeInstanceOf(DeadlineExceededError);
    await c.query('SELECT 1');
  });
});

describe('pool waits', () => {
  it('a waiter past the cutoff leaves the queue with DeadlineExceededError and is never handed a connection', async () => {
    const p = pool({ max: 1 });
    const holder = await p.connect();
    const value = tag();
    // 200 ms of waiting for a connection that is held for longer.
    const deadline = openDeadline({ operation: 'wait', timeoutMs: 200, parent: null });
    const pending = under(deadline, () => p.query(...insert(value)).catch((e: unknown) => e));
    await sleep(50);
    expect(p.waitingCount).toBe(1);
    const err = await pending;
    expect(err).toBeInstanceOf(DeadlineExceededError);
    expect(p.waitingCount).toBe(0);
    holder.release();
    await sleep(100);
    expect(p.idleCount).toBe(1);
    expect(await ranOnServer(admin, value)).toBe(0);
    const span = pgSpans().find((s) => s.name === 'pg.query:INSERT test')!;
    expect(span.attributes['deadline.outcome']).toBe('expired');
  });

  it('Pool#connect: the callback runs in its caller’s context, not where the releasing request left pg-pool', async () => {
    const p = pool({ max: 1 });
    const first = openDeadline({ operation: 'first', timeoutMs: 5_000, parent: null });
    const second = openDeadline({ operation: 'second', timeoutMs: 5_000, parent: null });
    const holder = await under(first, () => p.connect());
    const seen = new Promise<unknown>((resolve) =>
      under(second, () =>
        p.connect((err, client, release) => {
          resolve(err ?? getDeadline(context.active()));
          release?.();
        }),
      ),
    );
    // pg-pool hands the connection on from the releasing request's context.
    under(first, () => holder.release());
    expect(await seen).toBe(second);
    expect(p.waitingCount).toBe(0);
  });

  it('Pool#connect alone: the waiter leaves the queue at the cutoff', async () => {
    const p = pool({ max: 1 });
    const holder = await p.connect();
    const deadline = openDeadline({ operation: 'connect', timeoutMs: 200, parent: null });
    const err = await under(deadline, () => p.connect().catch((e: unknown) => e));
    expect(err).toBeInstanceOf(DeadlineExceededError);
    expect(p.waitingCount).toBe(0);
    holder.release();
    const next = await p.connect(); // the held connection is free, not given to the waiter that left
    next.release();
    expect(p.totalCount).toBe(1);
  });
});

describe('untouched and completed', () => {
  it('without a deadline nothing is wrapped around the call: no span of ours, pg’s own promise', async () => {
    const c = await client();
    const result = c.query('SELECT 1 AS one');
    expect(result.constructor).toBe(Promise);
    expect((await result).rows[0].one).toBe(1);
    expect(pgSpans()).toEqual([]);
  });

  it('a statement that finishes in time is completed, and its result is returned', async () => {
    const c = await client();
    const value = tag();
    await withDeadline({ operation: 'ok', timeoutMs: 5_000, parent: null }, () => c.query(...insert(value)));
    expect(await ranOnServer(admin, value)).toBe(1);
    const span = pgSpans()[0];
    expect(span.attributes['deadline.outcome']).toBe('completed');
  });
});

describe('the cancel path’s edges', () => {
  it('the cancel connection cannot be opened: DeadlineExceededError at the cutoff, span says not_told', async () => {
    const proxy = await startTcpProxy(PG_CONFIG.port);
    cleanups.push(() => proxy.close());
    const c = new pg.Client({ ...PG_CONFIG, port: proxy.port });
    await c.connect();
    cleanups.push(() => c.end().catch(() => {}));
    await proxy.refuseNew();
    const marker = tag();
    const deadline = openDeadline({ operation: 'no-cancel', timeoutMs: 200, parent: null });
    const started = performance.now();
    const err = await under(deadline, () => c.query(`SELECT pg_sleep(1), '${marker}'`).catch((e: unknown) => e));
    const elapsed = performance.now() - started;
    expect(err).toBeInstanceOf(DeadlineExceededError);
    // Answered near the cutoff, not after the 1 s statement (the server was never told).
    expect(elapsed).toBeLessThan(900);
    expect(await activeWith(admin, marker)).toBe(1);
    const span = pgSpans().find((s) => s.attributes['deadline.db.cancel'] !== undefined)!;
    expect(span.attributes['deadline.db.cancel']).toBe('not_told');
    expect(span.attributes['deadline.outcome']).toBe('expired');
  });

  it('a statement that finishes while its cancel is on the way returns its result as completed', async () => {
    const proxy = await startTcpProxy(PG_CONFIG.port);
    cleanups.push(() => proxy.close());
    const c = new pg.Client({ ...PG_CONFIG, port: proxy.port });
    await c.connect();
    cleanups.push(() => c.end().catch(() => {}));
    // The cancel connection is held 600 ms: the 250 ms statement ends first, the 1 s grace has not run out.
    proxy.delayNew(600);
    const deadline = openDeadline({ operation: 'race', timeoutMs: 100, parent: null });
    const result = await under(deadline, () => c.query<{ done: string }>("SELECT pg_sleep(0.25), 'finished' AS done"));
    expect(result.rows[0].done).toBe('finished');
    // The late cancel reached an idle backend and hit nothing: the next statement runs in full.
    const next = await c.query<{ done: string }>("SELECT pg_sleep(0.2), 'next' AS done");
    expect(next.rows[0].done).toBe('next');
    const span = pgSpans().find((s) => s.attributes['deadline.db.cancel'] === 'too_late')!;
    expect(span.attributes['deadline.outcome']).toBe('completed');
  });

  it('a result held for a cancel that never comes is returned at the 1 s grace, as completed', async () => {
    const proxy = await startTcpProxy(PG_CONFIG.port);
    cleanups.push(() => proxy.close());
    const c = new pg.Client({ ...PG_CONFIG, port: proxy.port });
    await c.connect();
    cleanups.push(() => c.end().catch(() => {}));
    // The cancel connection is held 5 s, past its own 2 s bound: only the grace can release the result.
    proxy.delayNew(5_000);
    const deadline = openDeadline({ operation: 'grace', timeoutMs: 100, parent: null });
    const started = performance.now();
    const result = await under(deadline, () => c.query<{ done: string }>("SELECT pg_sleep(0.25), 'finished' AS done"));
    expect(result.rows[0].done).toBe('finished');
    expect(performance.now() - started).toBeLessThan(4_000); // the grace (1 s), not the held cancel (5 s)
    const span = pgSpans().find((s) => s.attributes['deadline.db.cancel'] === 'too_late')!;
    expect(span.attributes['deadline.outcome']).toBe('completed');
  });

  it('pg-query-stream errors at the cutoff and the server stops fetching', async () => {
    const QueryStream = createRequire(import.meta.url)('pg-query-stream') as typeof import('pg-query-stream');
    const c = await client();
    const marker = tag();
    // 100 rows of 50 ms each: 5 s of work on the server, cut at 300 ms.
    const stream = new QueryStream(`SELECT i, pg_sleep(0.05), '${marker}' FROM generate_series(1, 100) AS i`, [], { batchSize: 10 });
    const deadline = openDeadline({ operation: 'stream', timeoutMs: 300, parent: null });
    let rows = 0;
    const err = await under(deadline, () =>
      new Promise((resolve) => {
        c.query(stream);
        stream.on('data', () => rows++);
        stream.once('error', resolve);
        stream.once('end', () => resolve(undefined));
      }),
    );
    expect(err).toBeInstanceOf(DeadlineExceededError);
    expect(rows).toBeLessThan(100);
    expect(await eventually(() => activeWith(admin, marker), 0)).toBe(0);
    await c.query('SELECT 1');
  });

  it('an idle pg-cursor is closed at the cutoff and its next read fails', async () => {
    const Cursor = createRequire(import.meta.url)('pg-cursor') as typeof import('pg-cursor');
    const c = await client();
    const deadline = openDeadline({ operation: 'cursor', timeoutMs: 200, parent: null });
    const cursor = under(deadline, () => c.query(new Cursor('SELECT i FROM generate_series(1, 1000) AS i')));
    const first = await cursor.read(10);
    expect(first).toHaveLength(10);
    // Idle between reads past the cutoff (200 ms budget, 400 ms pause).
    await sleep(400);
    const err = await cursor.read(10).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(DeadlineExceededError);
    await c.query('SELECT 1');
  });
});

describe('the guard lives as long as the statement', () => {
  it('a finished Client#query, Pool#query and pool wait leave nothing watching the deadline: dispose releases it', async () => {
    const c = await client();
    const p = pool({ max: 1 });
    const deadline = openDeadline({ operation: 'scope', timeoutMs: 10_000, parent: null }) as DeadlineNode;
    await under(deadline, async () => {
      await c.query('SELECT 1');
      // Two at once on a pool of one: the second waits for the first's connection.
      await Promise.all([p.query('SELECT 1'), p.query('SELECT 2')]);
      const held = await p.connect();
      held.release();
    });
    expect(deadline.subscriberCount).toBe(0);
    deadline.dispose();
    expect(deadline.isArmed).toBe(false);
    expect(pgSpans().map((s) => s.attributes['deadline.outcome'])).toEqual(['completed', 'completed', 'completed']);
  });

  it('a query started inside withDeadline and awaited after it returned is still cancelled at the cutoff', async () => {
    const c = await client();
    const marker = tag();
    // The scope returns at once and disposes its deadline; the statement keeps its 200 ms guard.
    const { pending } = await withDeadline({ operation: 'scope', timeoutMs: 200, parent: null }, async () => ({
      pending: c.query(`SELECT pg_sleep(5), '${marker}'`).catch((e: unknown) => e),
    }));
    const err = (await pending) as DeadlineExceededError;
    expect(err).toBeInstanceOf(DeadlineExceededError);
    expect((err.cause as { code?: string }).code).toBe('57014');
    expect(await eventually(() => activeWith(admin, marker), 0)).toBe(0);
  });
});
