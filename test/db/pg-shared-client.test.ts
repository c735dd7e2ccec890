/**
 * A cancel hits only its statement (issue 35 §3, §6, §1): on a shared
 * pg.Client or a pool, a statement queued behind one cut at its cutoff never
 * gets that cut's cancel (57014); a connection whose cancel never settles is
 * ended, never reused; a text of several statements cut in flight is
 * `unknown`. Race windows run hundreds of times and are counted on the
 * server: rows a statement wrote itself, backends named by this file.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { DeadlineExceededError, openDeadline } from '../../src';
import { sleep } from '../helpers/otel';
import { startTcpProxy } from './tcp-proxy';
import { activeWith, createLogTable, eventually, LOG_TABLE, PG_CONFIG, pgConnections, ranOnServer, tag, under, usePgSuite } from './pg-fixture';

const APP = `otel-deadline-shared-${randomUUID().slice(0, 8)}`;

const suite = usePgSuite(createLogTable);
const { pool, client } = pgConnections(suite, APP);

/** B's statement: it writes its row only if it runs to the end, and runs 20 ms, a target for a stray cancel. */
const slowInsert = (value: string, seconds = 0.02): [string, string[]] => [`INSERT INTO ${LOG_TABLE} (tag) SELECT $1 FROM pg_sleep(${seconds})`, [value]];

const codeOf = (err: unknown) => (err as { code?: unknown } | null)?.code;

/**
 * `runs` times: A under a 20 ms budget runs a 15–24 ms statement, so it ends
 * just before, at, or just after its cutoff; B, with no deadline, is made
 * right after it, on the same client or pool. Every B must run to its end:
 * no error, and its row on the server.
 */
async function expectBUntouched(runs: number, runA: (text: string) => Promise<unknown>, runB: (args: [string, string[]]) => Promise<unknown>) {
  const value = tag();
  const codes: unknown[] = [];
  for (let run = 0; run < runs; run += 1) {
    const deadline = openDeadline({ operation: 'a', timeoutMs: 20, parent: null });
    const a = under(deadline, () => runA(`SELECT pg_sleep(${(15 + (run % 10)) / 1000})`).catch((e: unknown) => e));
    const b = runB(slowInsert(value)).then(
      () => undefined,
      (e: unknown) => codeOf(e) ?? String(e),
    );
    await Promise.all([a, b]);
    const code = await b;
    if (code !== undefined) codes.push(code);
    deadline.dispose();
  }
  expect(codes).toEqual([]);
  expect(await ranOnServer(suite.admin, value)).toBe(runs);
}

async function clientThroughProxy(delayCancelMs: number) {
  const proxy = await startTcpProxy(PG_CONFIG.port);
  suite.cleanups.push(() => proxy.close());
  const c = await client({ port: proxy.port });
  // Connections opened from now on (the cancel's) wait before reaching the server.
  proxy.delayNew(delayCancelMs);
  return c;
}

describe('a statement queued behind one cut at its cutoff', () => {
  it('shared Client: in 300 runs of A ending near its cutoff, B (no deadline, queued behind A) never gets 57014 and always writes its row', async () => {
    const c = await client();
    await expectBUntouched(300, (text) => c.query(text), (args) => c.query(...args));
  }, 120_000); // a bound for hundreds of runs of ~50 ms on a loaded machine

  it('Pool#query: in 200 runs, the waiter (no deadline) that gets the cut statement’s connection never gets 57014', async () => {
    const p = pool({ max: 1 });
    await expectBUntouched(200, (text) => p.query(text), (args) => p.query(...args));
  }, 120_000);

  it('a waiter with no deadline handed the connection from inside a cut request’s release runs under no deadline', async () => {
    const p = pool({ max: 1 });
    const value = tag();
    // 300 ms: enough to open the pool's connection on a loaded machine.
    const deadline = openDeadline({ operation: 'holder', timeoutMs: 300, parent: null });
    const held = await under(deadline, () => p.connect());
    const waiter = p.query(...slowInsert(value)); // no deadline: it waits for the held connection
    await sleep(400); // past the holder's cutoff
    // The release hands the connection to the waiter right there, in the holder's context.
    under(deadline, () => held.release());
    expect(await waiter).toBeDefined();
    expect(await ranOnServer(suite.admin, value)).toBe(1);
    deadline.dispose();
  });
});

