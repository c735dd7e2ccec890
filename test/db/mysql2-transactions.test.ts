/**
 * mysql2 transactions under a deadline, against the real MariaDB: clean-up
 * is never refused or cut, a refused COMMIT rolls back first, and a pool
 * connection a deadline left in an unknown transaction state never reaches
 * the next request inside that transaction. "Nothing was committed" is read
 * off the balance of an account row in a table only this file uses.
 */
import { randomUUID } from 'node:crypto';
import { context, ROOT_CONTEXT } from '@opentelemetry/api';
import { afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { DeadlineExceededError, openDeadline } from '../../src';
import { passedDeadline, untilPassed } from '../helpers/clock';
import { MYSQL_CONFIG as CONFIG, MYSQL_LOG as LOG, ranOnMysql } from './mysql-fixture';
import { mysqlSuite } from './mysql-suite';
import { under } from './pg-fixture';

const ACCOUNTS = 'otel_deadline_mysql2_tx_accounts';

const t = mysqlSuite();
/** The account this test debits: a row of its own, so parallel files cannot move its balance. */
let account: string;

beforeAll(async () => {
  await t.admin.query(`CREATE TABLE IF NOT EXISTS ${ACCOUNTS} (id varchar(64) PRIMARY KEY, balance int NOT NULL) ENGINE=InnoDB`);
});
beforeEach(async () => {
  account = randomUUID();
  await t.admin.query(`INSERT INTO ${ACCOUNTS} (id, balance) VALUES (?, 1000)`, [account]);
});
afterEach(async () => {
  await t.admin.query(`DELETE FROM ${ACCOUNTS} WHERE id = ?`, [account]);
});

async function balance(): Promise<number> {
  const [rows] = await t.admin.query(`SELECT balance FROM ${ACCOUNTS} WHERE id = ?`, [account]);
  return (rows as { balance: number }[])[0].balance;
}

const debit = `UPDATE ${ACCOUNTS} SET balance = balance - 100 WHERE id = ?`;

function promisePool(): import('mysql2/promise').Pool {
  const pool = t.mysqlPromise.createPool({ ...CONFIG, connectionLimit: 1 });
  t.cleanups.push(() => pool.end());
  return pool;
}

/** Another request, with no deadline, that commits a transaction of its own on the pool's one connection. */
async function nextRequestCommits(pool: import('mysql2/promise').Pool): Promise<{ inTransaction: number }> {
  const conn = await pool.getConnection();
  try {
    const [rows] = await conn.query('SELECT @@in_transaction AS t');
    await conn.beginTransaction();
    await conn.query(`INSERT INTO ${LOG} (tag) VALUES (?)`, [randomUUID()]);
    await conn.commit();
    return { inTransaction: (rows as { t: number }[])[0].t };
  } finally {
    conn.release();
  }
}

function commitSpans() {
  return t.otel.spans().filter((s) => s.attributes['db.system.name'] === 'mysql' && s.name === 'COMMIT');
}

describe('mysql2 transactions at the cutoff', () => {
  it('the documented pattern (promise pool): a COMMIT refused at the cutoff rolls back first; the catch’s rollback() runs; the next request commits nothing of it', async () => {
    const pool = promisePool();
    const deadline = openDeadline({ operation: 'transfer', timeoutMs: 300, parent: null });
    const outcome = await under(deadline, async () => {
      const conn = await pool.getConnection();
      try {
        await conn.beginTransaction();
        await conn.query(debit, [account]);
        await untilPassed(deadline); // the slow step
        await conn.commit();
        return 'committed';
      } catch (err) {
        await conn.rollback(); // must not be refused
        return err;
      } finally {
        conn.release();
      }
    });
    expect(outcome).toBeInstanceOf(DeadlineExceededError);
    expect(await nextRequestCommits(pool)).toEqual({ inTransaction: 0 });
    expect(await balance()).toBe(1000);
    const [commit] = commitSpans();
    expect(commit.attributes['deadline.outcome']).toBe('not_started');
  });

  it('callback API: commit(cb) refused at the cutoff rolls back before the callback; rollback(cb) is never refused', async () => {
    const pool = t.mysql.createPool({ ...CONFIG, connectionLimit: 1 });
    t.cleanups.push(() => new Promise((resolve) => pool.end(resolve)));
    const deadline = openDeadline({ operation: 'transfer', timeoutMs: 300, parent: null });
    const seen = await under(
      deadline,
      () =>
        new Promise<{ commitErr: unknown; inTransaction: number; rollbackErr: unknown }>((resolve, reject) => {
          pool.getConnection((err, conn) => {
            if (err) return reject(err);
            conn.beginTransaction((e1) => {
              if (e1) return reject(e1);
              conn.query(debit, [account], (e2) => {
                if (e2) return reject(e2);
                void untilPassed(deadline).then(() => {
                  conn.commit((commitErr) => {
                    // Asked on the same connection, with no deadline, before anything else: the refusal came after the rollback.
                    context.with(ROOT_CONTEXT, () => conn.query('SELECT @@in_transaction AS t', (e3, rows) => {
                      if (e3) return reject(e3);
                      conn.rollback((rollbackErr) => {
                        conn.release();
                        resolve({ commitErr, inTransaction: (rows as { t: number }[])[0].t, rollbackErr });
                      });
                    }));
                  });
                });
              });
            });
          });
        }),
    );
    expect(seen.commitErr).toBeInstanceOf(DeadlineExceededError);
    expect(seen.inTransaction).toBe(0);
    expect(seen.rollbackErr).toBeNull();
    expect(await balance()).toBe(1000);
  });

  it('a COMMIT refused on a single connection leaves no transaction open on it', async () => {
    const conn = await t.mysqlPromise.createConnection(CONFIG);
    t.cleanups.push(() => conn.end());
    await conn.beginTransaction();
    await conn.query(debit, [account]);
    const deadline = await passedDeadline();
    const err = await under(deadline, () => conn.commit().catch((e: unknown) => e));
    expect(err).toBeInstanceOf(DeadlineExceededError);
    const [rows] = await conn.query('SELECT @@in_transaction AS t');
    expect((rows as { t: number }[])[0].t).toBe(0);
    await conn.query('COMMIT'); // the caller's own commit later commits nothing of it
    expect(await balance()).toBe(1000);
  });

  it('a statement refused inside a transaction, released without a rollback: the connection is rolled back before the pool hands it on', async () => {
    const pool = promisePool();
    const [before] = await pool.query('SELECT CONNECTION_ID() AS id');
    const conn = await pool.getConnection();
    await conn.beginTransaction();
    await conn.query(debit, [account]);
    const deadline = await passedDeadline();
    const err = await under(deadline, () => conn.query(`INSERT INTO ${LOG} (tag) VALUES (?)`, [randomUUID()]).catch((e: unknown) => e));
    expect(err).toBeInstanceOf(DeadlineExceededError);
    conn.release(); // no rollback: the caller's code has none
    expect(await nextRequestCommits(pool)).toEqual({ inTransaction: 0 });
    expect(await balance()).toBe(1000);
    // Rolled back, not destroyed: the same connection serves on.
    const [after] = await pool.query('SELECT CONNECTION_ID() AS id');
    expect((after as { id: number }[])[0].id).toBe((before as { id: number }[])[0].id);
  });

  it('a statement cut by KILL QUERY inside a transaction, released without a rollback: the next request gets no open transaction', async () => {
    const pool = promisePool();
    const conn = await pool.getConnection();
    await conn.beginTransaction();
    await conn.query(debit, [account]);
    const deadline = openDeadline({ operation: 'slow', timeoutMs: 200, parent: null });
    const err = (await under(deadline, () => conn.query('SELECT SLEEP(5)').catch((e: unknown) => e))) as DeadlineExceededError;
    expect(err).toBeInstanceOf(DeadlineExceededError);
    expect((err.cause as { errno?: number }).errno).toBe(1317);
    conn.release();
    expect(await nextRequestCommits(pool)).toEqual({ inTransaction: 0 });
    expect(await balance()).toBe(1000);
  });

  it('Pool#query’s own connection after a cut is rolled back before its next user', async () => {
    const pool = t.mysqlPromise.createPool({ ...CONFIG, connectionLimit: 1, multipleStatements: true });
    t.cleanups.push(() => pool.end());
    const deadline = openDeadline({ operation: 'slow', timeoutMs: 200, parent: null });
    const err = await under(deadline, () => pool.query(`START TRANSACTION; ${debit.replace('?', pool.escape(account))}; SELECT SLEEP(5)`).catch((e: unknown) => e));
    expect(err).toBeInstanceOf(DeadlineExceededError);
    expect(await nextRequestCommits(pool)).toEqual({ inTransaction: 0 });
    expect(await balance()).toBe(1000);
  });
});

describe('mysql2 clean-up is never refused', () => {
  it('ROLLBACK TO SAVEPOINT, rollback(), UNLOCK TABLES and a commented ROLLBACK run under a passed deadline', async () => {
    const conn = await t.mysqlPromise.createConnection(CONFIG);
    t.cleanups.push(() => conn.end());
    const [kept, undone] = [randomUUID(), randomUUID()];
    await conn.beginTransaction();
    await conn.query(`INSERT INTO ${LOG} (tag) VALUES (?)`, [kept]);
    await conn.query('SAVEPOINT s1');
    await conn.query(`INSERT INTO ${LOG} (tag) VALUES (?)`, [undone]);
    const deadline = await passedDeadline();
    await under(deadline, () => conn.query('ROLLBACK TO SAVEPOINT s1'));
    await conn.commit();
    expect(await ranOnMysql(t.admin, kept)).toBe(1);
    expect(await ranOnMysql(t.admin, undone)).toBe(0);

    await conn.beginTransaction();
    await conn.query(debit, [account]);
    await under(deadline, () => conn.rollback());
    await under(deadline, async () => {
      await conn.query(`/* release */ ROLLBACK`);
      await conn.query(`LOCK TABLES ${LOG} READ`).catch(() => undefined); // refused: nothing locked
    });
    await conn.query(`LOCK TABLES ${LOG} READ`);
    await under(deadline, () => conn.query('UNLOCK TABLES'));
    // Unlocked: another connection writes the table at once.
    await t.admin.query(`INSERT INTO ${LOG} (tag) VALUES (?)`, [randomUUID()]);
    expect(await balance()).toBe(1000);
  });
});

describe('mysql2 with multipleStatements', () => {
  it('INSERT …; SELECT SLEEP(2) cut at the cutoff is unknown (the INSERT ran), never expired with a confirmed cancel', async () => {
    const conn = await t.mysqlPromise.createConnection({ ...CONFIG, multipleStatements: true });
    t.cleanups.push(() => conn.end());
    const tag = randomUUID();
    const deadline = openDeadline({ operation: 'multi', timeoutMs: 200, parent: null });
    const err = await under(deadline, () => conn.query(`INSERT INTO ${LOG} (tag) VALUES (${conn.escape(tag)}); SELECT SLEEP(2)`).catch((e: unknown) => e));
    expect(err).toBeInstanceOf(DeadlineExceededError);
    expect(await ranOnMysql(t.admin, tag)).toBe(1);
    const span = t.otel.spans().find((s) => s.attributes['db.system.name'] === 'mysql' && s.name === 'INSERT')!;
    expect(span.attributes['deadline.outcome']).toBe('unknown');
    expect(span.attributes['deadline.db.cancel']).not.toBe('confirmed');
  });

  it('SELECT 1; SELECT SLEEP(2) is unknown too (when unsure, unknown); one statement with a ; in a string is not several', async () => {
    const conn = await t.mysqlPromise.createConnection({ ...CONFIG, multipleStatements: true });
    t.cleanups.push(() => conn.end());
    const deadline = openDeadline({ operation: 'multi', timeoutMs: 200, parent: null });
    await under(deadline, async () => {
      await conn.query('SELECT 1; SELECT SLEEP(2)').catch((e: unknown) => e);
      await untilPassed(deadline);
    });
    const other = openDeadline({ operation: 'single', timeoutMs: 200, parent: null });
    await under(other, () => conn.query("SELECT SLEEP(2), ';x'").catch((e: unknown) => e));
    const outcomes = t.otel
      .spans()
      .filter((s) => s.attributes['db.system.name'] === 'mysql' && s.attributes['deadline.db.cancel'] !== undefined)
      .map((s) => [s.attributes['deadline.outcome'], s.attributes['deadline.db.cancel']]);
    expect(outcomes).toEqual([
      ['unknown', 'unconfirmed'],
      ['expired', 'confirmed'],
    ]);
  });
});
