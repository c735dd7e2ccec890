/**
 * The register entry and the documented NodeSDK setup, each starting a real
 * application as a child process that exports to an OTLP/HTTP receiver run
 * here. Runs against the build (`npm run build`), like an installed package.
 */
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startOtlpReceiver, type OtlpReceiver } from '../../src/lineage/receiver';
import type { LineageSpan } from '../../src/lineage/model';
import { node, root, type Run } from './run-node';

const fixtures = join(__dirname, 'fixtures');
let receiver: OtlpReceiver;

interface AppReport {
  results: { status: number; body: string }[];
  seen: { url: string; counts: Record<string, number> }[];
}

function report(run: Run): AppReport {
  expect(run.stderr).toBe('');
  expect(run.code).toBe(0);
  return JSON.parse(run.stdout.trim().split('\n').at(-1)!) as AppReport;
}

function spansOf(service: string): LineageSpan[] {
  return receiver.spans().filter((s) => s.service === service);
}

/** The downstream saw every deadline header and traceparent exactly once, from undici, fetch and http. */
function expectHeadersOnce(app: AppReport): void {
  expect(app.seen.map((s) => s.url)).toEqual(['/undici', '/fetch', '/http']);
  for (const { counts } of app.seen) {
    expect(counts).toEqual({ 'x-deadline-remaining-ms': 1, 'x-deadline-at-ms': 1, baggage: 1, traceparent: 1 });
  }
}

/** Server and client spans from the http and undici instrumentations carry the deadline attributes. */
function expectDeadlineSpans(service: string): void {
  const spans = spansOf(service);
  const transport = spans.filter((s) => s.kind === 'server' || s.kind === 'client');
  // entry server, three client calls, three downstream servers (and the raw call into entry)
  expect(transport.length).toBeGreaterThanOrEqual(7);
  const withDeadline = transport.filter((s) => s.attributes['deadline.at_ms'] !== undefined);
  expect(withDeadline.length).toBeGreaterThanOrEqual(7);
  for (const span of withDeadline) expect(span.attributes['deadline.outcome']).toBeDefined();
}

beforeAll(async () => {
  if (!existsSync(join(root, 'dist', 'cjs', 'instrumentation', 'register.js')) || !existsSync(join(root, 'dist', 'esm', 'register.mjs'))) {
    throw new Error('run `npm run build` first: these tests start the built register entry');
  }
  receiver = await startOtlpReceiver();
});
afterAll(async () => {
  await receiver.close();
});

// Hang guards, not speed checks: a child process takes over 20 s on a loaded 2-core machine.
describe('otel-deadline/register', { timeout: 90_000 }, () => {
  it('instruments an ESM app under --import, with options from OTEL_DEADLINE_*', async () => {
    const run = await node(['--import', 'otel-deadline/register', join(fixtures, 'app.mjs'), '3000'], {
      OTEL_SERVICE_NAME: 'esm-app',
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
      OTEL_DEADLINE_MAX_INCOMING_MS: '1000',
    });
    const app = report(run);
    const entry = JSON.parse(app.results[0].body);
    expect(entry.operation).toBe('http.server');
    expect(entry.remainingMs).toBeLessThanOrEqual(1_000);
    expectHeadersOnce(app);
    expectDeadlineSpans('esm-app');
  });

  it('instruments a CommonJS app under --require, rejecting early below OTEL_DEADLINE_MIN_USEFUL_MS', async () => {
    const run = await node(['--require', 'otel-deadline/register', join(fixtures, 'app.cjs'), '10000', '2000'], {
      OTEL_SERVICE_NAME: 'cjs-app',
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
      OTEL_DEADLINE_MIN_USEFUL_MS: '5000',
    });
    const app = report(run);
    expect(app.results[0].status).toBe(200);
    expect(app.results[1].status).toBe(504);
    expect(JSON.parse(app.results[1].body)).toMatchObject({ code: 'INSUFFICIENT_BUDGET' });
    expectHeadersOnce(app);
    expectDeadlineSpans('cjs-app');
    const rejected = spansOf('cjs-app').filter((s) => s.kind === 'server' && s.attributes['deadline.outcome'] === 'not_started');
    expect(rejected).toHaveLength(1);
  });

  it('sends no deadline header to a host outside OTEL_DEADLINE_PROPAGATE_TO, by any transport', async () => {
    const run = await node(['--import', 'otel-deadline/register', join(fixtures, 'app.mjs'), '3000'], {
      OTEL_SERVICE_NAME: 'esm-app-propagate-to',
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
      OTEL_DEADLINE_PROPAGATE_TO: 'api.internal,*.svc.cluster.local',
    });
    const app = report(run);
    // The entry still ran under the caller's deadline; only the wire to 127.0.0.1 stays clean.
    expect(JSON.parse(app.results[0].body).operation).toBe('http.server');
    expect(app.seen.map((s) => s.url)).toEqual(['/undici', '/fetch', '/http']);
    for (const { counts } of app.seen) {
      expect(counts).toEqual({ 'x-deadline-remaining-ms': 0, 'x-deadline-at-ms': 0, baggage: 0, traceparent: 1 });
    }
  });

  it.each([
    ['--import', 'OTEL_DEADLINE_MIN_USEFUL_MS', 'soon'],
    ['--import', 'OTEL_DEADLINE_PROPAGATE_TO', 'https://api.internal'],
    ['--require', 'OTEL_DEADLINE_MODE', 'strict'],
  ])('stops at startup under %s with an error naming %s', async (flag, name, value) => {
    const run = await node([flag, 'otel-deadline/register', '-e', 'console.log("app ran")'], { [name]: value });
    expect(run.code).not.toBe(0);
    expect(run.stdout).not.toContain('app ran');
    expect(run.stderr).toContain(`DeadlineEnvError: ${name}`);
  });
});

describe('the documented NodeSDK setup', { timeout: 90_000 }, () => {
  const scratch = join(root, 'test', '.tmp');
  const file = join(scratch, `instrumentation-${process.pid}.mjs`);
  afterAll(() => rmSync(file, { force: true }));

  it('runs as written in docs/instrumentation.md', async () => {
    const docs = readFileSync(join(root, 'docs', 'instrumentation.md'), 'utf8');
    const section = docs.slice(docs.indexOf('### Programmatic setup with NodeSDK'));
    const snippet = /```js\n([\s\S]*?)```/.exec(section)?.[1];
    expect(snippet).toContain('new DeadlineInstrumentation(');
    mkdirSync(scratch, { recursive: true });
    // Inside the repository, so `otel-deadline` resolves to this package.
    writeFileSync(file, snippet!);
    const run = await node(['--import', file, join(fixtures, 'app.mjs'), '3000'], {
      OTEL_SERVICE_NAME: 'sdk-snippet',
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
    });
    const app = report(run);
    expect(JSON.parse(app.results[0].body).remainingMs).toBeLessThanOrEqual(3_000);
    expectHeadersOnce(app);
    expectDeadlineSpans('sdk-snippet');
  });
});
