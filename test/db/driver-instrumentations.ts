/**
 * pg, mysql2 and ioredis under DeadlineInstrumentation together with the OTel
 * driver instrumentations (instrumentation-pg, -mysql2, -ioredis), in one
 * registration order per test file (each file is its own process):
 * `otel-first` constructs theirs first, `deadline-first` ours.
 * The deadline behaviour is the same as without them (refusals counted on the
 * server, cancels seen on the server), and the outcome lands on the driver
 * instrumentation's span, with no second span of ours beside it.
 */
import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { createRequire } from 'node:module';
import { IORedisInstrumentation } from '@opentelemetry/instrumentation-ioredis';
import { MySQL2Instrumentation } from '@opentelemetry/instrumentation-mysql2';
import { PgInstrumentation } from '@opentelemetry/instrumentation-pg';
import type { ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { context, trace } from '@opentelemetry/api';
import { suppressTracing } from '@opentelemetry/core';
import { DeadlineCancelledError, DeadlineExceededError, DeadlineInstrumentation, InsufficientBudgetError, openDeadline, setDeadline, type ManagedDeadline } from '../../src';
import { passedDeadline } from '../helpers/clock';
import { isOwnWrapper } from '../../instrumentation/wrap';
import { installOtel, type TestOtel } from '../helpers/otel';
import { createMysqlLog, MYSQL_CONFIG, MYSQL_LOG, ranOnMysql, runningOnMysql } from './mysql-fixture';
import { activeWith, createLogTable, eventually, LOG_TABLE, PG_CONFIG, ranOnServer, tag, under } from './pg-fixture';
import { BUSY_1S, commandCalls, expectReleasedAfterEnd, holdLoop } from './redis-fixture';

export type RegistrationOrder = 'deadline-first' | 'otel-first';

const OURS = 'otel-deadline/instrumentation';
const SCOPES = {
  pg: '@opentelemetry/instrumentation-pg',
  mysql2: '@opentelemetry/instrumentation-mysql2',
  ioredis: '@opentelemetry/instrumentation-ioredis',
};
/**
 * How long a statement cut at a 200 ms cutoff may take to settle: the issue's
 * bound is 500 ms, widened for a loaded 2-core machine; the statements
 * themselves would take 5 s.
 */
const SETTLED_WITHIN_MS = 2_000;

function scopeOf(span: ReadableSpan): string {
  return span.instrumentationScope.name;
}

export function driverInstrumentationSuite(order: RegistrationOrder): void {
  let otel: TestOtel;
  let deadline: DeadlineInstrumentation;
  let pg: typeof import('pg');
  let mysql: typeof import('mysql2/promise');
  let Redis: typeof import('ioredis').default;
  let pgAdmin: import('pg').Client;
  let mysqlAdmin: import('mysql2/promise').Connection;
  let redisAdmin: InstanceType<typeof Redis>;
  let pgInstrumentation: PgInstrumentation;
  const cleanups: (() => unknown)[] = [];
  /**
   * Whose wrapper a driver call meets first. Registration order decides it,
   * but how differs between instrumentation versions (instrumentation-pg
   * patches twice, at pg/lib/client.js and at pg), so it is read off the method.
   * When ours is outermost, a refused statement never reaches theirs and the
   * one span is ours.
   */
  const refusalScope = (method: unknown, theirs: string) => (isOwnWrapper(method, deadline) ? OURS : theirs);

  beforeAll(async () => {
    otel = installOtel();
    // Instrumentations enable themselves when constructed, and the first to
    // hook a module patches it first (innermost): construction order decides.
    deadline = new DeadlineInstrumentation({ enabled: order === 'deadline-first' });
    pgInstrumentation = new PgInstrumentation({ requestHook: deadline.pgRequestHook });
    new MySQL2Instrumentation();
    // requireParentSpan: these commands are made outside any span (an app's usually run under its server span).
    new IORedisInstrumentation({ requestHook: deadline.ioredisRequestHook, requireParentSpan: false });
    if (order === 'otel-first') deadline.enable();
    const load = createRequire(import.meta.url);
    pg = load('pg');
    mysql = load('mysql2/promise');
    Redis = (load('ioredis') as { default: typeof Redis }).default;
    pgAdmin = new pg.Client(PG_CONFIG);
    await pgAdmin.connect();
    await createLogTable(pgAdmin);
    mysqlAdmin = await mysql.createConnection(MYSQL_CONFIG);
    await createMysqlLog(mysqlAdmin);
    redisAdmin = new Redis({ host: '127.0.0.1', port: 6379 });
    otel.exporter.reset();
  });
  afterAll(async () => {
    await pgAdmin?.end();
    await mysqlAdmin?.end();
    redisAdmin?.disconnect();
    deadline.disable();
    await otel.shutdown();
  });
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
    otel.exporter.reset();
    deadline.setConfig({});
  });

  /** One driver's spans started under a deadline (the admin connections' statements run without one). */
  function spansOf(system: string): ReadableSpan[] {
    return otel.spans().filter((span) => span.attributes['db.system.name'] === system && span.attributes['deadline.at_ms'] !== undefined);
  }

  /** Exactly one span named `name` for the statement, from the driver instrumentation unless said otherwise. */
  function onlySpan(system: string, name: string, scope: string): ReadableSpan {
    const found = spansOf(system).filter((span) => span.name === name);
    expect(found.map(scopeOf)).toEqual([scope]);
    return found[0];
  }

  describe('pg with instrumentation-pg', () => {
    async function client(): Promise<import('pg').Client> {
      const c = new pg.Client(PG_CONFIG);
      await c.connect();
      cleanups.push(() => c.end());
      return c;
    }

    it('refuses an expired statement: nothing reaches the server, one span says not_started', async () => {
      const c = await client();
      otel.exporter.reset();
      const value = tag();
      const passed = await passedDeadline();
      const err = await under(passed, () => c.query(`INSERT INTO ${LOG_TABLE} (tag) VALUES ($1)`, [value]).catch((e: unknown) => e));
      expect(err).toBeInstanceOf(DeadlineExceededError);
      expect(await ranOnServer(pgAdmin, value)).toBe(0);
      const span = onlySpan('postgresql', 'pg.query:INSERT test', refusalScope(c.query, SCOPES.pg));
      expect(span.attributes['deadline.outcome']).toBe('not_started');
      expect(span.attributes['deadline.abort.code']).toBe('DEADLINE_EXCEEDED');
    });

    it('refuses below minUsefulMs with InsufficientBudgetError: not_started, never completed', async () => {
      const c = await client();
      otel.exporter.reset();
      deadline.setConfig({ minUsefulMs: 60_000 });
      const value = tag();
      const short = openDeadline({ operation: 'short', timeoutMs: 5_000, parent: null });
      const err = await under(short, () => c.query(`INSERT INTO ${LOG_TABLE} (tag) VALUES ($1)`, [value]).catch((e: unknown) => e));
      short.dispose();
      expect(err).toBeInstanceOf(InsufficientBudgetError);
      expect(await ranOnServer(pgAdmin, value)).toBe(0);
      const span = onlySpan('postgresql', 'pg.query:INSERT test', refusalScope(c.query, SCOPES.pg));
      expect(span.attributes['deadline.outcome']).toBe('not_started');
      expect(span.attributes['deadline.abort.code']).toBe('INSUFFICIENT_BUDGET');
    });

    it('cancels SELECT pg_sleep(5) on the server at the cutoff; the outcome is on instrumentation-pg’s span', async () => {
      const c = await client();
      otel.exporter.reset();
      const marker = tag();
      const cut = openDeadline({ operation: 'sleep', timeoutMs: 200, parent: null });
      const started = performance.now();
      const err = (await under(cut, () => c.query(`SELECT pg_sleep(5), '${marker}'`).catch((e: unknown) => e))) as DeadlineExceededError;
      const elapsed = performance.now() - started;
      expect(err).toBeInstanceOf(DeadlineExceededError);
      expect((err.cause as { code?: string }).code).toBe('57014');
      expect(elapsed).toBeLessThan(SETTLED_WITHIN_MS);
      expect(await eventually(() => activeWith(pgAdmin, marker), 0)).toBe(0);
      const span = onlySpan('postgresql', 'pg.query:SELECT test', SCOPES.pg);
      expect(span.attributes['deadline.outcome']).toBe('expired');
      expect(span.attributes['deadline.db.cancel']).toBe('confirmed');
      expect(span.attributes['deadline.abort.code']).toBe('DEADLINE_EXCEEDED');
      expect((await c.query('SELECT 1 AS one')).rows[0].one).toBe(1); // the connection is still usable
    });

    it('a statement that finishes before its cutoff is completed on instrumentation-pg’s span', async () => {
      const c = await client();
      otel.exporter.reset();
      const roomy = openDeadline({ operation: 'quick', timeoutMs: 10_000, parent: null });
      await under(roomy, () => c.query('SELECT 1'));
      roomy.dispose();
      const span = onlySpan('postgresql', 'pg.query:SELECT test', SCOPES.pg);
      expect(span.attributes['deadline.outcome']).toBe('completed');
    });
  });

  describe('mysql2 with instrumentation-mysql2', () => {
    async function connection(): Promise<import('mysql2/promise').Connection> {
      const c = await mysql.createConnection(MYSQL_CONFIG);
      cleanups.push(() => c.end());
      return c;
    }
    const ran = (value: string) => ranOnMysql(mysqlAdmin, value);
    const running = (marker: string) => runningOnMysql(mysqlAdmin, marker);

    it('refuses an expired statement: nothing reaches the server, one span says not_started', async () => {
      const c = await connection();
      otel.exporter.reset();
      const value = randomUUID();
      const passed = await passedDeadline();
      const err = await under(passed, () => c.query(`INSERT INTO ${MYSQL_LOG} (tag) VALUES (?)`, [value]).catch((e: unknown) => e));
      expect(err).toBeInstanceOf(DeadlineExceededError);
      expect(await ran(value)).toBe(0);
      const span = onlySpan('mysql', 'INSERT', refusalScope((c as unknown as { connection: { query: unknown } }).connection.query, SCOPES.mysql2));
      expect(span.attributes['deadline.outcome']).toBe('not_started');
      expect(span.attributes['deadline.abort.code']).toBe('DEADLINE_EXCEEDED');
    });

    it('Pool#query refused while asking for a connection: nothing sent, no statement span, the pool still works', async () => {
      const pool = mysql.createPool({ ...MYSQL_CONFIG, connectionLimit: 1 });
      cleanups.push(() => pool.end());
      await pool.query('SELECT 1');
      otel.exporter.reset();
      const value = randomUUID();
      const passed = await passedDeadline();
      const err = await under(passed, () => pool.query(`INSERT INTO ${MYSQL_LOG} (tag) VALUES (?)`, [value]).catch((e: unknown) => e));
      expect(err).toBeInstanceOf(DeadlineExceededError);
      expect(await ran(value)).toBe(0);
      // Refused at Pool#getConnection: no connection, so no statement for either instrumentation to record.
      expect(spansOf('mysql')).toEqual([]);
      const [rows] = await pool.query('SELECT 2 AS two');
      expect((rows as { two: number }[])[0].two).toBe(2);
    });

    it('refuses below minUsefulMs with InsufficientBudgetError: not_started, never completed', async () => {
      const c = await connection();
      otel.exporter.reset();
      deadline.setConfig({ minUsefulMs: 60_000 });
      const value = randomUUID();
      const short = openDeadline({ operation: 'short', timeoutMs: 5_000, parent: null });
      const err = await under(short, () => c.query(`INSERT INTO ${MYSQL_LOG} (tag) VALUES (?)`, [value]).catch((e: unknown) => e));
      short.dispose();
      expect(err).toBeInstanceOf(InsufficientBudgetError);
      expect(await ran(value)).toBe(0);
      const span = onlySpan('mysql', 'INSERT', refusalScope((c as unknown as { connection: { query: unknown } }).connection.query, SCOPES.mysql2));
      expect(span.attributes['deadline.outcome']).toBe('not_started');
      expect(span.attributes['deadline.abort.code']).toBe('INSUFFICIENT_BUDGET');
    });

    it('KILL QUERY stops SELECT SLEEP(5) at the cutoff; the outcome is on instrumentation-mysql2’s span', async () => {
      const c = await connection();
      otel.exporter.reset();
      const marker = randomUUID();
      const cut = openDeadline({ operation: 'sleep', timeoutMs: 200, parent: null });
      const started = performance.now();
      const err = (await under(cut, () => c.query(`SELECT SLEEP(5), '${marker}'`).catch((e: unknown) => e))) as DeadlineExceededError;
      const elapsed = performance.now() - started;
      expect(err).toBeInstanceOf(DeadlineExceededError);
      expect((err.cause as { errno?: number }).errno).toBe(1317);
      expect(elapsed).toBeLessThan(SETTLED_WITHIN_MS);
      expect(await eventually(() => running(marker), 0)).toBe(0);
      const span = onlySpan('mysql', 'SELECT', SCOPES.mysql2);
      expect(span.attributes['deadline.outcome']).toBe('expired');
      expect(span.attributes['deadline.db.cancel']).toBe('confirmed');
      expect(span.attributes['deadline.abort.code']).toBe('DEADLINE_EXCEEDED');
    });

    it('a statement that finishes before its cutoff is completed on instrumentation-mysql2’s span', async () => {
      const c = await connection();
      otel.exporter.reset();
      const roomy = openDeadline({ operation: 'quick', timeoutMs: 10_000, parent: null });
      await under(roomy, () => c.query('SELECT 1'));
      roomy.dispose();
      const span = onlySpan('mysql', 'SELECT', SCOPES.mysql2);
      expect(span.attributes['deadline.outcome']).toBe('completed');
    });
  });

  describe('ioredis with instrumentation-ioredis', () => {
    function client(): InstanceType<typeof Redis> {
      const c = new Redis({ host: '127.0.0.1', port: 6379 });
      cleanups.push(() => c.disconnect());
      return c;
    }
    const calls = (name: string) => commandCalls(redisAdmin, name);

    // The span processor looks at the deadline as instrumentation-ioredis's span starts, and a guard under
    // that span goes by its look: each way a command is refused must still hold, a cancellation with time
    // left on the clock included.
    const refusals: [string, () => Promise<ManagedDeadline>, new (...args: never[]) => Error, string][] = [
      ['under an expired deadline', () => passedDeadline(), DeadlineExceededError, 'DEADLINE_EXCEEDED'],
      [
        'below minUsefulMs',
        async () => {
          deadline.setConfig({ minUsefulMs: 60_000 });
          return openDeadline({ operation: 'short', timeoutMs: 5_000, parent: null });
        },
        InsufficientBudgetError,
        'INSUFFICIENT_BUDGET',
      ],
      [
        'under a cancelled deadline with time left',
        async () => {
          const controller = new AbortController();
          const cancelled = openDeadline({ operation: 'cancelled', timeoutMs: 60_000, parent: null, signal: controller.signal });
          controller.abort(new Error('caller went away'));
          return cancelled;
        },
        DeadlineCancelledError,
        'CANCELLED',
      ],
    ];
    it.each(refusals)('refuses a command %s: nothing reaches the server, one span says not_started', async (_, open, errorClass, code) => {
      const c = client();
      await c.ping();
      const before = await calls('incrbyfloat');
      otel.exporter.reset();
      const refusing = await open();
      const err = await under(refusing, () => c.incrbyfloat(`otel-deadline:${randomUUID()}`, 1).catch((e: unknown) => e));
      refusing.dispose();
      expect(err).toBeInstanceOf(errorClass);
      expect(await calls('incrbyfloat')).toBe(before);
      const span = onlySpan('redis', 'incrbyfloat', refusalScope(c.sendCommand, SCOPES.ioredis));
      expect(span.attributes['deadline.outcome']).toBe('not_started');
      expect(span.attributes['deadline.abort.code']).toBe(code);
    });

    it('a write in flight at the cutoff rejects with DeadlineExceededError; unknown on instrumentation-ioredis’s span', async () => {
      const c = client();
      const blocker = client();
      await Promise.all([c.ping(), blocker.ping()]);
      otel.exporter.reset();
      const busy = blocker.eval(BUSY_1S, 0);
      const cut = openDeadline({ operation: 'set', timeoutMs: 200, parent: null });
      const err = await under(cut, () => c.set(`otel-deadline:${randomUUID()}`, 'v').catch((e: unknown) => e));
      await busy;
      expect(err).toBeInstanceOf(DeadlineExceededError);
      const span = onlySpan('redis', 'set', SCOPES.ioredis);
      expect(span.attributes['deadline.outcome']).toBe('unknown');
      expect(span.attributes['deadline.db.cancel']).toBe('not_possible');
      expect(span.attributes['deadline.abort.code']).toBe('DEADLINE_EXCEEDED');
      expect(await c.ping()).toBe('PONG'); // the late reply was dropped in order
    });

    it('a command ioredis rejects before it returns (connection closed) releases the deadline at once', async () => {
      await expectReleasedAfterEnd(client());
    });

    it('BLPOP 0 is clamped to the budget on the wire: the server answers at the cutoff', async () => {
      const c = client();
      await c.ping();
      otel.exporter.reset();
      const cut = openDeadline({ operation: 'blpop', timeoutMs: 300, parent: null });
      const started = performance.now();
      const result = await under(cut, () => c.blpop(`otel-deadline:${randomUUID()}`, 0).catch((e: unknown) => e));
      expect(result === null || result instanceof DeadlineExceededError).toBe(true);
      expect(performance.now() - started).toBeLessThan(SETTLED_WITHIN_MS); // timeout 0 would block forever
      const span = onlySpan('redis', 'blpop', SCOPES.ioredis);
      // The server's nil at the clamped timeout (completed), or our cutoff first: BLPOP pops, so a
      // reply we drop may have carried an element, and that is unknown.
      expect(span.attributes['deadline.outcome']).toBe(result === null ? 'completed' : 'unknown');
    });

    it('a reply read after the clock passed the cutoff, before its timer ran, is delivered and completed on one span', async () => {
      const c = client();
      const id = String(await c.client('ID'));
      otel.exporter.reset();
      const cut = openDeadline({ operation: 'blpop', timeoutMs: 100, parent: null });
      const reply = under(cut, () => c.blpop(`otel-deadline:${randomUUID()}`, 0).catch((e: unknown) => e));
      // Block the event loop from a timer callback that runs before the cutoff, until the clock has
      // passed the cutoff and the server has answered (its nil at the clamped 0.1 s): libuv runs the
      // timers due when the iteration began, then polls, so the reply is read in this iteration and
      // the cutoff timer only in the next. instrumentation-ioredis ends its span on that reply.
      const blockedOnServer = () => /\bflags=b\b/.test(execFileSync('redis-cli', ['-h', '127.0.0.1', '-p', '6379', 'CLIENT', 'LIST', 'ID', id], { encoding: 'utf8' }));
      await new Promise<void>((resolve) =>
        setTimeout(() => {
          while (!cut.expired || blockedOnServer());
          resolve();
        }, 0),
      );
      const result = await reply;
      cut.dispose();
      expect(result).toBeNull();
      const span = onlySpan('redis', 'blpop', SCOPES.ioredis);
      expect(span.attributes['deadline.outcome']).toBe('completed');
    });

    it('auto-pipelining: a caller whose deadline passes before its batch is written is released alone; unknown on instrumentation-ioredis’s span', async () => {
      const c = new Redis({ host: '127.0.0.1', port: 6379, enableAutoPipelining: true });
      cleanups.push(() => c.disconnect());
      await c.ping();
      otel.exporter.reset();
      const keys = Array.from({ length: 21 }, () => `otel-deadline:${randomUUID()}`);
      const cut = openDeadline({ operation: 'first', timeoutMs: 30, parent: null });
      // The first caller's context is the one the batch's setImmediate runs in.
      const first = under(cut, () => c.incr(keys[0]!).catch((e: unknown) => e));
      const others = Promise.all(keys.slice(1).map((key) => c.incr(key)));
      holdLoop(60); // its deadline passes before the batch is written
      expect(await first).toBeInstanceOf(DeadlineExceededError);
      expect(await others).toEqual(keys.slice(1).map(() => 1));
      const outcomes = otel.spans().filter((s) => s.instrumentationScope.name === SCOPES.ioredis).map((s) => s.attributes['deadline.outcome']);
      expect(outcomes.filter((o) => o !== undefined)).toEqual(['unknown']);
      expect(await redisAdmin.get(keys[0]!)).toBe('1'); // it went out with its batch
      await redisAdmin.del(...keys);
    });
  });

  describe('calls left untouched, and the spans the hooks hand over', () => {
    /**
     * context.active() calls made while `run` runs, minus those the same calls
     * make with DeadlineInstrumentation disabled (its wrappers then pass
     * straight through and its hooks do nothing): what the deadline layer
     * itself reads. The driver instrumentations read the context too, the
     * same in both runs. The manager is reached through the API's private
     * accessor: counting its reads is what this test is about.
     */
    async function ourContextReads(run: () => Promise<unknown>): Promise<number> {
      const manager = (context as unknown as { _getContextManager(): { active(): unknown } })._getContextManager();
      const active = manager.active;
      let reads = 0;
      manager.active = function counted(this: unknown) {
        reads++;
        return active.call(this);
      };
      try {
        await run(); // warm: connections open, pools hold an idle client
        reads = 0;
        await run();
        const enabled = reads;
        deadline.disable();
        try {
          await run();
          reads = 0;
          await run();
        } finally {
          deadline.enable();
        }
        return enabled - reads;
      } finally {
        manager.active = active;
      }
    }

    it('a statement made with no deadline active costs one context read of ours, for each driver call', async () => {
      const pgClient = new pg.Client(PG_CONFIG);
      await pgClient.connect();
      const pgPool = new pg.Pool({ ...PG_CONFIG, max: 1 });
      const mysqlConnection = await mysql.createConnection(MYSQL_CONFIG);
      const mysqlPool = mysql.createPool({ ...MYSQL_CONFIG, connectionLimit: 1 });
      const redis = new Redis({ host: '127.0.0.1', port: 6379 });
      cleanups.push(() => pgClient.end(), () => pgPool.end(), () => mysqlConnection.end(), () => mysqlPool.end(), () => redis.disconnect());
      // Every connection ready before counting: a handshake running meanwhile would count its own reads.
      await redis.ping();
      const reads = {
        'pg Client#query': await ourContextReads(() => pgClient.query('SELECT 1')),
        'pg Pool#query': await ourContextReads(() => pgPool.query('SELECT 1')),
        'mysql2 query': await ourContextReads(() => mysqlConnection.query('SELECT 1')),
        'mysql2 pool query': await ourContextReads(() => mysqlPool.query('SELECT 1')),
        'ioredis get': await ourContextReads(() => redis.get('otel-deadline:untouched')),
      };
      expect(reads).toEqual({ 'pg Client#query': 1, 'pg Pool#query': 1, 'mysql2 query': 1, 'mysql2 pool query': 1, 'ioredis get': 1 });
    });

    it('a guarded command reads the context once, on whichever side instrumentation-ioredis wraps', async () => {
      const redis = new Redis({ host: '127.0.0.1', port: 6379 });
      cleanups.push(() => redis.disconnect());
      await redis.ping();
      const budget = openDeadline({ operation: 'reads', timeoutMs: 60_000, parent: null });
      cleanups.push(() => budget.dispose());
      // How many watchers the deadline has while each GET is in flight: a guarded command's is one.
      const watching: number[] = [];
      const reads = await ourContextReads(() =>
        under(budget, () => {
          const reply = redis.get('otel-deadline:guarded');
          watching.push((budget as unknown as { subscriberCount: number }).subscriberCount);
          return reply;
        }),
      );
      expect(reads).toBe(1);
      // Guarded all the same while enabled (two runs), untouched while disabled (two runs).
      expect(watching).toEqual([1, 1, 0, 0]);
    });

    it('a command passed through under a deadline leaves no span for the next guarded one', async () => {
      const c = new Redis({ host: '127.0.0.1', port: 6379 });
      cleanups.push(() => c.disconnect());
      await c.ping();
      otel.exporter.reset();
      const passed = await passedDeadline();
      // Exporter-like traffic (suppressed tracing), and a driver switched off: our wrapper leaves both alone.
      await context.with(suppressTracing(setDeadline(context.active(), passed)), () => c.get('otel-deadline:suppressed'));
      deadline.setConfig({ ioredis: false });
      await under(passed, () => c.strlen('otel-deadline:switched-off'));
      deadline.setConfig({});
      const err = await under(passed, () => c.get('otel-deadline:refused').catch((e: unknown) => e));
      expect(err).toBeInstanceOf(DeadlineExceededError);
      const span = onlySpan('redis', 'get', refusalScope(c.sendCommand, SCOPES.ioredis));
      expect(span.attributes['deadline.outcome']).toBe('not_started');
    });

    it('instrumentation-pg’s own SET application_name does not take the span announced for the statement', async () => {
      const c = new pg.Client(PG_CONFIG);
      await c.connect();
      cleanups.push(() => c.end());
      pgInstrumentation.setConfig({ ...pgInstrumentation.getConfig(), enableTraceContextPropagation: true });
      cleanups.push(() => pgInstrumentation.setConfig({ ...pgInstrumentation.getConfig(), enableTraceContextPropagation: false }));
      const value = tag();
      const cut = openDeadline({ operation: 'insert', timeoutMs: 200, parent: null });
      await under(cut, () => trace.getTracer('test').startActiveSpan('request', async (parent) => {
        const err = await c.query(`INSERT INTO ${LOG_TABLE} (tag) SELECT $1::text FROM pg_sleep(5)`, [value]).catch((e: unknown) => e);
        parent.end();
        expect(err).toBeInstanceOf(DeadlineExceededError);
      }));
      const span = onlySpan('postgresql', 'pg.query:INSERT test', SCOPES.pg);
      expect(span.attributes['deadline.outcome']).toBe('expired');
      expect(span.attributes['deadline.db.cancel']).toBe('confirmed');
      expect(await ranOnServer(pgAdmin, value)).toBe(0);
    });
  });
}
