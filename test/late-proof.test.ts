/**
 * "Late means late", proved on real services with one core kept busy: three
 * node:http servers in this process with the real SDK, instrumentation-http
 * and DeadlineInstrumentation, and the machine's PostgreSQL.
 *
 *   caller (sends an 800 ms deadline, waits) → front → api → pg_sleep(3)
 *                                                               → ignorer (scenario B only)
 *
 * At the 800 ms cutoff the package cuts everything: the pg guard cancels
 * pg_sleep on the server (the cancel's round trip ends the pg span after the
 * cutoff), front's client guard destroys its sockets (api and the ignorer see
 * a real client disconnect), and front's handler writes its 504 after the
 * cutoff. None of that is work going on, so no span may be flagged late. In
 * scenario B the ignorer's handler ignores its abort and works 900 ms in a
 * span of its own: exactly that span must be flagged, in process and in
 * `deadline-lineage` reading the trace back from a real Jaeger.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { createRequire } from 'node:module';
import type { AddressInfo } from 'node:net';
import { resolve } from 'node:path';
import { SpanKind, trace } from '@opentelemetry/api';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { registerInstrumentations } from '@opentelemetry/instrumentation';
import { HttpInstrumentation } from '@opentelemetry/instrumentation-http';
import { resourceFromAttributes } from '@opentelemetry/resources';
import type { ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DeadlineInstrumentation, getDeadline } from '../src';
import { traceFromJaeger } from '../examples/demo/from-jaeger.mjs';
import type { RunningJaeger } from '../scripts/jaeger.mjs';
import { activeWith, eventually, PG_CONFIG, requirePg } from './db/pg-fixture';
import { installOtel, sleep, type TestOtel } from './helpers/otel';
import { SKIP_JAEGER, startTestJaeger } from './lineage/helpers/jaeger';
import { runCli, type CliRun } from './lineage/helpers/run-cli';
import { exportAsOtlpJson } from './lineage/helpers/scenario';

const load = createRequire(import.meta.url);
/**
 * The deadline the caller sends front (a caller without the package, writing the header, as
 * curl would): everyone's cutoff. Long enough that pg_sleep is always running when the
 * cutoff comes, on a loaded machine too.
 */
const FRONT_BUDGET_MS = 800;
/** The ignorer works this long past its cutoff: far beyond the 250 ms stop allowance (the processor's and the CLI's). */
const IGNORER_WORK_MS = 900;
/** Runs per scenario. Each takes the 300 ms budget plus the cancel; B also the ignorer's 900 ms. */
const CORRECT_RUNS = 30;
const IGNORER_RUNS = 8;
const BUSY_MS = 300_000;

let otel: TestOtel;
let http: typeof import('node:http');
let pool: import('pg').Pool;
let admin: import('pg').Client;
let busy: ChildProcess | undefined;
const servers: Server[] = [];
const url: Record<string, string> = {};
/** Handlers still running: a run is over when all have settled. */
const running = new Set<Promise<void>>();
const tracer = () => trace.getTracer('late-proof');

