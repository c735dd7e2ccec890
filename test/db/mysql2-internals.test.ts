/**
 * Canaries for what the mysql2 guard relies on in mysql2's own code
 * (docs/internals.md): each fails, with the file to change in its message,
 * when the installed mysql2 no longer has that shape or behaviour.
 */
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { startOtlpReceiver } from '../../src/lineage/receiver';
import { node, root } from '../e2e/run-node';
import { MYSQL_CONFIG } from './mysql-fixture';

const require = createRequire(import.meta.url);
const mysql = require('mysql2') as typeof import('mysql2');
const mysqlPromise = require('mysql2/promise') as typeof import('mysql2/promise');
const cleanups: (() => Promise<unknown> | void)[] = [];

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

function rawConnection(): import('mysql2').Connection {
  const c = mysql.createConnection(MYSQL_CONFIG);
  cleanups.push(() => new Promise((resolve) => c.end(() => resolve(undefined))));
  return c;
}

describe('mysql2 internals the guard relies on', () => {
  it('PoolConnection (lib/pool_connection.js, the main module’s PoolConnection) is the class of the connections mysql2/promise pools hand out, with release on it (instrumentation/db/mysql2-connection.ts, modules.ts)', async () => {
    // The package's exports hide lib/: the main module re-exports that file's class; the file hook patches it for apps that load only mysql2/promise.
    const PoolConnection = mysql.PoolConnection as unknown as { prototype: { release?: unknown } };
    expect(typeof PoolConnection.prototype.release, 'instrumentation/db/mysql2-connection.ts: release moved').toBe('function');
    const pool = mysqlPromise.createPool({ ...MYSQL_CONFIG, connectionLimit: 1 });
    cleanups.push(() => pool.end());
    const conn = await pool.getConnection();
    expect((conn as unknown as { connection: unknown }).connection, 'modules.ts: mysql2/promise pool connections are no longer lib/pool_connection.js').toBeInstanceOf(PoolConnection as unknown as new () => unknown);
    conn.release();
  });

  it('an app that imports only mysql2/promise: a pool connection released inside a transaction after a refusal is rolled back first (the lib/pool_connection.js hook; runs against the build)', async () => {
    if (!existsSync(join(root, 'dist', 'esm', 'register.mjs'))) throw new Error('run `npm run build` first');
    const receiver = await startOtlpReceiver();
    cleanups.push(() => receiver.close());
    const run = await node(['--import', 'otel-deadline/register', 'test/db/fixtures/mysql2-pool-tx.mjs'], { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url });
    expect(run.stderr).toBe('');
    expect(JSON.parse(run.stdout.trim().split('\n').at(-1)!)).toEqual({ error: 'DeadlineExceededError', nextInTransaction: 0 });
  });

  it('a paused connection delivers no answer and starts no queued command until resume() (instrumentation/db/mysql2.ts)', async () => {
    const c = rawConnection();
    await new Promise((resolve, reject) => c.query('SELECT 1', (err) => (err ? reject(err) : resolve(undefined))));
    const seen: string[] = [];
    c.query('SELECT SLEEP(0.05)', () => seen.push('first'));
    c.query('SELECT 2', () => seen.push('queued'));
    c.pause();
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(seen, 'mysql2.ts: pause() no longer holds answers').toEqual([]);
    c.resume();
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(seen).toEqual(['first', 'queued']);
  });

  it('a command queued behind another has next === null, is not _command, and is skipped when its start returns null (instrumentation/db/mysql2.ts)', async () => {
    const c = rawConnection();
    await new Promise((resolve, reject) => c.query('SELECT 1', (err) => (err ? reject(err) : resolve(undefined))));
    const seen: string[] = [];
    const running = c.query('SELECT SLEEP(0.05)', () => seen.push('running')) as unknown as { next: unknown };
    const queued = c.query('SELECT 2', () => seen.push('queued')) as unknown as { next: unknown; start: unknown; once(e: string, l: () => void): void };
    const internal = c as unknown as { _command: unknown };
    expect(internal._command, 'mysql2.ts: the running command is no longer connection._command').toBe(running);
    expect(queued.next, 'mysql2.ts: a queued command no longer has next === null').toBeNull();
    queued.start = () => null;
    const skipped = new Promise((resolve) => queued.once('end', () => resolve(undefined)));
    await skipped;
    await new Promise((resolve, reject) => c.query('SELECT 3', (err) => (err ? reject(err) : resolve(undefined))));
    expect(seen, 'mysql2.ts: a command whose start returns null is no longer skipped').toEqual(['running']);
  });

  it('a Pool keeps its waiters in _connectionQueue (toArray, removeOne), and passes over one taken out of it (instrumentation/db/mysql2-pool.ts CONNECTION_QUEUE)', async () => {
    const pool = mysql.createPool({ ...MYSQL_CONFIG, connectionLimit: 1 });
    cleanups.push(() => new Promise((resolve) => pool.end(() => resolve(undefined))));
    const holder = await new Promise<import('mysql2').PoolConnection>((resolve, reject) => pool.getConnection((err, c) => (err ? reject(err) : resolve(c))));
    let handed = false;
    const waiter = (err: unknown, c?: { release(): void }) => {
      handed = err === null || err === undefined;
      c?.release();
    };
    pool.getConnection(waiter as never);
    const queue = (pool as unknown as { _connectionQueue?: { toArray(): unknown[]; removeOne(index: number): unknown } })._connectionQueue;
    expect(typeof queue?.toArray, 'mysql2-pool.ts CONNECTION_QUEUE: Pool#_connectionQueue (a Denque) is gone').toBe('function');
    expect(queue!.toArray(), 'mysql2-pool.ts CONNECTION_QUEUE: a waiting getConnection is no longer its callback in _connectionQueue').toHaveLength(1);
    queue!.removeOne(0);
    holder.release();
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(handed, 'mysql2-pool.ts CONNECTION_QUEUE: a waiter taken out of _connectionQueue was still handed a connection').toBe(false);
  });

  it('mysql2/promise loads lib/connection.js, lib/pool.js, lib/pool_connection.js and lib/create_connection.js, with what modules.ts hooks on them', () => {
    const dir = join(require.resolve('mysql2/promise'), '..');
    const lib = (file: string) => require(join(dir, 'lib', file)) as { prototype?: Record<string, unknown> } & ((...a: unknown[]) => unknown);
    const Connection = lib('connection.js');
    for (const method of ['query', 'execute', 'pause', 'resume', 'destroy']) {
      expect(typeof Connection.prototype?.[method] === 'function' || typeof Object.getPrototypeOf(Connection.prototype ?? {})?.[method] === 'function', `modules.ts: lib/connection.js has no ${method}`).toBe(true);
    }
    expect(typeof lib('pool.js').prototype?.getConnection, 'modules.ts: lib/pool.js has no Pool#getConnection').toBe('function');
    expect(typeof lib('create_connection.js'), 'modules.ts: lib/create_connection.js no longer exports createConnection itself').toBe('function');
    expect(lib('pool_connection.js'), 'modules.ts: lib/pool_connection.js is no longer the PoolConnection class').toBe(mysql.PoolConnection);
    // mysql2/promise's own requires, which is why the files are hooked and not only the main module.
    const loaded = Object.keys(require.cache).filter((key) => key.startsWith(join(dir, 'lib')));
    for (const file of ['connection.js', 'pool.js', 'pool_connection.js', 'create_connection.js']) expect(loaded, `modules.ts: mysql2 no longer loads lib/${file}`).toContain(join(dir, 'lib', file));
  });
});
