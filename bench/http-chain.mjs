// The HTTP chain shared by bench:http and bench:http:instructions, shaped like
// a service's traffic: a front node:http server that reads a JSON body and
// answers JSON, and for each request makes three calls to a back server, each
// with a JSON reply:
// - a `fetch` POST with a JSON body and three headers;
// - an `undici.request` GET with options (method, headers);
// - a node:http `http.request` GET through a keep-alive agent.
// Both servers are in this process. `mode` says what runs around them:
// - 'bare': no OpenTelemetry at all;
// - 'otel': the OpenTelemetry Node SDK with instrumentation-http and
//   instrumentation-undici (which also sees fetch), W3C trace-context and
//   baggage propagators, and a batch span processor with a no-op exporter;
// - 'plugin': 'otel' plus the deadline plugin as the quick start sets it up
//   (DeadlinePropagator, DeadlineSpanProcessor, DeadlineInstrumentation);
// - 'floor': 'otel' plus, not the package, bare stand-ins for the least work
//   the deadline contract itself needs (bench/contract-floor.mjs): the two
//   servers' handlers and the three calls are wrapped by hand.
// Requests carry `x-deadline-remaining-ms`, so with the plugin every hop is
// admitted under a deadline and every outgoing call is guarded.
import { createRequire } from 'node:module';
import { drive } from './socket-driver.mjs';
import * as contractFloor from './contract-floor.mjs';

const require = createRequire(import.meta.url);

export const MODES = Object.freeze(['bare', 'otel', 'plugin', 'floor']);
/** A budget the chain cannot use up, even 100 times slower under valgrind. */
export const BUDGET_MS = 600_000;
/** The body every request to the front carries. */
export const FRONT_BODY = JSON.stringify({ sku: 'A-1042', quantity: 3, note: 'bench' });

/** The SDK and, with the plugin, the deadline pieces, as an application sets them up. */
function startSdk(mode, { exportBatch, exportDelayMs }) {
  const { CompositePropagator, W3CBaggagePropagator, W3CTraceContextPropagator } = require('@opentelemetry/core');
  const { NodeSDK } = require('@opentelemetry/sdk-node');
  const { BatchSpanProcessor } = require('@opentelemetry/sdk-trace-base');
  const { PeriodicExportingMetricReader } = require('@opentelemetry/sdk-metrics');
  const { HttpInstrumentation } = require('@opentelemetry/instrumentation-http');
  const { UndiciInstrumentation } = require('@opentelemetry/instrumentation-undici');
  const lib = mode === 'plugin' ? require('../dist/cjs/src/index.js') : undefined;
  const deadline = lib && new lib.DeadlineInstrumentation();
  const api = require('@opentelemetry/api');
  const floor = mode === 'floor';
  const noopExporter = { export: (_items, done) => done({ code: 0 }), shutdown: async () => {}, forceFlush: async () => {} };
  const sdk = new NodeSDK({
    textMapPropagator: new CompositePropagator({
      propagators: [
        new W3CTraceContextPropagator(),
        new W3CBaggagePropagator(),
        ...(lib ? [new lib.DeadlinePropagator()] : []),
        ...(floor ? [new contractFloor.FloorPropagator(api)] : []),
      ],
    }),
    // Without a reader of its own the SDK would try an OTLP export every 60 s to a collector that is not there.
    metricReaders: [new PeriodicExportingMetricReader({ exporter: noopExporter, exportIntervalMillis: exportDelayMs, exportTimeoutMillis: Math.min(30_000, exportDelayMs) })],
    spanProcessors: [
      ...(lib ? [new lib.DeadlineSpanProcessor()] : []),
      ...(floor ? [new contractFloor.FloorSpanProcessor(api)] : []),
      new BatchSpanProcessor(noopExporter, { maxQueueSize: 65_536, maxExportBatchSize: exportBatch, scheduledDelayMillis: exportDelayMs }),
    ],
    instrumentations: [
      // The instrumentation's request hooks, where this version of the package offers them (the register entry passes them).
      new HttpInstrumentation(deadline?.httpRequestHook ? { requestHook: deadline.httpRequestHook } : {}),
      new UndiciInstrumentation(deadline?.undiciRequestHook ? { requestHook: deadline.undiciRequestHook } : {}),
      ...(deadline ? [deadline] : []),
    ],
  });
  sdk.start();
  return sdk;
}

/** Reads a request's or reply's body as text. */
function readBody(stream) {
  return new Promise((resolve, reject) => {
    let text = '';
    stream.setEncoding('utf8');
    stream.on('data', (chunk) => (text += chunk));
    stream.once('end', () => resolve(text));
    stream.once('error', reject);
  });
}

