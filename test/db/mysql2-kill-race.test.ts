/**
 * A KILL QUERY hits only its own statement, against the real MariaDB. The
 * kill is aimed at a connection's thread: if the statement ends before the
 * kill lands and the connection meanwhile runs the next statement (the one
 * queued behind it, or a pool's next waiter), the kill stops that one. Each
 * case puts a statement with no deadline right behind one cut at its
 * cutoff; the statement with no deadline inserts a row into a table only
 * this file uses, so the server's row count says whether a kill reached it.
 */
import { randomUUID } from 'node:crypto';
import { beforeAll, describe, expect, it } from 'vitest';
import { DeadlineExceededError, openDeadline } from '../../src';
import { sleep } from '../helpers/otel';
import { passedDeadline } from '../helpers/clock';
import { MYSQL_CONFIG as CONFIG } from './mysql-fixture';
import { mysqlSuite } from './mysql-suite';
import { startLatencyProxy, type LatencyProxy } from './mysql-latency-proxy';
import { eventually, under } from './pg-fixture';
import { startTcpProxy, type TcpProxy } from './tcp-proxy';

const RACE_LOG = 'otel_deadline_mysql2_kill_race';

const t = mysqlSuite();

beforeAll(async () => {
  await t.admin.query(`CREATE TABLE IF NOT EXISTS ${RACE_LOG} (tag varchar(80) NOT NULL)`);
});

/** The statement with no deadline: a row, written only if the statement ran to its end (a killed SLEEP fails with 1317). */
const insertAfter = (seconds: number) => `INSERT INTO ${RACE_LOG} (tag) SELECT ? FROM DUAL WHERE SLEEP(${seconds}) = 0`;

async function rowsLike(prefix: string): Promise<number> {
  const [rows] = await t.admin.query(`SELECT count(*) AS n FROM ${RACE_LOG} WHERE tag LIKE ?`, [`${prefix}%`]);
  return Number((rows as { n: number }[])[0].n);
}

async function threadCount(id: number): Promise<number> {
  const [rows] = await t.admin.query('SELECT count(*) AS n FROM information_schema.processlist WHERE id = ?', [id]);
  return Number((rows as { n: number }[])[0].n);
}

/** What a statement cut near its cutoff may answer: its result, or our error. Anything else (a raw 1317) is a defect. */
function isOurs(outcome: unknown): boolean {
  return !(outcome instanceof Error) || outcome instanceof DeadlineExceededError;
}

async function proxied<P extends LatencyProxy | TcpProxy>(start: (port: number) => Promise<P>): Promise<P> {
  const proxy = await start(CONFIG.port);
  t.cleanups.push(() => proxy.close());
  return proxy;
}

type Target = Pick<import('mysql2/promise').Pool, 'query'>;

/**
 * `first` under a 100 ms deadline sleeps 150 ms; the KILL connection takes
 * 300 ms to open, so the statement ends before its KILL lands. `next`, with
 * no deadline, is right behind it on `target` and sleeps 500 ms: a KILL that
 * landed while it ran would stop it, and its row would be missing.
 */
async function slowKillThenNext(target: Target, proxy: TcpProxy): Promise<void> {
  proxy.delayNew(300);
  const tag = randomUUID();
  const deadline = openDeadline({ operation: 'near', timeoutMs: 100, parent: null });
  const first = under(deadline, () => target.query('SELECT SLEEP(0.15) AS s').catch((e: unknown) => e));
  const next = target.query(insertAfter(0.5), [tag]).catch((e: unknown) => e);
  const [outcome, nextOutcome] = await Promise.all([first, next]);
  expect(isOurs(outcome)).toBe(true);
  expect(nextOutcome).not.toBeInstanceOf(Error);
  expect(await rowsLike(tag)).toBe(1);
  deadline.dispose();
}

describe('a slow KILL path: the statement ends before its KILL lands', () => {
  it('Pool#query: the pool’s next waiter (no deadline) gets the connection only after the KILL settled, and runs to its end', async () => {
    const proxy = await proxied(startTcpProxy);
    const pool = t.mysqlPromise.createPool({ ...CONFIG, port: proxy.port, connectionLimit: 1 });
    t.cleanups.push(() => pool.end());
    await pool.query('SELECT 1'); // the pool's one connection opens fast
    await slowKillThenNext(pool, proxy);
  });

  it('one connection: the statement queued behind it (no deadline) starts only after the KILL settled, and runs to its end', async () => {
    const proxy = await proxied(startTcpProxy);
    const c = await t.mysqlPromise.createConnection({ ...CONFIG, port: proxy.port });
    t.cleanups.push(() => c.end().catch(() => {}));
    await slowKillThenNext(c, proxy);
  });
});