async function listen(name: string, handler: (req: IncomingMessage, res: ServerResponse) => Promise<void>): Promise<void> {
  const server = http.createServer((req, res) => {
    const done = handler(req, res).catch(() => {});
    running.add(done);
    void done.finally(() => running.delete(done));
  });
  await new Promise<void>((ready) => server.listen(0, '127.0.0.1', ready));
  servers.push(server);
  url[name] = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

/** GET with node:http; resolves with the status, rejects on a cut. */
function get(target: string, headers: Record<string, string> = {}): Promise<number> {
  return new Promise((resolveStatus, reject) => {
    const req = http.get(target, { headers }, (res) => {
      res.resume();
      res.on('end', () => resolveStatus(res.statusCode ?? 0));
      res.on('error', reject);
    });
    req.on('error', reject);
  });
}

/** Replies unless the caller is gone (a disconnect destroyed the socket). */
function reply(res: ServerResponse, status: number, body: string): void {
  if (res.destroyed) return;
  res.statusCode = status;
  res.end(body);
}

beforeAll(async () => {
  otel = installOtel();
  const deadline = new DeadlineInstrumentation();
  registerInstrumentations({
    instrumentations: [new HttpInstrumentation({ requestHook: deadline.httpRequestHook }), deadline],
  });
  http = load('node:http');
  const pg = requirePg();
  pool = new pg.Pool({ ...PG_CONFIG, application_name: 'otel-deadline-late-proof', max: 4 });
  admin = new pg.Client({ ...PG_CONFIG, application_name: 'otel-deadline-late-proof-admin' });
  await admin.connect();

  await listen('front', (req, res) =>
    tracer().startActiveSpan('ask', async (span) => {
      const query = new URL(req.url ?? '/', 'http://x').searchParams;
      try {
        const calls = [get(`${url.api}/query?marker=${query.get('marker')}`)];
        if (query.get('ignorer') === '1') calls.push(get(`${url.ignorer}/work`));
        await Promise.all(calls);
        reply(res, 200, 'ok');
      } catch (err) {
        // The downstream was cut at the cutoff: answer the caller, as express's error handler would.
        reply(res, 504, (err as Error).name);
      } finally {
        span.end();
      }
    }),
  );
  await listen('api', (req, res) =>
    tracer().startActiveSpan('query', async (span) => {
      const marker = new URL(req.url ?? '/', 'http://x').searchParams.get('marker');
      try {
        await pool.query(`SELECT pg_sleep(3), '${marker}'`);
        reply(res, 200, 'rows');
      } catch (err) {
        reply(res, 504, (err as Error).name);
      } finally {
        span.end();
      }
    }),
  );
  await listen('ignorer', (_req, res) =>
    tracer().startActiveSpan('work', async (span) => {
      // Ignores its deadline's signal: the work goes on IGNORER_WORK_MS past the cutoff.
      await sleep((getDeadline()?.remainingMs() ?? 0) + IGNORER_WORK_MS);
      span.end();
      reply(res, 200, 'done');
    }),
  );

  // Warm: the first request loads modules and opens pg's connection, which is not what this test measures.
  await pool.query('SELECT 1');
  await request(false);
  otel.exporter.reset();

  // One core kept busy for the whole file by a bounded busy loop in a child process.
  busy = spawn(process.execPath, ['-e', `const end = Date.now() + ${BUSY_MS}; while (Date.now() < end) {}`], { stdio: 'ignore' });
}, 30_000);

afterAll(async () => {
  busy?.kill();
  for (const server of servers) await new Promise<void>((done) => server.close(() => done()));
  await pool?.end();
  await admin?.end();
  await otel?.shutdown();
});

interface Run {
  traceId: string;
  spans: ReadableSpan[];
  status: number;
  marker: string;
}

/** One request from the caller; resolves once every handler and span of it has ended. */
async function request(ignorer: boolean): Promise<Run> {
  const marker = `late-proof-${randomUUID()}`;
  let traceId = '';
  const status = await tracer().startActiveSpan('caller', async (span) => {
    traceId = span.spanContext().traceId;
    try {
      return await get(`${url.front}/ask?marker=${marker}&ignorer=${ignorer ? 1 : 0}`, { 'x-deadline-remaining-ms': String(FRONT_BUDGET_MS) });
    } finally {
      span.end();
    }
  });
  while (running.size > 0) await Promise.all([...running]);
  return { traceId, status, marker, spans: otel.spans().filter((s) => s.spanContext().traceId === traceId) };
}

const lateNames = (run: Run) => run.spans.filter((s) => s.attributes['deadline.late'] === true).map((s) => s.name);
const byName = (run: Run, name: string) => run.spans.filter((s) => s.name === name);

/** The cuts this test is about really happened in `run` (else it would prove nothing). */
function expectCorrectCuts(run: Run): void {
  expect(run.status).toBe(504);
  const [pgSpan] = run.spans.filter((s) => s.kind === SpanKind.CLIENT && s.attributes['deadline.db.cancel'] !== undefined);
  expect(pgSpan?.attributes['deadline.outcome']).toMatch(/^(expired|cancelled)$/);
  // front's server span answered its 504 after its cutoff: it has a stop lag, and it is not late.
  const frontParent = byName(run, 'ask')[0]?.parentSpanContext?.spanId;
  const [frontServer] = run.spans.filter((s) => s.kind === SpanKind.SERVER && s.spanContext().spanId === frontParent);
  expect(frontServer?.attributes['deadline.stop_lag_ms']).toBeTypeOf('number');
}

/** The span each server's handler opens, and the service it runs in. */
const HANDLER_SERVICES: Record<string, string | undefined> = { ask: 'front', query: 'api', work: 'ignorer' };

/** Exported copies named by service, so that Jaeger and the CLI show which server each span ran in. */
function asServices(spans: ReadableSpan[]): ReadableSpan[] {
  const byId = new Map(spans.map((s) => [s.spanContext().spanId, s]));
  const handlerOf = new Map<string, string>();
  for (const s of spans) {
    const service = HANDLER_SERVICES[s.name];
    const parent = s.parentSpanContext?.spanId;
    if (service !== undefined) {
      handlerOf.set(s.spanContext().spanId, service);
      if (parent !== undefined) handlerOf.set(parent, service);
    }
  }
  const serviceOf = (s: ReadableSpan): string => {
    for (let at: ReadableSpan | undefined = s; at !== undefined; at = byId.get(at.parentSpanContext?.spanId ?? '')) {
      const found = handlerOf.get(at.spanContext().spanId);
      if (found !== undefined) return found;
    }
    return 'caller';
  };
  return spans.map((s) => Object.create(s, { resource: { value: s.resource.merge(resourceFromAttributes({ 'service.name': serviceOf(s) })) } }) as ReadableSpan);
}

const lastRuns: { correct?: Run; ignorer?: Run } = {};

describe('correct cuts under load carry no late flag, in process', () => {
  it(`pg cancel, client disconnect and a 504 written after the cutoff: 0 late spans in ${CORRECT_RUNS} runs`, async () => {
    const lateSeen: string[] = [];
    for (let i = 0; i < CORRECT_RUNS; i++) {
      const run = await request(false);
      expectCorrectCuts(run);
      lateSeen.push(...lateNames(run));
      lastRuns.correct = run;
      // The cancel reached PostgreSQL: nothing of this run still sleeps there.
      expect(await eventually(() => activeWith(admin, run.marker), 0)).toBe(0);
    }
    expect(lateSeen).toEqual([]);
  }, 120_000);
});

describe('work that ignores its abort is flagged, and only that', () => {
  it(`flags exactly the ignorer's work in each of ${IGNORER_RUNS} runs`, async () => {
    for (let i = 0; i < IGNORER_RUNS; i++) {
      const run = await request(true);
      expectCorrectCuts(run);
      expect(lateNames(run)).toEqual(['work']);
      const work = byName(run, 'work')[0];
      expect(String(work.attributes['deadline.violation']).split(',')).toContain('ended_after_parent');
      expect(work.attributes['deadline.stop_lag_ms']).toBeGreaterThan(IGNORER_WORK_MS / 2);
      lastRuns.ignorer = run;
    }
  }, 120_000);
});

/** The CLI's verdict on the correct-cuts trace and on the ignorer's, however it read them. */
function expectCliVerdicts(good: CliRun, bad: CliRun): void {
  expect(good.stderr).toBe('');
  expect(good.stdout).not.toContain('✗ LATE');
  expect(good.stdout).toMatch(/^summary: 0 late children, [1-9]\d* exceeded, [1-9]\d* aborted, 0 refused$/m);
  expect(good.code).toBe(0);

  expect(bad.stderr).toBe('');
  const flagged = bad.stdout.split('\n').filter((line) => line.includes('✗ LATE'));
  expect(flagged).toHaveLength(1);
  expect(flagged[0]).toMatch(/ignorer: work .*✗ LATE ended_after_parent,ended_after_deadline$/);
  expect(bad.stdout).toMatch(/^summary: 1 late child, /m);
  expect(bad.code).toBe(1);
}

/** docs/lineage.md shows the two outputs side by side: LATE_PROOF_OUT=dir writes them there. */
function keepForDocs(good: CliRun, bad: CliRun, suffix: string): void {
  const out = process.env.LATE_PROOF_OUT;
  if (out === undefined) return;
  mkdirSync(resolve(out), { recursive: true });
  writeFileSync(resolve(out, `correct-cuts${suffix}.txt`), good.stdout);
  writeFileSync(resolve(out, `ignorer${suffix}.txt`), bad.stdout);
}

describe('deadline-lineage on the same traces, from an OTLP/JSON file', () => {
  it('finds no late span in the correct cuts and exactly the ignorer in the other trace', async () => {
    const dir = resolve(__dirname, '.tmp/late-proof');
    mkdirSync(dir, { recursive: true });
    const files = { good: resolve(dir, 'correct-cuts.jsonl'), bad: resolve(dir, 'ignorer.jsonl') };
    await exportAsOtlpJson(asServices(lastRuns.correct!.spans), files.good);
    await exportAsOtlpJson(asServices(lastRuns.ignorer!.spans), files.bad);
    const good = await runCli([files.good, '--fail-on-violation']);
    const bad = await runCli([files.bad, '--fail-on-violation']);
    expectCliVerdicts(good, bad);
    keepForDocs(good, bad, '');
  }, 60_000);
});

describe.skipIf(SKIP_JAEGER)('deadline-lineage reading the same traces back from a real Jaeger', () => {
  let jaeger: RunningJaeger | undefined;
  beforeAll(async () => {
    jaeger = await startTestJaeger();
  }, 60_000);
  afterAll(async () => {
    await jaeger?.stop();
  });

  it('finds no late span in the correct cuts and exactly the ignorer in the other trace', async () => {
    const correct = lastRuns.correct!;
    const ignorer = lastRuns.ignorer!;
    const exporter = new OTLPTraceExporter({ url: `${jaeger!.urls.otlpHttp}/v1/traces` });
    const sent = await new Promise<{ code: number; error?: Error }>((done) => exporter.export(asServices([...correct.spans, ...ignorer.spans]), done));
    await exporter.shutdown();
    expect(sent.error).toBeUndefined();
    const query = jaeger!.urls.query;
    await traceFromJaeger(query, correct.traceId, { minSpans: correct.spans.length, timeoutMs: 30_000 });
    await traceFromJaeger(query, ignorer.traceId, { minSpans: ignorer.spans.length, timeoutMs: 30_000 });

    const good = await runCli([query, '--trace', correct.traceId, '--fail-on-violation']);
    const bad = await runCli([query, '--trace', ignorer.traceId, '--fail-on-violation']);
    expectCliVerdicts(good, bad);
    keepForDocs(good, bad, '-jaeger');
  }, 90_000);
});
