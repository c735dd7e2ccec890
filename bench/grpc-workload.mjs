// The gRPC workload shared by bench:grpc and bench:grpc:instructions: a
// grpc-js server and a client calling it over loopback in one process, under
// the OpenTelemetry Node SDK with instrumentation-grpc on both sides, W3C
// propagators and a batch span processor with a no-op exporter. `mode` says
// what of the deadline plugin is added:
// - 'without': nothing;
// - 'contract': the deadline propagator and span processor, calls under an
//   active deadline, no DeadlineInstrumentation: what the deadline contract
//   costs on instrumentation-grpc's own spans and metadata;
// - 'with': the same plus DeadlineInstrumentation: the client clamps, writes
//   the deadline metadata and guards each call, the server admits each call
//   and runs the handler under the deadline;
// - 'floor': not the package: bare stand-ins for the least work the deadline
//   contract itself needs (bench/contract-floor.mjs), calls under a
//   deadline as in 'contract', for comparison.
// Every mode passes a `deadline` option of its own to each call, as gRPC
// callers usually do.
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const require = createRequire(import.meta.url);
export const MODES = Object.freeze(['without', 'with', 'contract', 'floor']);
export const CONCURRENCY = 32;
const PROTO = fileURLToPath(new URL('../test/grpc/fixtures/echo.proto', import.meta.url));

/**
 * Starts the SDK, a server and a client; resolves with `batch(calls, mark?)`,
 * which runs `calls` unary calls, CONCURRENCY in flight, and `close()`.
 * `budgetMs` is both the batch's deadline and each call's own `deadline`
 * option: long enough that none is cut. `exportBatch` / `exportDelayMs` set
 * the batch span processor's batch size and timer. `mark(done)`, if given, is
 * called after each completed call with the count so far.
 */
export async function startGrpc(mode, { budgetMs = 60_000, exportBatch = 4_096, exportDelayMs } = {}) {
  const withPlugin = mode === 'with';
  const withFloor = mode === 'floor';
  const withContract = mode === 'with' || mode === 'contract';
  const api = require('@opentelemetry/api');
  const { CompositePropagator, W3CBaggagePropagator, W3CTraceContextPropagator } = require('@opentelemetry/core');
  const { NodeSDK } = require('@opentelemetry/sdk-node');
  const { BatchSpanProcessor } = require('@opentelemetry/sdk-trace-base');
  const { PeriodicExportingMetricReader } = require('@opentelemetry/sdk-metrics');
  const { GrpcInstrumentation } = require('@opentelemetry/instrumentation-grpc');
  const lib = require('../dist/cjs/src/index.js');
  const floor = withFloor ? await import('./contract-floor.mjs') : undefined;
  const hooks = floor?.floorHooks(api);

  const noopExporter = { export: (_spans, done) => done({ code: 0 }), shutdown: async () => {}, forceFlush: async () => {} };
  const propagators = [new W3CTraceContextPropagator(), new W3CBaggagePropagator()];
  if (withContract) propagators.push(new lib.DeadlinePropagator());
  if (floor) propagators.push(new floor.FloorPropagator(api));
  const sdk = new NodeSDK({
    textMapPropagator: new CompositePropagator({ propagators }),
    // Without a reader of its own the SDK would try an OTLP export every 60 s of wall-clock time to a collector
    // that is not there: under callgrind that lands in a counted window at random, with the recompiling it sets off.
    metricReaders: [new PeriodicExportingMetricReader({ exporter: noopExporter, exportIntervalMillis: exportDelayMs ?? 60_000, exportTimeoutMillis: Math.min(30_000, exportDelayMs ?? 60_000) })],
    spanProcessors: [
      ...(withContract ? [new lib.DeadlineSpanProcessor()] : []),
      ...(floor ? [new floor.FloorSpanProcessor(api)] : []),
      new BatchSpanProcessor(noopExporter, {
        maxQueueSize: 65_536,
        maxExportBatchSize: exportBatch,
        ...(exportDelayMs === undefined ? {} : { scheduledDelayMillis: exportDelayMs }),
      }),
    ],
    instrumentations: [new GrpcInstrumentation(), ...(withPlugin ? [new lib.DeadlineInstrumentation()] : [])],
  });
  sdk.start();
  // Loaded after the SDK started, so both instrumentations see it.
  const grpc = require('@grpc/grpc-js');
  const protoLoader = require('@grpc/proto-loader');
  const { Echo } = grpc.loadPackageDefinition(protoLoader.loadSync(PROTO, { keepCase: true })).test;

  const server = new grpc.Server();
  const handler = (call, callback) => callback(null, { text: call.request.text });
  server.addService(Echo.service, { Unary: hooks ? hooks.serveGrpc(handler) : handler });
  const port = await new Promise((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, bound) => (err ? reject(err) : resolve(bound))),
  );
  const client = new Echo(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
  const unary = hooks
    ? () =>
        new Promise((resolve, reject) => {
          const timer = hooks.startCall();
          client.Unary({ text: 'ping' }, { deadline: Date.now() + budgetMs }, (err) => {
            if (timer !== undefined) hooks.endCall(timer);
            if (err) reject(err);
            else resolve();
          });
        })
    : () =>
        new Promise((resolve, reject) =>
          client.Unary({ text: 'ping' }, { deadline: Date.now() + budgetMs }, (err) => (err ? reject(err) : resolve())),
        );

  async function batch(calls, mark) {
    let started = 0;
    let done = 0;
    const worker = async () => {
      while (started < calls) {
        started++;
        await unary();
        done++;
        mark?.(done);
      }
    };
    const run = () => Promise.all(Array.from({ length: CONCURRENCY }, worker));
    if (floor) return api.context.with(floor.withFloorDeadline(api, api.context.active(), budgetMs), run);
    if (!withContract) return run();
    // The calls of a request that has a deadline: one per batch, never reached.
    const deadline = lib.openDeadline({ operation: 'batch', timeoutMs: budgetMs, parent: null });
    try {
      await api.context.with(lib.setDeadline(api.context.active(), deadline), run);
    } finally {
      deadline.dispose();
    }
  }

  async function close() {
    client.close();
    server.forceShutdown();
    await sdk.shutdown();
  }
  return { batch, close };
}

/** The workload of bench/callgrind.mjs: `CONFIG` is a mode; calls carry a budget valgrind's slowdown cannot use up. */
export async function open(mode) {
  if (!MODES.includes(mode)) throw new RangeError(`unknown mode ${mode}: one of ${MODES.join(', ')}`);
  const { batch, close } = await startGrpc(mode, { budgetMs: 3_600_000, exportBatch: 512, exportDelayMs: 2 ** 31 - 1 });
  return { run: (count) => batch(count), close };
}
