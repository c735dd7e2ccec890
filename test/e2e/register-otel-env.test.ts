/**
 * The register entry follows OpenTelemetry's own variables: the trace
 * exporters of OTEL_TRACES_EXPORTER and OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL,
 * counted where they arrive; and at exit it waits for them at most
 * OTEL_DEADLINE_SHUTDOWN_TIMEOUT_MS, leaving signal handling to the app.
 * Each case is a real child process. Runs against the build.
 */
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { startGrpcCollector, startHttpCollector, type CountingCollector } from './collectors';
import { node, type Run } from './run-node';

const app = join(__dirname, 'fixtures', 'spans-app.cjs');
const TRACES_JSON = '/v1/traces application/json';
const TRACES_PROTOBUF = '/v1/traces application/x-protobuf';
const TRACES_GRPC = '/opentelemetry.proto.collector.trace.v1.TraceService/Export application/grpc';

let collectors: CountingCollector[] = [];
afterEach(async () => {
  await Promise.all(collectors.map((c) => c.close()));
  collectors = [];
});

async function collector(start: () => Promise<CountingCollector>): Promise<CountingCollector> {
  const started = await start();
  collectors.push(started);
  return started;
}

/** The app under `--require otel-deadline/register`, traces only, to `endpoint`. */
function runApp(mode: 'exit' | 'wait' | 'handler', endpoint: string, env: Record<string, string>, signal = false): Promise<Run> {
  return node(
    ['--require', 'otel-deadline/register', app, mode],
    { OTEL_EXPORTER_OTLP_ENDPOINT: endpoint, OTEL_METRICS_EXPORTER: 'none', OTEL_LOGS_EXPORTER: 'none', ...env },
    signal ? { signalWhen: { stdout: 'ready', signal: 'SIGTERM' } } : {},
  );
}

/** What ConsoleSpanExporter printed: one top-level `traceId:` per span (a parent's is indented deeper). */
function consoleSpans(stdout: string): number {
  return stdout.match(/^ {2}traceId: '[0-9a-f]{32}'/gm)?.length ?? 0;
}

