// One statement cancelled on the server at its request's cutoff.
//
//   node --import otel-deadline/register examples/db/cancel.mjs
//
// Needs PostgreSQL on 127.0.0.1:5432 (trust auth, database `test`). The
// register entry hooks `pg` (ESM import included); the request gets 200 ms,
// the statement would take 5 s. Prints one JSON line: what the caller got and
// what pg_stat_activity says afterwards.
import pg from 'pg';
import { withDeadline } from 'otel-deadline';

const config = { host: '127.0.0.1', port: 5432, database: 'test', user: process.env.PGUSER ?? 'postgres' };
const pool = new pg.Pool({ ...config, max: 1 });
const observer = new pg.Client(config); // no deadline: it only looks

await observer.connect();
const started = performance.now();
const error = await withDeadline({ operation: 'monthly-report', timeoutMs: 200, parent: null }, () =>
  pool.query("SELECT pg_sleep(5), 'otel-deadline example'"),
).catch((err) => err);
const settledMs = Math.round(performance.now() - started);

// The server stops the statement; give it a moment to show in pg_stat_activity.
let stillRunning = 1;
for (let i = 0; i < 50 && stillRunning > 0; i++) {
  const { rows } = await observer.query(
    "SELECT count(*)::int AS n FROM pg_stat_activity WHERE state = 'active' AND query LIKE '%otel-deadline example%' AND pid <> pg_backend_pid()",
  );
  stillRunning = rows[0].n;
  if (stillRunning > 0) await new Promise((resolve) => setTimeout(resolve, 20));
}
const { rows } = await pool.query('SELECT 1 AS ok'); // the same pooled connection, reused

console.log(
  JSON.stringify({
    error: error?.name,
    code: error?.code,
    serverCode: error?.cause?.code,
    settledMs,
    stillRunning,
    connectionReused: pool.totalCount === 1 && rows[0].ok === 1,
  }),
);
await observer.end();
await pool.end();
