/**
 * A request's deadline stays with that request's own statements. Two ways it
 * could leak into other requests' work, each with the three drivers:
 * - a socket runs every event in the async context it was created in: a
 *   connection opened inside a request would run its handshake and every
 *   later callback under that request's deadline;
 * - pg-pool and mysql2's pool call a waiter back inside whichever request
 *   released the connection.
 * Each test makes the leaked deadline a dead one (passed, or aborted), so
 * that a statement judged by it would be refused; each statement's result
 * comes from the server, so it ran.
 */
import { createRequire } from 'node:module';
import { registerInstrumentations } from '@opentelemetry/instrumentation';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { DeadlineInstrumentation, openDeadline, type ManagedDeadline } from '../../src';
import { passedDeadline } from '../helpers/clock';
import { installOtel, type TestOtel } from '../helpers/otel';
import { MYSQL_CONFIG } from './mysql-fixture';
import { PG_CONFIG, requirePg, under, type Pg } from './pg-fixture';

type Callback<T> = (err: unknown, result?: T) => void;
type MysqlConnection = {
  query(sql: string, cb: Callback<unknown[]>): void;
  release(): void;
  end(cb?: () => void): void;
};
type MysqlPool = {
  query(sql: string, cb: Callback<unknown[]>): void;
  getConnection(cb: Callback<MysqlConnection>): void;
  end(cb?: () => void): void;
};

let otel: TestOtel;
let instrumentation: DeadlineInstrumentation;
let pg: Pg;
let mysql: { createConnection(config: object): MysqlConnection; createPool(config: object): MysqlPool };
let Redis: typeof import('ioredis').default;
const cleanups: (() => unknown)[] = [];

beforeAll(() => {
  otel = installOtel();
  instrumentation = new DeadlineInstrumentation();
  registerInstrumentations({ instrumentations: [instrumentation] });
  const load = createRequire(import.meta.url);
  pg = requirePg();
  mysql = load('mysql2');
  Redis = (load('ioredis') as { default: typeof Redis }).default;
});
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  otel.exporter.reset();
});
afterAll(async () => {
  instrumentation.disable();
  await otel.shutdown();
});

/** A deadline that is alive until `kill()`: then every statement judged by it is refused with DeadlineCancelledError. */
function killableDeadline(): { deadline: ManagedDeadline; kill(): void } {
  const controller = new AbortController();
  const deadline = openDeadline({ operation: 'other-request', timeoutMs: 60_000, parent: null, signal: controller.signal });
  return { deadline, kill: () => controller.abort(new Error('the other request left')) };
}

/** `run(cb)` as a promise of what reached the callback: the error, or the result. */
function settled<T>(run: (cb: Callback<T>) => void): Promise<unknown> {
  return new Promise((resolve) => run((err, result) => resolve(err ?? result)));
}