// Hang guards, not speed checks: a child process takes over 20 s on a loaded 2-core machine.
describe('exporters from OTEL_TRACES_EXPORTER and OTEL_EXPORTER_OTLP_*', { timeout: 90_000 }, () => {
  it('otlp by default over http/protobuf, the SDK default', async () => {
    const otlp = await collector(startHttpCollector);
    const run = await runApp('exit', otlp.url, { OTEL_EXPORTER_OTLP_PROTOCOL: '' });
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    expect(Object.keys(otlp.arrivals())).toEqual([TRACES_PROTOBUF]);
  });

  it('console prints the spans, with their deadline attributes, and sends nothing', async () => {
    const otlp = await collector(startHttpCollector);
    const run = await runApp('exit', otlp.url, { OTEL_TRACES_EXPORTER: 'console' });
    expect(run.stderr).toBe('');
    expect(consoleSpans(run.stdout)).toBe(2);
    // The server span ran under the caller's 5 s deadline (the app's own call had none in context).
    expect(run.stdout.match(/'deadline\.budget_ms': 5000,/g)).toHaveLength(1);
    expect(otlp.arrivals()).toEqual({});
  });

  it('none exports nothing, and the app runs as before', async () => {
    const otlp = await collector(startHttpCollector);
    const run = await runApp('exit', otlp.url, { OTEL_TRACES_EXPORTER: 'none' });
    expect(run).toMatchObject({ code: 0, stderr: '' });
    expect(consoleSpans(run.stdout)).toBe(0);
    expect(otlp.arrivals()).toEqual({});
  });

  it('a comma list runs each exporter, OTEL_EXPORTER_OTLP_TRACES_PROTOCOL over OTEL_EXPORTER_OTLP_PROTOCOL', async () => {
    const otlp = await collector(startHttpCollector);
    const run = await runApp('exit', otlp.url, {
      OTEL_TRACES_EXPORTER: 'console, otlp',
      OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc',
      OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/json',
    });
    expect(run.stderr).toBe('');
    expect(consoleSpans(run.stdout)).toBe(2);
    expect(Object.keys(otlp.arrivals())).toEqual([TRACES_JSON]);
  });

  it('grpc sends to an OTLP/gRPC collector', async () => {
    const grpc = await collector(startGrpcCollector);
    const run = await runApp('exit', grpc.url, { OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' });
    expect(run).toMatchObject({ code: 0, stderr: '' });
    expect(Object.keys(grpc.arrivals())).toEqual([TRACES_GRPC]);
  });

  it('an unknown protocol or exporter name: one line each, then what the SDK would do', async () => {
    const otlp = await collector(startHttpCollector);
    const run = await runApp('exit', otlp.url, { OTEL_TRACES_EXPORTER: 'otlp,jaeger', OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/xml' });
    expect(run.code).toBe(0);
    expect(run.stderr.trim().split('\n')).toEqual([
      'otel-deadline/register: OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/xml is not an OTLP protocol (http/protobuf, http/json, grpc); using http/protobuf',
      'otel-deadline/register: OTEL_TRACES_EXPORTER names "jaeger", which is not otlp, console, zipkin or none; skipped',
    ]);
    expect(Object.keys(otlp.arrivals())).toEqual([TRACES_PROTOBUF]);
  });
});

describe('exit with a collector that never answers', { timeout: 90_000 }, () => {
  // The exporter would wait for this long; the test's child is killed after 60 s.
  const patientExporter = { OTEL_EXPORTER_OTLP_TIMEOUT: '120000', OTEL_BSP_EXPORT_TIMEOUT: '120000', OTEL_BSP_SCHEDULE_DELAY: '5000' };
  const dropped = (ms: number): string =>
    `otel-deadline/register: not exported at exit (no answer within ${ms} ms): 2 of 2 spans by otlp (http/json)`;

  it('an app that ends on its own exits after the bound (1 s by default), saying what it dropped', async () => {
    const silent = await collector(() => startHttpCollector({ answer: false }));
    const run = await runApp('exit', silent.url, patientExporter);
    expect(run).toMatchObject({ code: 0, signal: null });
    // Whether the export request itself got through before the exit depends on the machine's load: not checked.
    expect(run.stderr.trim().split('\n')).toEqual([dropped(1000)]);
  });

  it('the bound is OTEL_DEADLINE_SHUTDOWN_TIMEOUT_MS, and the app keeps its exit code', async () => {
    const silent = await collector(() => startHttpCollector({ answer: false }));
    const run = await node(
      ['--require', 'otel-deadline/register', '-e', `require(${JSON.stringify(app)}); process.exitCode = 3`],
      { OTEL_EXPORTER_OTLP_ENDPOINT: silent.url, OTEL_METRICS_EXPORTER: 'none', OTEL_LOGS_EXPORTER: 'none', OTEL_DEADLINE_SHUTDOWN_TIMEOUT_MS: '300', ...patientExporter },
    );
    expect(run).toMatchObject({ code: 3, signal: null });
    expect(run.stderr.trim().split('\n')).toEqual([dropped(300)]);
  });

  it('SIGTERM with no handler of the app: still ends by SIGTERM, after the bound', async () => {
    const silent = await collector(() => startHttpCollector({ answer: false }));
    const run = await runApp('wait', silent.url, patientExporter, true);
    expect(run).toMatchObject({ code: null, signal: 'SIGTERM' });
    expect(run.stderr.trim().split('\n')).toEqual([dropped(1000)]);
  });

  it("SIGTERM with the app's own handler: that handler decides, and the exit flush is bounded", async () => {
    const silent = await collector(() => startHttpCollector({ answer: false }));
    const run = await runApp('handler', silent.url, patientExporter, true);
    expect(run.stdout).toBe('ready\napp handler ran\n');
    expect(run).toMatchObject({ code: 0, signal: null });
    expect(run.stderr.trim().split('\n')).toEqual([dropped(1000)]);
  });
});
