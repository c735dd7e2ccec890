/**
 * PostgreSQL on 127.0.0.1:5432 (trust auth, database `test`), as
 * .ci/ensure-services.sh starts it. Loads `pg` through require after the
 * instrumentation is registered, as an application does.
 */
import { randomUUID } from 'node:crypto';
import { createRequire } from 'node:module';
import { context } from '@opentelemetry/api';
import { setDeadline, type Deadline } from '../../src';

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
