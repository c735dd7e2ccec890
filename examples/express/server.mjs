// An express + pg + fetch service with no deadline code of its own but one
// error handler: run it under the register entry, which reads each request's
// deadline from its headers (or gives it OTEL_DEADLINE_DEFAULT_TIMEOUT_MS),
// passes it on with fetch, and cancels a PostgreSQL statement on the server at
// the cutoff.
//
//   OTEL_TRACES_EXPORTER=console node --import otel-deadline/register examples/express/server.mjs
//   curl -H 'x-deadline-remaining-ms: 500' 'http://127.0.0.1:3000/report/7?work=5'
//
// GET /report/:id?work=<seconds> asks /price/:id of this same service (with
// fetch, so the call carries the deadline), then runs `SELECT pg_sleep(work)`.
import express from 'express';
import pg from 'pg';
import { expressDeadlineErrors, getDeadline } from 'otel-deadline';

const pool = new pg.Pool({
  connectionString: process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test',
  application_name: process.env.PG_APPLICATION_NAME ?? 'otel-deadline-express-example',
});

const app = express();

app.get('/price/:id', (req, res) => {
  // The caller's deadline arrived with the request: how much of it is left here.
  res.json({ id: req.params.id, price: 42, remainingMs: Math.floor(getDeadline()?.remainingMs() ?? -1) });
});

app.get('/report/:id', async (req, res) => {
  const price = await (await fetch(`${selfUrl}/price/${encodeURIComponent(req.params.id)}`)).json();
  const work = Math.min(Number(req.query.work ?? 0.05) || 0, 30);
  await pool.query('SELECT pg_sleep($1)', [work]);
  res.json({ id: req.params.id, price });
});

// A cut statement or call rejects with a deadline error: 504 (or 499) and { code } as JSON.
app.use(expressDeadlineErrors);

const server = app.listen(Number(process.env.PORT ?? 3000), '127.0.0.1');
await new Promise((resolve) => server.once('listening', resolve));
const selfUrl = `http://127.0.0.1:${server.address().port}`;
console.log(`listening on ${selfUrl}`);

process.once('SIGTERM', () => {
  server.close();
  void pool.end();
});