describe('a slow cancel path', () => {
  it('the cancel takes 1.5 s: A’s result comes at the 1 s grace, and B, sent right after, waits for the cancel and is not cancelled', async () => {
    const c = await clientThroughProxy(1_500);
    const value = tag();
    const deadline = openDeadline({ operation: 'a', timeoutMs: 100, parent: null });
    const a = await under(deadline, () => c.query<{ done: string }>("SELECT pg_sleep(0.25), 'finished' AS done"));
    expect(a.rows[0].done).toBe('finished');
    // B: 1 s on the server, so a cancel arriving 1.5 s after A's cutoff would find it running.
    const b = await c.query(...slowInsert(value, 1)).then(
      () => 'ok',
      (e: unknown) => codeOf(e),
    );
    expect(b).toBe('ok');
    expect(await ranOnServer(suite.admin, value)).toBe(1);
    const span = suite.otel.spans().find((s) => s.attributes['deadline.db.cancel'] === 'too_late')!;
    expect(span.attributes['deadline.outcome']).toBe('completed');
    deadline.dispose();
  });

  it('Pool#query, the cancel takes 1.5 s: the cut connection is not given to the waiter until the cancel has settled', async () => {
    const proxy = await startTcpProxy(PG_CONFIG.port);
    suite.cleanups.push(() => proxy.close());
    const p = pool({ port: proxy.port, max: 1 });
    await p.query('SELECT 1'); // the pool's one connection, opened before the proxy slows down
    proxy.delayNew(1_500);
    const value = tag();
    const deadline = openDeadline({ operation: 'a', timeoutMs: 100, parent: null });
    const a = under(deadline, () => p.query<{ done: string }>("SELECT pg_sleep(0.25), 'finished' AS done"));
    // B waits for the pool's one connection; 1 s on the server once it has it.
    const b = p.query(...slowInsert(value, 1)).then(
      () => 'ok',
      (e: unknown) => codeOf(e),
    );
    expect((await a).rows[0].done).toBe('finished');
    expect(await b).toBe('ok');
    expect(await ranOnServer(suite.admin, value)).toBe(1);
    deadline.dispose();
  });

  it('the cancel never settles: the connection is ended at the bound, B fails without running and never with 57014', async () => {
    const c = await clientThroughProxy(5_000);
    const value = tag();
    const marker = tag();
    const deadline = openDeadline({ operation: 'a', timeoutMs: 100, parent: null });
    const a = await under(deadline, () => c.query<{ done: string }>("SELECT pg_sleep(0.25), 'finished' AS done"));
    expect(a.rows[0].done).toBe('finished');
    const b = await c.query(`INSERT INTO ${LOG_TABLE} (tag) SELECT $1 FROM pg_sleep(5) WHERE '${marker}' <> ''`, [value]).then(
      () => 'ok',
      (e: unknown) => e,
    );
    expect(codeOf(b)).not.toBe('57014');
    expect(b).toBeInstanceOf(Error);
    expect(await activeWith(suite.admin, marker)).toBe(0);
    expect(await ranOnServer(suite.admin, value)).toBe(0);
    deadline.dispose();
  });
});

describe('several statements in one text', () => {
  it('cut in flight after a COMMIT inside the text: the write stands, and the outcome is unknown, not expired with a confirmed cancel', async () => {
    const c = await client();
    const value = tag();
    const deadline = openDeadline({ operation: 'multi', timeoutMs: 200, parent: null });
    const err = await under(deadline, () =>
      c.query(`INSERT INTO ${LOG_TABLE} (tag) VALUES ('${value}'); COMMIT; SELECT pg_sleep(5)`).catch((e: unknown) => e),
    );
    expect(err).toBeInstanceOf(DeadlineExceededError);
    expect(codeOf((err as Error).cause)).toBe('57014');
    expect(await ranOnServer(suite.admin, value)).toBe(1);
    const span = suite.otel.spans().find((s) => s.name === 'pg.query:INSERT test')!;
    expect(span.attributes['deadline.outcome']).toBe('unknown');
    expect(span.attributes['deadline.db.cancel']).not.toBe('confirmed');
    expect(await eventually(() => c.query('SELECT 1').then(() => true), true)).toBe(true);
    deadline.dispose();
  });

  it('a read that holds several statements is unknown too: the first word says nothing of the rest', async () => {
    const c = await client();
    const deadline = openDeadline({ operation: 'multi', timeoutMs: 200, parent: null });
    const err = await under(deadline, () => c.query('SELECT 1; SELECT pg_sleep(5)').catch((e: unknown) => e));
    expect(err).toBeInstanceOf(DeadlineExceededError);
    const span = suite.otel.spans().find((s) => s.name === 'pg.query:SELECT test')!;
    expect(span.attributes['deadline.outcome']).toBe('unknown');
    deadline.dispose();
  });
});
