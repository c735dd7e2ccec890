// The loopback 2-hop chain shared by the HTTP benchmarks: front --undici--> back,
// both node:http servers in this process, under the OpenTelemetry Node SDK with
// the http and undici instrumentations, W3C propagators and a batch span
// processor with a no-op exporter. `parts` says which pieces of the deadline
// plugin are added: 'propagator' (DeadlinePropagator in the global composite),
// 'processor' (DeadlineSpanProcessor) and 'instrumentation' (DeadlineInstrumentation,
// with its request hooks passed to the http and undici instrumentations).
// 'floor' instead adds bare stand-ins for the least work the deadline contract
// itself requires (bench/contract-floor.mjs), for comparison; '-piece' entries
// leave pieces of it out. 'bare' is the same two servers and undici.request
// with no OpenTelemetry at all: what OTel itself adds is the plain chain minus
// this one.
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);

export const ALL_PARTS = Object.freeze(['propagator', 'processor', 'instrumentation']);

/**
 * The batch processor's export interval (the SDK default, 5 s). The
 * instruction-count benchmark runs 100 times slower under valgrind and sets it
 * so high that batches leave only when full: a timer would otherwise fire a
 * varying number of times per run and keep spans alive for varying times.
 */
const EXPORT_DELAY_MS = Number(process.env.BENCH_CHAIN_EXPORT_DELAY_MS ?? 5_000);
/** Spans per export batch; a full batch leaves at once. The instruction count uses the SDK default, 512. */
const EXPORT_BATCH = Number(process.env.BENCH_CHAIN_EXPORT_BATCH ?? 4_096);

/**
 * The pieces of the contract floor left out (bench/contract-floor.mjs), read
 * on every request: the instruction benchmark changes it between segments of
 * one run.
 */
export const floorOmissions = new Set();

/** Starts the SDK and both servers; resolves with the front server's port. */
export async function startChain(parts) {
  const has = (part) => parts.includes(part);
  if (has('bare')) return serveChain(undefined);
  const { CompositePropagator, W3CBaggagePropagator, W3CTraceContextPropagator } = require('@opentelemetry/core');
  const { NodeSDK } = require('@opentelemetry/sdk-node');
  const { BatchSpanProcessor } = require('@opentelemetry/sdk-trace-base');
  const { PeriodicExportingMetricReader } = require('@opentelemetry/sdk-metrics');
  const { HttpInstrumentation } = require('@opentelemetry/instrumentation-http');
  const { UndiciInstrumentation } = require('@opentelemetry/instrumentation-undici');
  const lib = require('../dist/cjs/src/index.js');
  const floor = has('floor') ? await import('./contract-floor.mjs') : undefined;
  // Pieces of the floor left out, as '-piece' entries of `parts` (see contract-floor.mjs).
  const omit = floorOmissions;
  for (const part of parts) if (part.startsWith('-')) omit.add(part.slice(1));
  const floorHooks = floor?.floorHooks(require('@opentelemetry/api'), omit);

  const noopExporter = { export: (_spans, done) => done({ code: 0 }), shutdown: async () => {}, forceFlush: async () => {} };
  // Metrics go to a no-op exporter on the same schedule as spans. Left to the
  // SDK's defaults, an OTLP reader would try to export every 60 s to a
  // collector that is not there: under callgrind a window lasts minutes, so
  // one window paid for a failed export (about 11,000 instructions per
  // request in it) and the next did not.
  const metricReader = new PeriodicExportingMetricReader({
    exporter: noopExporter,
    exportIntervalMillis: EXPORT_DELAY_MS,
    exportTimeoutMillis: Math.min(30_000, EXPORT_DELAY_MS),
  });
  const deadline = has('instrumentation') ? new lib.DeadlineInstrumentation() : undefined;
  const propagators = [new W3CTraceContextPropagator(), new W3CBaggagePropagator()];
  if (has('propagator')) propagators.push(new lib.DeadlinePropagator());
  if (floor) propagators.push(new floor.FloorPropagator(omit));
  const sdk = new NodeSDK({
    textMapPropagator: new CompositePropagator({ propagators }),
    metricReaders: [metricReader],
    spanProcessors: [
      ...(has('processor') ? [new lib.DeadlineSpanProcessor()] : []),
      ...(floor ? [new floor.FloorSpanProcessor(omit)] : []),
      new BatchSpanProcessor(noopExporter, { maxQueueSize: 65_536, maxExportBatchSize: EXPORT_BATCH, scheduledDelayMillis: EXPORT_DELAY_MS }),
    ],
    instrumentations: [
      new HttpInstrumentation(deadline ? { requestHook: deadline.httpRequestHook } : {}),
      new UndiciInstrumentation(deadline ? { requestHook: deadline.undiciRequestHook } : {}),
      ...(deadline ? [deadline] : []),
    ],
  });
  sdk.start();
  return serveChain(floorHooks);
}

/** The two servers, front calling back with undici.request; resolves with the front server's port. */
async function serveChain(floorHooks) {
  const http = require('node:http');
  const undici = require('undici');

  const listen = (handler) =>
    new Promise((resolve) => {
      const server = http.createServer(floorHooks ? floorHooks.serve(handler) : handler);
      server.keepAliveTimeout = 60_000;
      server.listen(0, '127.0.0.1', () => resolve(server));
    });
  const back = await listen((_req, res) => res.end('back'));
  const backUrl = `http://127.0.0.1:${back.address().port}/`;
  const front = await listen(async (_req, res) => {
    const guard = floorHooks?.startCall();
    try {
      const { body } = await undici.request(backUrl);
      res.end(`front+${await body.text()}`);
    } catch (err) {
      res.statusCode = 502;
      res.end(err.name);
    }
    if (guard !== undefined) floorHooks.endCall(guard);
  });
  return front.address().port;
}