describe('a KILL that does not settle within the bound', () => {
  it('Pool#query: the connection is destroyed, the pool’s next waiter (no deadline) runs on a new one to its end, judged by no deadline', async () => {
    const proxy = await proxied(startTcpProxy);
    const pool = t.mysqlPromise.createPool({ ...CONFIG, port: proxy.port, connectionLimit: 1 });
    t.cleanups.push(() => pool.end());
    const [[{ id }]] = (await pool.query('SELECT CONNECTION_ID() AS id')) as unknown as [[{ id: number }]];
    proxy.delayNew(5_000); // past the 1 s bound
    const tag = randomUUID();
    const deadline = openDeadline({ operation: 'stuck', timeoutMs: 100, parent: null });
    const first = under(deadline, () => pool.query('SELECT SLEEP(0.3) AS s').catch((e: unknown) => e));
    const next = pool.query(insertAfter(0.1), [tag]).then(() => pool.query('SELECT CONNECTION_ID() AS id'));
    // The KILL connection was accepted at the cutoff; the new connection the pool opens later is not held.
    await sleep(400);
    proxy.delayNew(0);
    expect(await first).toBeInstanceOf(DeadlineExceededError);
    const [[{ id: nextId }]] = (await next) as unknown as [[{ id: number }]];
    expect(nextId).not.toBe(id);
    expect(await rowsLike(tag)).toBe(1);
    expect(await eventually(() => threadCount(id), 0)).toBe(0);
    deadline.dispose();
  });

  it('one connection: the statement queued behind it fails with mysql2’s closed-connection error and never reaches the server', async () => {
    const proxy = await proxied(startTcpProxy);
    const c = await t.mysqlPromise.createConnection({ ...CONFIG, port: proxy.port });
    t.cleanups.push(() => c.end().catch(() => {}));
    proxy.delayNew(5_000);
    const tag = randomUUID();
    const deadline = openDeadline({ operation: 'stuck', timeoutMs: 100, parent: null });
    const first = under(deadline, () => c.query('SELECT SLEEP(0.3) AS s').catch((e: unknown) => e));
    const next = c.query(insertAfter(0), [tag]).catch((e: unknown) => e);
    expect(await first).toBeInstanceOf(DeadlineExceededError);
    const nextOutcome = await next;
    expect(nextOutcome).toBeInstanceOf(Error);
    expect(nextOutcome).not.toBeInstanceOf(DeadlineExceededError);
    expect(await rowsLike(tag)).toBe(0);
    deadline.dispose();
  });
});

describe('a pool waiter is judged by the deadline of the call that made it, or none', () => {
  it('a connection destroyed inside another request past its deadline: the waiters behind it (no deadline, a later deadline) run', async () => {
    const pool = t.mysql.createPool({ ...CONFIG, connectionLimit: 1 });
    t.cleanups.push(() => new Promise((resolve) => pool.end(resolve)));
    const [none, later] = [randomUUID(), randomUUID()];
    const holder = await new Promise<import('mysql2').PoolConnection>((resolve, reject) => pool.getConnection((err, conn) => (err ? reject(err) : resolve(conn))));
    const insert = (tag: string) => new Promise((resolve) => pool.query(insertAfter(0), [tag], (err) => resolve(err)));
    const waiters = Promise.all([
      insert(none),
      under(openDeadline({ operation: 'later', timeoutMs: 10_000, parent: null }), () => insert(later)),
    ]);
    // The holder's request: its deadline has passed when it gives up its connection.
    under(await passedDeadline(), () => holder.destroy());
    expect(await waiters).toEqual([null, null]);
    expect(await rowsLike(none)).toBe(1);
    expect(await rowsLike(later)).toBe(1);
  });
});

describe('race probes: statements ending around their cutoff, a statement with no deadline right behind', () => {
  const RUNS = 300;

  async function behind<T>(i: number, statement: () => Promise<T>): Promise<T> {
    if (i % 2 === 0) return statement();
    const own = openDeadline({ operation: 'behind', timeoutMs: 10_000, parent: null });
    try {
      return await under(own, statement);
    } finally {
      own.dispose();
    }
  }

  /**
   * RUNS times on `target`: a statement under a 30 ms deadline that sleeps
   * 15 to 45 ms (so about half end before the cutoff, half after, many
   * within the KILL's 20 ms of latency of it), and a statement behind it
   * with no deadline (even runs) or a 10 s one of its own (odd runs: a kill
   * that reached it would come back as a raw 1317, its own deadline not
   * having passed).
   */
  async function probe(target: Target): Promise<{ rows: number; raw: number; failedNext: number }> {
    const prefix = randomUUID();
    let raw = 0;
    let failedNext = 0;
    for (let i = 0; i < RUNS; i++) {
      const sleepS = (15 + ((i * 7) % 31)) / 1000;
      const deadline = openDeadline({ operation: 'probe', timeoutMs: 30, parent: null });
      const first = under(deadline, () => target.query(`SELECT SLEEP(${sleepS}) AS s`).catch((e: unknown) => e));
      const next = behind(i, () => target.query(insertAfter(0.005), [`${prefix}-${i}`]).catch((e: unknown) => e));
      const [outcome, nextOutcome] = await Promise.all([first, next]);
      deadline.dispose();
      if (!isOurs(outcome) || !isOurs(nextOutcome)) raw++;
      if (nextOutcome instanceof Error) failedNext++;
    }
    return { rows: await rowsLike(prefix), raw, failedNext };
  }

  it(`Pool#query, ${RUNS} runs with a KILL path 20 ms slow: every statement with no deadline ran to its end, no raw 1317`, async () => {
    const proxy = await proxied(startLatencyProxy);
    const pool = t.mysqlPromise.createPool({ ...CONFIG, port: proxy.port, connectionLimit: 1 });
    t.cleanups.push(() => pool.end());
    await pool.query('SELECT 1');
    proxy.slowNew(20);
    const counts = await probe(pool);
    expect(counts).toEqual({ rows: RUNS, raw: 0, failedNext: 0 });
  }, 120_000);

  it(`one connection, ${RUNS} runs with a KILL path 20 ms slow: the statement queued behind always ran to its end, no raw 1317`, async () => {
    const proxy = await proxied(startLatencyProxy);
    const c = await t.mysqlPromise.createConnection({ ...CONFIG, port: proxy.port });
    t.cleanups.push(() => c.end().catch(() => {}));
    proxy.slowNew(20);
    const counts = await probe(c);
    expect(counts).toEqual({ rows: RUNS, raw: 0, failedNext: 0 });
  }, 120_000);
});