describe('a connection opened inside a request does not carry its deadline', () => {
  it('pg Client#connect: a statement made in a later callback runs', async () => {
    const client = new pg.Client(PG_CONFIG);
    await under(await passedDeadline(), () => client.connect());
    cleanups.push(() => client.end());
    const second = await settled<import('pg').QueryResult>((cb) => client.query('SELECT 1', () => client.query('SELECT 2 AS two', cb)));
    expect((second as import('pg').QueryResult).rows).toEqual([{ two: 2 }]);
  });

  it('pg-pool: a connection the pool opened for one request serves the next one’s callbacks', async () => {
    const pool = new pg.Pool({ ...PG_CONFIG, max: 1 });
    cleanups.push(() => pool.end());
    const first = killableDeadline();
    await under(first.deadline, () => pool.query('SELECT 1'));
    first.kill();
    const second = await settled<import('pg').QueryResult>((cb) => pool.query('SELECT 1', () => pool.query('SELECT 2 AS two', cb)));
    expect((second as import('pg').QueryResult).rows).toEqual([{ two: 2 }]);
  });

  it('ioredis connect: the handshake and the commands queued behind it run', async () => {
    const redis = new Redis({ host: '127.0.0.1', port: 6379, lazyConnect: true, maxRetriesPerRequest: 0 });
    cleanups.push(() => redis.disconnect());
    const errors: unknown[] = [];
    redis.on('error', (err: unknown) => errors.push(err));
    // The connect starts inside the request; the next command waits in the offline queue for the handshake.
    const connecting = under(await passedDeadline(), () => redis.connect());
    const queued = redis.ping();
    await connecting;
    expect(await queued).toBe('PONG');
    expect(redis.status).toBe('ready');
    expect(errors).toEqual([]);
  });

  it('mysql2 createConnection: a statement made in a later callback runs', async () => {
    const connection = under(await passedDeadline(), () => mysql.createConnection(MYSQL_CONFIG));
    cleanups.push(() => new Promise((resolve) => connection.end(() => resolve(undefined))));
    const second = await settled<unknown[]>((cb) => connection.query('SELECT 1', () => connection.query('SELECT 2 AS two', cb)));
    expect(second).toEqual([{ two: 2 }]);
  });

  it('mysql2 pool: a connection the pool opened for one request serves the next one’s callbacks', async () => {
    const pool = mysql.createPool({ ...MYSQL_CONFIG, connectionLimit: 1 });
    cleanups.push(() => new Promise((resolve) => pool.end(() => resolve(undefined))));
    const first = killableDeadline();
    await under(first.deadline, () => settled((cb) => pool.query('SELECT 1', cb)));
    first.kill();
    const second = await settled<unknown[]>((cb) => pool.query('SELECT 1', () => pool.query('SELECT 2 AS two', cb)));
    expect(second).toEqual([{ two: 2 }]);
  });
});

describe('a pool waiter is called back in its own context, not the releaser’s', () => {
  it('pg Pool#query with no deadline, handed a client released inside another request', async () => {
    const pool = new pg.Pool({ ...PG_CONFIG, max: 1 });
    cleanups.push(() => pool.end());
    const holder = await pool.connect();
    const waiting = settled<import('pg').QueryResult>((cb) => pool.query('SELECT 1 AS one', cb));
    under(await passedDeadline(), () => holder.release());
    expect(((await waiting) as import('pg').QueryResult).rows).toEqual([{ one: 1 }]);
  });

  it('pg Pool#connect(callback) with no deadline: the statement its callback makes runs', async () => {
    const pool = new pg.Pool({ ...PG_CONFIG, max: 1 });
    cleanups.push(() => pool.end());
    const holder = await pool.connect();
    const waiting = settled<import('pg').QueryResult>((cb) =>
      pool.connect((err, client, release) => {
        if (err) return cb(err);
        client!.query('SELECT 1 AS one', (queryErr, result) => {
          release();
          cb(queryErr, result);
        });
      }),
    );
    under(await passedDeadline(), () => holder.release());
    expect(((await waiting) as import('pg').QueryResult).rows).toEqual([{ one: 1 }]);
  });

  it('mysql2 pool.query with no deadline, handed a connection released inside another request', async () => {
    const pool = mysql.createPool({ ...MYSQL_CONFIG, connectionLimit: 1 });
    cleanups.push(() => new Promise((resolve) => pool.end(() => resolve(undefined))));
    const holder = (await settled<MysqlConnection>((cb) => pool.getConnection(cb))) as MysqlConnection;
    const waiting = settled<unknown[]>((cb) => pool.query('SELECT 1 AS one', cb));
    under(await passedDeadline(), () => holder.release());
    expect(await waiting).toEqual([{ one: 1 }]);
  });

  it('mysql2 getConnection(callback) with no deadline: the statement its callback makes runs', async () => {
    const pool = mysql.createPool({ ...MYSQL_CONFIG, connectionLimit: 1 });
    cleanups.push(() => new Promise((resolve) => pool.end(() => resolve(undefined))));
    const holder = (await settled<MysqlConnection>((cb) => pool.getConnection(cb))) as MysqlConnection;
    const waiting = settled<unknown[]>((cb) =>
      pool.getConnection((err, connection) => {
        if (err) return cb(err);
        // Later, not at once: the callback's own context must be the caller's.
        setImmediate(() =>
          connection!.query('SELECT 1 AS one', (queryErr, rows) => {
            connection!.release();
            cb(queryErr, rows);
          }),
        );
      }),
    );
    under(await passedDeadline(), () => holder.release());
    expect(await waiting).toEqual([{ one: 1 }]);
  });
});
