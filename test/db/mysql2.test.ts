/**
 * MariaDB through mysql2 3.x with DeadlineInstrumentation alone: refusal,
 * KILL QUERY at the cutoff, pool waits. "Nothing ran" is counted in a log
 * table the statement itself writes; "stopped" in information_schema.processlist.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { DeadlineCancelledError, DeadlineExceededError, InsufficientBudgetError, openDeadline } from '../../src';
import type { DeadlineNode } from '../../src/deadline-node';
import { passedDeadline } from '../helpers/clock';
import { MYSQL_CONFIG as CONFIG, MYSQL_LOG as LOG, ranOnMysql, runningOnMysql } from './mysql-fixture';
import { mysqlSuite } from './mysql-suite';
import { eventually, under } from './pg-fixture';
import { startTcpProxy, type TcpProxy } from './tcp-proxy';

const t = mysqlSuite();

const ran = (tag: string) => ranOnMysql(t.admin, tag);
async function threadCount(id: number): Promise<number> {
  const [rows] = await t.admin.query('SELECT count(*) AS n FROM information_schema.processlist WHERE id = ?', [id]);
  return Number((rows as { n: number }[])[0].n);
}
const running = (marker: string) => runningOnMysql(t.admin, marker);

async function connection(): Promise<import('mysql2/promise').Connection> {
  const c = await t.mysqlPromise.createConnection(CONFIG);
  t.cleanups.push(() => c.end());
  return c;
}

describe('mysql2 before sending', () => {
  it('refuses an expired statement (promise, callback, execute, pool) and nothing reaches the server', async () => {
    const c = await connection();
    const raw = t.mysql.createConnection(CONFIG);
    t.cleanups.push(() => raw.end());
    const pool = t.mysqlPromise.createPool({ ...CONFIG, connectionLimit: 1 });
    t.cleanups.push(() => pool.end());
    const tags = [randomUUID(), randomUUID(), randomUUID(), randomUUID()];
    const deadline = await passedDeadline();
    const errors = await under(deadline, () =>
      Promise.all([
        c.query(`INSERT INTO ${LOG} (tag) VALUES (?)`, [tags[0]]).catch((e: unknown) => e),
        new Promise((resolve) => raw.query(`INSERT INTO ${LOG} (tag) VALUES (?)`, [tags[1]], (err) => resolve(err))),
        c.execute(`INSERT INTO ${LOG} (tag) VALUES (?)`, [tags[2]]).catch((e: unknown) => e),
        pool.query(`INSERT INTO ${LOG} (tag) VALUES (?)`, [tags[3]]).catch((e: unknown) => e),
      ]),
    );
    for (const err of errors) expect(err).toBeInstanceOf(DeadlineExceededError);
    for (const tag of tags) expect(await ran(tag)).toBe(0);
    const refused = t.mysqlSpans().filter((s) => s.attributes['deadline.outcome'] === 'not_started');
    expect(refused.length).toBeGreaterThanOrEqual(3);
    for (const span of refused) expect(span.name).toBe('INSERT');
  });

  it('refuses with InsufficientBudgetError below minUsefulMs', async () => {
    const c = await connection();
    t.instrumentation.setConfig({ minUsefulMs: 60_000 });
    try {
      const tag = randomUUID();
      const deadline = openDeadline({ operation: 'short', timeoutMs: 5_000, parent: null });
      const err = await under(deadline, () => c.query(`INSERT INTO ${LOG} (tag) VALUES (?)`, [tag]).catch((e: unknown) => e));
      expect(err).toBeInstanceOf(InsufficientBudgetError);
      expect(await ran(tag)).toBe(0);
      deadline.dispose();
    } finally {
      t.instrumentation.setConfig({});
    }
  });
});

describe('mysql2 in flight at the cutoff', () => {
  it('KILL QUERY stops SELECT SLEEP(5): error 1317 as cause, the connection is reused', async () => {
    const c = await connection();
    const [before] = await c.query('SELECT CONNECTION_ID() AS id');
    const marker = randomUUID();
    const deadline = openDeadline({ operation: 'sleep', timeoutMs: 200, parent: null });
    const started = performance.now();
    const err = (await under(deadline, () => c.query(`SELECT SLEEP(5), '${marker}'`).catch((e: unknown) => e))) as DeadlineExceededError;
    const elapsed = performance.now() - started;
    expect(err).toBeInstanceOf(DeadlineExceededError);
    expect((err.cause as { errno?: number }).errno).toBe(1317);
    // The bound is 500 ms; the statement alone would take 5,000.
    expect(elapsed).toBeLessThan(500);
    expect(await eventually(() => running(marker), 0)).toBe(0);
    const [after] = await c.query('SELECT CONNECTION_ID() AS id');
    expect((after as { id: number }[])[0].id).toBe((before as { id: number }[])[0].id);
    const span = t.mysqlSpans().find((s) => s.attributes['deadline.db.cancel'] !== undefined)!;
    expect(span.name).toBe('SELECT');
    expect(span.attributes['deadline.db.cancel']).toBe('confirmed');
    expect(span.attributes['deadline.outcome']).toBe('expired');
  });

  it('pool: the killed statement’s connection goes back to the pool and is reused; a parent abort is CANCELLED', async () => {
    const pool = t.mysqlPromise.createPool({ ...CONFIG, connectionLimit: 1 });
    t.cleanups.push(() => pool.end());
    const [first] = await pool.query('SELECT CONNECTION_ID() AS id');
    const controller = new AbortController();
    const marker = randomUUID();
    const deadline = openDeadline({ operation: 'abort', timeoutMs: 10_000, parent: null, signal: controller.signal });
    const pending = under(deadline, () => pool.query(`SELECT SLEEP(5), '${marker}'`).catch((e: unknown) => e));
    expect(await eventually(() => running(marker), 1)).toBe(1);
    controller.abort(new Error('caller went away'));
    const err = await pending;
    expect(err).toBeInstanceOf(DeadlineCancelledError);
    expect(await eventually(() => running(marker), 0)).toBe(0);
    const [again] = await pool.query('SELECT CONNECTION_ID() AS id');
    expect((again as { id: number }[])[0].id).toBe((first as { id: number }[])[0].id);
    deadline.dispose();
  });

  it('finished statements and pool waits leave nothing watching the deadline: dispose releases it', async () => {
    const pool = t.mysqlPromise.createPool({ ...CONFIG, connectionLimit: 1 });
    t.cleanups.push(() => pool.end());
    const deadline = openDeadline({ operation: 'scope', timeoutMs: 10_000, parent: null }) as DeadlineNode;
    // Two at once on a pool of one: the second waits for the first's connection.
    await under(deadline, () => Promise.all([pool.query('SELECT 1'), pool.execute('SELECT 2')]));
    expect(deadline.subscriberCount).toBe(0);
    deadline.dispose();
    expect(deadline.isArmed).toBe(false);
    expect(t.mysqlSpans().map((s) => s.attributes['deadline.outcome'])).toEqual(['completed', 'completed']);
  });

  it('a pool waiter past the cutoff leaves the queue and never gets a connection', async () => {
    const pool = t.mysql.createPool({ ...CONFIG, connectionLimit: 1 });
    t.cleanups.push(() => new Promise((resolve) => pool.end(resolve)));
    const holder = await new Promise<import('mysql2').PoolConnection>((resolve, reject) =>
      pool.getConnection((err, conn) => (err ? reject(err) : resolve(conn))),
    );
    const tag = randomUUID();
    // 200 ms of waiting for the one connection, which is held for longer.
    const deadline = openDeadline({ operation: 'wait', timeoutMs: 200, parent: null });
    const err = await under(deadline, () => new Promise((resolve) => pool.query(`INSERT INTO ${LOG} (tag) VALUES (?)`, [tag], (e) => resolve(e))));
    expect(err).toBeInstanceOf(DeadlineExceededError);
    holder.release();
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(await ran(tag)).toBe(0);
    expect((pool as unknown as { _connectionQueue: { length: number } })._connectionQueue.length).toBe(0);
  });
});

describe('mysql2 queued on its connection at the cutoff', () => {
  it('a statement still queued behind another is skipped, never sent; the one running is untouched', async () => {
    const c = await connection();
    const tag = randomUUID();
    const running = c.query("SELECT SLEEP(0.4) AS slept, 'ahead' AS done");
    const deadline = openDeadline({ operation: 'queued', timeoutMs: 100, parent: null });
    const err = await under(deadline, () => c.query(`INSERT INTO ${LOG} (tag) VALUES (?)`, [tag]).catch((e: unknown) => e));
    expect(err).toBeInstanceOf(DeadlineExceededError);
    const [rows] = await running;
    expect((rows as { slept: number; done: string }[])[0]).toEqual({ slept: 0, done: 'ahead' });
    await c.query('SELECT 1');
    expect(await ran(tag)).toBe(0);
    const span = t.mysqlSpans().find((s) => s.name === 'INSERT')!;
    expect(span.attributes['deadline.outcome']).toBe('expired');
    expect(span.attributes['deadline.db.cancel']).toBeUndefined();
  });
});

describe('the KILL path’s edges', () => {
  async function throughProxy(): Promise<{ proxy: TcpProxy; c: import('mysql2/promise').Connection }> {
    const proxy = await startTcpProxy(CONFIG.port);
    t.cleanups.push(() => proxy.close());
    // The KILL connection is opened to the same host and port: through the proxy.
    const c = await t.mysqlPromise.createConnection({ ...CONFIG, port: proxy.port });
    t.cleanups.push(() => c.end().catch(() => {}));
    return { proxy, c };
  }

  it('the KILL cannot be delivered: DeadlineExceededError at the cutoff, the statement runs on, span says not_told', async () => {
    const { proxy, c } = await throughProxy();
    await proxy.refuseNew();
    const marker = randomUUID();
    const deadline = openDeadline({ operation: 'no-kill', timeoutMs: 200, parent: null });
    const started = performance.now();
    const err = await under(deadline, () => c.query(`SELECT SLEEP(1), '${marker}'`).catch((e: unknown) => e));
    const elapsed = performance.now() - started;
    expect(err).toBeInstanceOf(DeadlineExceededError);
    // Answered near the cutoff, not after the 1 s statement (the server was never told).
    expect(elapsed).toBeLessThan(900);
    expect(await running(marker)).toBe(1);
    const span = t.mysqlSpans().find((s) => s.attributes['deadline.db.cancel'] !== undefined)!;
    expect(span.attributes['deadline.db.cancel']).toBe('not_told');
    expect(span.attributes['deadline.outcome']).toBe('expired');
  });

  it('a statement that finishes before its KILL arrives returns its result as completed; the late KILL hits nothing', async () => {
    const { proxy, c } = await throughProxy();
    // The KILL connection is held 600 ms: the 250 ms statement ends first, the 1 s grace has not run out.
    proxy.delayNew(600);
    const deadline = openDeadline({ operation: 'race', timeoutMs: 100, parent: null });
    const [rows] = await under(deadline, () => c.query("SELECT SLEEP(0.25), 'finished' AS done"));
    expect((rows as { done: string }[])[0].done).toBe('finished');
    const [next] = await c.query("SELECT SLEEP(0.2) AS slept, 'next' AS done");
    // SLEEP returns 1 when it was interrupted: the late KILL must not have reached this one.
    expect((next as { slept: number; done: string }[])[0]).toEqual({ slept: 0, done: 'next' });
    const span = t.mysqlSpans().find((s) => s.attributes['deadline.db.cancel'] === 'too_late')!;
    expect(span.attributes['deadline.outcome']).toBe('completed');
  });

  it('a KILL that does not settle within the 1 s bound: the caller gets its error, the connection is destroyed, never used again', async () => {
    const { proxy, c } = await throughProxy();
    const [[{ id }]] = (await c.query('SELECT CONNECTION_ID() AS id')) as unknown as [[{ id: number }]];
    // The KILL connection is held 5 s, past the 1 s bound (and the KILL's own 2 s one).
    proxy.delayNew(5_000);
    const deadline = openDeadline({ operation: 'bound', timeoutMs: 100, parent: null });
    const started = performance.now();
    const err = await under(deadline, () => c.query("SELECT SLEEP(0.25), 'finished' AS done").catch((e: unknown) => e));
    expect(err).toBeInstanceOf(DeadlineExceededError);
    expect(performance.now() - started).toBeLessThan(4_000); // the bound (1 s), not the held KILL (5 s)
    // A statement made after it never reaches the server: the connection is closed.
    const next = await c.query('SELECT 1').catch((e: unknown) => e);
    expect(next).toBeInstanceOf(Error);
    expect(await eventually(() => threadCount(id), 0)).toBe(0);
    const span = t.mysqlSpans().find((s) => s.attributes['deadline.db.cancel'] !== undefined)!;
    expect(span.attributes['deadline.db.cancel']).toBe('not_told');
    expect(span.attributes['deadline.outcome']).toBe('expired');
  });
});