function answerJson(res, status, value) {
  const body = JSON.stringify(value);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

function listen(http, handler) {
  return new Promise((resolve) => {
    const server = http.createServer(handler);
    // Idle keep-alive connections stay open: under valgrind the process runs 50 to 100 times slower, and a
    // server closing an idle connection just as a client reuses it fails that request (fetch: TypeError).
    server.keepAliveTimeout = 3_600_000;
    server.listen(0, '127.0.0.1', () => resolve(server));
  });
}

/** The back server: creates an order (POST /orders), reads one (GET /orders/:id) and its stock (GET /stock/:sku). */
function backHandler(req, res) {
  if (req.method === 'POST') {
    readBody(req).then(
      (text) => {
        const order = JSON.parse(text);
        answerJson(res, 201, { id: 'o-1', sku: order.sku, quantity: order.quantity, status: 'created' });
      },
      () => answerJson(res, 400, { error: 'bad body' }),
    );
    return;
  }
  req.resume();
  if (req.url.startsWith('/orders/')) answerJson(res, 200, { id: req.url.slice(8), status: 'created', total: 31.5 });
  else answerJson(res, 200, { sku: req.url.slice(7), available: 17 });
}

/**
 * Starts the SDK (unless 'bare') and both servers; resolves with the front
 * server and `close()`. `exportBatch` / `exportDelayMs` set the batch span
 * processor (the instruction count exports full batches of 512 only, no timer).
 */
export async function startChain(mode, { exportBatch = 4_096, exportDelayMs = 5_000 } = {}) {
  if (!MODES.includes(mode)) throw new RangeError(`unknown mode ${mode}: one of ${MODES.join(', ')}`);
  const sdk = mode === 'bare' ? undefined : startSdk(mode, { exportBatch, exportDelayMs });
  // Loaded after the SDK started, so the instrumentations see them.
  const httpClient = require('node:http');
  const undici = require('undici');
  const agent = new httpClient.Agent({ keepAlive: true, maxSockets: 64 });
  // 'floor': each call is watched from before it is made until its reply body is read, and gets the watch's signal.
  const hooks = mode === 'floor' ? contractFloor.floorHooks(require('@opentelemetry/api')) : undefined;
  const serve = hooks ? hooks.serveHttp : (handler) => handler;

  const back = await listen(httpClient, serve(backHandler));
  const backPort = back.address().port;
  const backUrl = `http://127.0.0.1:${backPort}`;
  const getStock = (sku, signal) =>
    new Promise((resolve, reject) => {
      const options = { host: '127.0.0.1', port: backPort, path: `/stock/${sku}`, method: 'GET', agent, headers: { accept: 'application/json' }, signal };
      const req = httpClient.request(options, (reply) =>
        readBody(reply).then((text) => resolve(JSON.parse(text)), reject),
      );
      req.once('error', reject);
      req.end();
    });

  const front = await listen(httpClient, serve(async (req, res) => {
    try {
      const input = JSON.parse(await readBody(req));
      const createWatch = hooks?.startSignalledCall();
      const created = await fetch(`${backUrl}/orders`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json', 'x-request-id': 'bench-1' },
        signal: createWatch?.signal,
        body: JSON.stringify({ sku: input.sku, quantity: input.quantity }),
      });
      const order = await created.json();
      if (createWatch !== undefined) hooks.endCall(createWatch.timer);
      const detailsWatch = hooks?.startSignalledCall();
      const { statusCode, body } = await undici.request(`${backUrl}/orders/${order.id}`, {
        method: 'GET',
        headers: { accept: 'application/json', 'x-request-id': 'bench-1' },
        signal: detailsWatch?.signal,
      });
      const details = await body.json();
      if (detailsWatch !== undefined) hooks.endCall(detailsWatch.timer);
      const stockWatch = hooks?.startSignalledCall();
      const stock = await getStock(input.sku, stockWatch?.signal);
      if (stockWatch !== undefined) hooks.endCall(stockWatch.timer);
      answerJson(res, 200, { order: details.id, status: statusCode === 200 ? details.status : 'unknown', available: stock.available });
    } catch (err) {
      if (!res.headersSent) answerJson(res, 502, { error: err.name });
    }
  }));

  async function close() {
    agent.destroy();
    await Promise.all([front, back].map((server) => new Promise((resolve) => server.close(resolve).closeAllConnections())));
    await sdk?.shutdown();
  }
  return { port: front.address().port, close };
}

/** The workload of bench/callgrind.mjs: `run(count)` sends `count` requests through the chain. */
export async function open(mode) {
  const chain = await startChain(mode, { exportBatch: 512, exportDelayMs: 2 ** 31 - 1 });
  return { run: (count) => drive(chain.port, count, BUDGET_MS, FRONT_BODY), close: chain.close };
}
