/**
 * PostgreSQL on 127.0.0.1:5432 (trust auth, database `test`), as
 * .ci/ensure-services.sh starts it. Loads `pg` through require after the
 * instrumentation is registered, as an application does.
 */
import { randomUUID } from 'node:crypto';
import { createRequire } from 'node:module';
import { context } from '@opentelemetry/api';
import { registerInstrumentations } from '@opentelemetry/instrumentation';
import { afterAll, afterEach, beforeAll } from 'vitest';
import { DeadlineInstrumentation, setDeadline, type Deadline } from '../../src';
import { installOtel, type TestOtel } from '../helpers/otel';

export const PG_CONFIG = { host: '127.0.0.1', port: 5432, database: 'test', user: 'postgres' };

export type Pg = typeof import('pg');
export const requirePg = (): Pg => createRequire(import.meta.url)('pg') as Pg;

/** A server-side record of which statements ran: one row per tag, written by the statement itself. */
export const LOG_TABLE = 'otel_deadline_statement_log';

export function tag(): string {
  return randomUUID();
}

export async function createLogTable(admin: import('pg').Client): Promise<void> {
  await admin.query(`CREATE TABLE IF NOT EXISTS ${LOG_TABLE} (tag text NOT NULL, at timestamptz NOT NULL DEFAULT now())`);
}

/** How many statements carrying `tag` reached the server and ran. */
export async function ranOnServer(admin: import('pg').Client, value: string): Promise<number> {
  const { rows } = await admin.query<{ n: string }>(`SELECT count(*) AS n FROM ${LOG_TABLE} WHERE tag = $1`, [value]);
  return Number(rows[0].n);
}

/** Backends still running a statement whose text contains `marker`. */
export async function activeWith(admin: import('pg').Client, marker: string): Promise<number> {
  const { rows } = await admin.query<{ n: string }>(
    `SELECT count(*) AS n FROM pg_stat_activity WHERE state = 'active' AND query LIKE '%' || $1 || '%' AND pid <> pg_backend_pid()`,
    [marker],
  );
  return Number(rows[0].n);
}

export function under<T>(deadline: Deadline, fn: () => T): T {
  return context.with(setDeadline(context.active(), deadline), fn);
}

/** Polls `probe` until it returns `want`, for up to `ms` (a bound for a loaded machine, not an expectation). */
export async function eventually<T>(probe: () => Promise<T>, want: T, ms = 5_000): Promise<T> {
  const end = Date.now() + ms;
  let last = await probe();
  while (last !== want && Date.now() < end) {
    await new Promise((resolve) => setTimeout(resolve, 25));
    last = await probe();
  }
  return last;
}

/** What a pg test file shares: the SDK, the instrumentation, pg, an admin connection, cleanups run after each test. */
export interface PgSuite {
  otel: TestOtel;
  instrumentation: DeadlineInstrumentation;
  pg: Pg;
  admin: import('pg').Client;
  /** Run in reverse order after each test. */
  cleanups: (() => Promise<unknown>)[];
}

/**
 * Registers the hooks of a pg test file (OTel SDK, DeadlineInstrumentation,
 * pg loaded after it, an admin client on which `setUp` runs once) and
 * returns its suite, filled in by beforeAll.
 */
export function usePgSuite(setUp?: (admin: import('pg').Client) => Promise<unknown>, tearDown?: (admin: import('pg').Client) => Promise<unknown>): PgSuite {
  const suite = { cleanups: [] as (() => Promise<unknown>)[] } as PgSuite;
  beforeAll(async () => {
    suite.otel = installOtel();
    suite.instrumentation = new DeadlineInstrumentation();
    registerInstrumentations({ instrumentations: [suite.instrumentation] });
    suite.pg = requirePg();
    suite.admin = new suite.pg.Client(PG_CONFIG);
    await suite.admin.connect();
    await setUp?.(suite.admin);
  });
  afterAll(async () => {
    if (suite.admin !== undefined) await tearDown?.(suite.admin);
    await suite.admin?.end();
    suite.instrumentation.disable();
    await suite.otel.shutdown();
  });
  afterEach(async () => {
    for (const cleanup of suite.cleanups.splice(0).reverse()) await cleanup();
    suite.otel.exporter.reset();
  });
  return suite;
}

/** Clients and pools of a test, named `application` on the server, ended after it. */
export function pgConnections(suite: PgSuite, application: string) {
  return {
    pool(options: import('pg').PoolConfig = {}): import('pg').Pool {
      const p = new suite.pg.Pool({ ...PG_CONFIG, application_name: application, ...options });
      suite.cleanups.push(() => p.end());
      return p;
    },
    async client(options: import('pg').ClientConfig = {}): Promise<import('pg').Client> {
      const c = new suite.pg.Client({ ...PG_CONFIG, application_name: application, ...options });
      await c.connect();
      suite.cleanups.push(() => c.end().catch(() => {}));
      return c;
    },
  };
}
