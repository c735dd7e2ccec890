/**
 * Canaries for the parts of pg 8.x the pg guard reads that pg does not
 * document (docs/internals.md): each checks the private shape itself on a
 * real Client of the installed pg, and its failure names the file to change.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { activeQueryOf, type PgClient, type PgQuery } from '../../instrumentation/db/pg-connection';
import { PG_CONFIG, pgConnections, usePgSuite } from './pg-fixture';

const suite = usePgSuite();
const { client } = pgConnections(suite, `otel-deadline-internals-${randomUUID().slice(0, 8)}`);

describe('pg internals the pg guard relies on (instrumentation/db/pg-query.ts, pg-connection.ts)', () => {
  it('_queryQueue holds what is not sent yet, and pg submits its first entry next when the running statement ends', async () => {
    const c = await client();
    const internal = c as unknown as PgClient;
    const order: string[] = [];
    c.query('SELECT pg_sleep(0.1)', () => order.push('running'));
    const queued = c.query('SELECT 2 AS two').then(() => order.push('queued'));
    expect(Array.isArray(internal._queryQueue), 'pg-query.ts openCut: Client#_queryQueue is gone').toBe(true);
    expect(internal._queryQueue).toHaveLength(1);
    // What CancelBarrier does: first in the queue, it is submitted next and lets pg go on with a Sync.
    const barrier: PgQuery & { handleReadyForQuery(): void } = {
      submit(connection: unknown) {
        order.push('barrier');
        (connection as { sync(): void }).sync();
      },
      handleReadyForQuery: () => order.push('barrier ready'),
      handleError: () => order.push('barrier error'),
    };
    internal._queryQueue!.unshift(barrier);
    await queued;
    expect(order, 'pg-connection.ts CancelBarrier: pg no longer submits _queryQueue[0] next').toEqual(['running', 'barrier', 'barrier ready', 'queued']);
  });

  it('_activeQuery is the Query pg runs, and pg calls the callback found on it when the statement ends', async () => {
    const c = await client();
    const pg = suite.pg;
    let called = '';
    const query = new pg.Query('SELECT pg_sleep(0.05)', [], () => (called = 'original'));
    c.query(query);
    expect(activeQueryOf(c as unknown as PgClient), 'pg-connection.ts activeQueryOf: Client#_activeQuery is gone').toBe(query);
    // What pg-query.ts settleFirst does: pg reads `callback` off the Query when it ends, not a copy taken earlier.
    (query as unknown as { callback: () => void }).callback = () => (called = 'swapped');
    await c.query('SELECT 1');
    expect(called, 'pg-query.ts settleFirst: pg no longer calls Query#callback as found at the end').toBe('swapped');
  });

  it('getTransactionStatus reports the server’s ReadyForQuery status (public since pg 8.x; pg-connection.ts guardedRelease reads it)', async () => {
    const c = await client();
    expect(c.getTransactionStatus()).toBe('I');
    await c.query('BEGIN');
    expect(c.getTransactionStatus()).toBe('T');
    // pg calls a failed statement back on its ErrorResponse, before the ReadyForQuery that follows:
    // the status is read once the next statement (sent after that ReadyForQuery) has answered.
    c.query('SELECT 1/0').catch(() => {});
    await c.query('SELECT 2').catch(() => {});
    expect(c.getTransactionStatus()).toBe('E');
    await c.query('ROLLBACK');
    expect(c.getTransactionStatus()).toBe('I');
  });

  it('pg-pool keeps its waiters in _pendingQueue, and passes over one taken out of it (instrumentation/db/pg-pool.ts PENDING)', async () => {
    const pool = new suite.pg.Pool({ ...PG_CONFIG, max: 1 });
    const internal = pool as unknown as { _pendingQueue?: { timedOut?: boolean }[] };
    const holder = await pool.connect();
    let handed = false;
    pool.connect((err, _client, release) => {
      handed = err === undefined || err === null;
      release?.();
    });
    expect(Array.isArray(internal._pendingQueue), 'pg-pool.ts PENDING: Pool#_pendingQueue is gone').toBe(true);
    expect(internal._pendingQueue, 'pg-pool.ts PENDING: a waiting connect() is no longer queued in _pendingQueue').toHaveLength(1);
    expect(pool.waitingCount).toBe(1);
    // What PoolWait does at the cutoff: the waiter leaves the array, and pg-pool never hands it a connection.
    const [waiter] = internal._pendingQueue!.splice(0, 1);
    waiter!.timedOut = true;
    expect(pool.waitingCount, 'pg-pool.ts PENDING: waitingCount no longer reads _pendingQueue').toBe(0);
    holder.release();
    const next = await pool.connect();
    next.release();
    expect(handed, 'pg-pool.ts PENDING: a waiter taken out of _pendingQueue was still handed a connection').toBe(false);
    expect(pool.totalCount).toBe(1);
    await pool.end();
  });
});
