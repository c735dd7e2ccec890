/**
 * Downstream faults, met through each client transport (global fetch, undici,
 * node:http) with the register entry's setup: the real SDK,
 * instrumentation-http and -undici, and DeadlineInstrumentation. Every
 * downstream is a real loopback server that counts what reaches it:
 *   /hang   accepts the request and never sends headers;
 *   /stall  sends headers and a first chunk, then stalls the body;
 *   /reset  resets the connection (TCP RST) as soon as the request arrives;
 *   /orders accepts a POST, commits it once the client has gone, and answers
 *           a repeat of the same idempotency key with the committed result;
 *   /slow   answers after 50 ms, headers first, then the body (/slow-body) or all at once.
 * The last test closes everything and checks that no socket, timer or listener is left.
 */
import { execFile } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { SpanKind, SpanStatusCode } from '@opentelemetry/api';
import { registerInstrumentations } from '@opentelemetry/instrumentation';
import { HttpInstrumentation } from '@opentelemetry/instrumentation-http';
import { UndiciInstrumentation } from '@opentelemetry/instrumentation-undici';
import type { ReadableSpan } from '@opentelemetry/sdk-trace-base';
import type { Dispatcher } from 'undici';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { context } from '@opentelemetry/api';
import {
  DeadlineExceededError,
  DeadlineInstrumentation,
  getDeadline,
  isDeadlineError,
  openDeadline,
  retryWithinDeadline,
  setDeadline,
  withDeadline,
  type Deadline,
} from '../../src';
import type { DeadlineNode } from '../../src/deadline-node';
import { watchTimers } from '../helpers/timers';
import { installOtel, sleep, type TestOtel } from '../helpers/otel';
import { readBody, requestError, response, startCountingServer, type CountingServer } from '../instrumentation/helpers/servers';

type Transport = 'fetch' | 'undici' | 'http';
const TRANSPORTS: Transport[] = ['fetch', 'undici', 'http'];
const SCOPE: Record<Transport, string> = {
  fetch: '@opentelemetry/instrumentation-undici',
  undici: '@opentelemetry/instrumentation-undici',
  http: '@opentelemetry/instrumentation-http',
};
/** Generous: a loaded 2-core machine must not turn a cutoff into a flake. */
const BUDGET_MS = 500;

const load = createRequire(import.meta.url);
let otel: TestOtel;
let instrumentation: DeadlineInstrumentation;
let http: typeof import('node:http');
let undici: typeof import('undici');
let server: CountingServer;
let timers: ReturnType<typeof watchTimers>;
let baseline: Record<string, number>;
const held: (() => void)[] = [];
/** Idempotency key → committed order id: the downstream's one durable effect. */
const committed = new Map<string, number>();
const pending = new Map<string, Promise<void>>();

function activeResources(): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const name of process.getActiveResourcesInfo()) counts[name] = (counts[name] ?? 0) + 1;
  return counts;
}

function replyJson(res: ServerResponse, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

/** The /orders handler: one commit per idempotency key, however many times it arrives. */
function orders(req: IncomingMessage, res: ServerResponse): void {
  const key = String(req.headers['idempotency-key']);
  const done = committed.get(key);
  if (done !== undefined) return replyJson(res, { orderId: done, replayed: true });
  const inFlight = pending.get(key);
  if (inFlight !== undefined) return void inFlight.then(() => replyJson(res, { orderId: committed.get(key), replayed: true }));
  req.resume();
  // The write commits only after the client has hung up: the worst case for a caller that gave up.
  pending.set(
    key,
    new Promise<void>((resolve) =>
      res.once('close', () => {
        committed.set(key, committed.size + 1);
        pending.delete(key);
        resolve();
      }),
    ),
  );
}

beforeAll(async () => {
  baseline = activeResources();
  timers = watchTimers();
  otel = installOtel();
  instrumentation = new DeadlineInstrumentation();
  registerInstrumentations({
    instrumentations: [
      new HttpInstrumentation({ requestHook: instrumentation.httpRequestHook }),
      new UndiciInstrumentation({ requestHook: instrumentation.undiciRequestHook }),
      instrumentation,
    ],
  });
  // instrumentation-http patches node:http, and ours patches undici, when they are next required.
  http = load('node:http');
  undici = load('undici');
  server = await startCountingServer((req, res) => {
    if (req.url === '/hang') return void held.push(() => res.destroy());
    if (req.url === '/stall') {
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.write('first chunk');
      return void held.push(() => res.destroy());
    }
    if (req.url === '/reset') return void req.socket.resetAndDestroy();
    if (req.url === '/orders') return orders(req, res);
    if (req.url === '/slow') return void setTimeout(() => res.end('slow'), 50);
    if (req.url === '/slow-body') {
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.flushHeaders();
      return void setTimeout(() => res.end('body'), 50);
    }
    res.end('ok');
  });
});
afterAll(async () => {
  held.splice(0).forEach((release) => release());
  timers.restore();
  await server.close();
  instrumentation.disable();
  await otel.shutdown();
});
afterEach(() => {
  held.splice(0).forEach((release) => release());
  server.arrivals.length = 0;
  otel.exporter.reset();
});

interface Reply {
  status: number;
  text(): Promise<string>;
}

/** One call through `transport`, with no signal of its own: only the instrumentation can stop it. */
async function call(transport: Transport, path: string, init: { method?: string; body?: string; headers?: Record<string, string> } = {}): Promise<Reply> {
  const url = `${server.url}${path}`;
  const method = init.method ?? 'GET';
  if (transport === 'fetch') {
    const res = await fetch(url, { method, body: init.body, headers: init.headers });
    return { status: res.status, text: () => res.text() };
  }
  if (transport === 'undici') {
    const res = await undici.request(url, { method: method as 'GET', body: init.body, headers: init.headers });
    return { status: res.statusCode, text: () => res.body.text() };
  }
  const req = http.request(url, { method, headers: init.headers });
  req.end(init.body);
  const res = await response(req);
  return { status: res.statusCode ?? 0, text: () => readBody(res) };
}

function clientSpans(transport: Transport): ReadableSpan[] {
  return otel.spans().filter((s) => s.kind === SpanKind.CLIENT && s.instrumentationScope.name === SCOPE[transport]);
}

/** Runs `fn` under a fresh root deadline and hands back the deadline too, to inspect after it ended. */
async function underDeadline<T>(timeoutMs: number, fn: () => Promise<T>): Promise<{ result: T | Error; deadline: Deadline; ms: number }> {
  let deadline: Deadline | undefined;
  const started = performance.now();
  const result = await withDeadline({ operation: 'caller', timeoutMs, parent: null }, (d) => {
    deadline = d;
    return fn();
  }).catch((err: Error) => err);
  return { result, deadline: deadline!, ms: performance.now() - started };
}

/** Client spans end just after the caller's promise settles; wait for them rather than guess. */
async function endedClientSpans(transport: Transport, count: number): Promise<ReadableSpan[]> {
  for (let i = 0; i < 200 && clientSpans(transport).length < count; i++) await sleep(10);
  return clientSpans(transport);
}

describe.each(TRANSPORTS)('%s: a downstream that', (transport) => {
  it('hangs before sending headers: aborted at the cutoff with DeadlineExceededError, outcome expired', async () => {
    const { result, deadline, ms } = await underDeadline(BUDGET_MS, () => call(transport, '/hang'));
    expect(result).toBeInstanceOf(DeadlineExceededError);
    expect(server.arrivals).toHaveLength(1);
    // Measured from before the open on the deadline's own clock, so never short of the budget (5 ms spare for
    // rounding); /hang never answers, so only the cut ends the call, within 2 s on a loaded machine.
    expect(ms).toBeGreaterThanOrEqual(BUDGET_MS - 5);
    expect(ms).toBeLessThan(BUDGET_MS + 2_000);
    const [span] = await endedClientSpans(transport, 1);
    expect(span.attributes['deadline.outcome']).toBe('expired');
    expect(span.attributes['deadline.abort.code']).toBe('DEADLINE_EXCEEDED');
    // The call let go: nothing waits on the deadline and nothing keeps it armed.
    expect((deadline as DeadlineNode).subscriberCount).toBe(0);
    expect((deadline as DeadlineNode).isArmed).toBe(false);
  });

  it('sends headers, then stalls the body: the body read rejects at the cutoff', async () => {
    let headersAtMs = 0;
    const { result, ms } = await underDeadline(BUDGET_MS, async () => {
      const reply = await call(transport, '/stall');
      headersAtMs = performance.now();
      expect(reply.status).toBe(200);
      return reply.text();
    });
    expect(result).toBeInstanceOf(DeadlineExceededError);
    expect(headersAtMs).toBeGreaterThan(0);
    // As above: /stall never ends its body, so only the cut ends the read.
    expect(ms).toBeGreaterThanOrEqual(BUDGET_MS - 5);
    expect(ms).toBeLessThan(BUDGET_MS + 2_000);
    const [span] = await endedClientSpans(transport, 1);
    expect(span.attributes['deadline.outcome']).toBe('expired');
  });

  it('resets the connection: a transport error at once, not a deadline error, and the deadline untouched', async () => {
    const { result, deadline, ms } = await underDeadline(5_000, () => call(transport, '/reset'));
    expect(result).toBeInstanceOf(Error);
    expect(isDeadlineError(result)).toBe(false);
    const codes = [(result as { code?: string }).code, ((result as Error).cause as { code?: string } | undefined)?.code];
    expect(codes.some((code) => code === 'ECONNRESET' || code === 'UND_ERR_SOCKET')).toBe(true);
    // A reset fails at once; 2.5 s is half the 5 s budget, so the call did not wait for the cutoff.
    expect(ms).toBeLessThan(2_500);
    expect(deadline.aborted).toBe(false);
    // node:http emits 'close' a moment after the reset's 'error'; the call lets go of the deadline then.
    const node = deadline as DeadlineNode;
    for (let i = 0; i < 200 && node.isArmed; i++) await sleep(10);
    expect(node.subscriberCount).toBe(0);
    expect(node.isArmed).toBe(false);
    const [span] = await endedClientSpans(transport, 1);
    expect(span.status.code).toBe(SpanStatusCode.ERROR);
    expect(span.attributes['deadline.abort.code']).toBeUndefined();
    expect(['expired', 'cancelled', 'unknown', 'not_started']).not.toContain(span.attributes['deadline.outcome']);
  });

  it('accepts a POST and the client aborts: outcome unknown, and the retry is deduplicated by its idempotency key', async () => {
    const { result } = await underDeadline(5_000, () =>
      retryWithinDeadline(
        async ({ idempotencyKey }) => {
          // Each attempt runs under its own 400 ms deadline, which the instrumentation enforces.
          expect(getDeadline()?.remainingMs()).toBeLessThanOrEqual(400);
          const reply = await call(transport, '/orders', {
            method: 'POST',
            body: '{"sku":"tea","quantity":1}',
            headers: { 'content-type': 'application/json', 'idempotency-key': idempotencyKey },
          });
          return JSON.parse(await reply.text()) as { orderId: number; replayed: boolean };
        },
        { operation: 'orders.create', attempts: 3, attemptTimeoutMs: 400, backoffMs: 50 },
      ),
    );
    expect(result).toEqual({ orderId: committed.size, replayed: true });
    const keys = server.arrivals.map((a) => a.headers.find(([name]) => name === 'idempotency-key')?.[1]);
    expect(keys).toHaveLength(2);
    expect(keys[1]).toBe(keys[0]);
    // Exactly one committed effect for this key, although the server saw the write twice.
    expect([...committed.keys()].filter((key) => key === keys[0])).toHaveLength(1);
    const spans = await endedClientSpans(transport, 2);
    expect(spans.map((s) => s.attributes['deadline.outcome'])).toEqual(['unknown', 'completed']);
    expect(spans[0].attributes['deadline.abort.code']).toBe('DEADLINE_EXCEEDED');
    const retry = otel.spans().find((s) => s.name === 'orders.create')!;
    expect(retry.events.map((e) => e.attributes?.['deadline.retry.decision'])).toEqual(['retry', 'succeeded']);
  });
});

/** Holds the thread until `ms` past the deadline's cutoff, as a long synchronous step would. */
function blockPastCutoff(deadline: Deadline, ms: number): void {
  const until = (deadline as DeadlineNode).cutoffMono + ms;
  while (performance.now() < until) {
    // busy: no timer runs, not even the deadline's own
  }
}

/**
 * A blocked event loop delays the abort timer. When the thread is blocked
 * inside an I/O callback, what follows in the same turn of the loop still runs
 * before any timer: here the response that frees the only connection, which
 * hands it to a request queued under a deadline whose cutoff passed during the
 * block. The request must not be written then, although its abort timer has
 * not run. bench/load.bench.mjs found both client families doing so, with new
 * connections that complete after the cutoff as well:
 * - node:http, fixed: it reads the deadline's clock when the socket is assigned or connects;
 * - undici (and fetch, which runs the same code in Node's bundled copy) writes
 *   a request queued on a Client as soon as the previous one completes (after
 *   a setImmediate, which still runs before timers), fixed: the instrumentation
 *   reads the deadline's clock in the request's onConnect, which undici calls
 *   right before writing it. A request queued in a
 *   Pool is dispatched later, after the timer, and is not written.
 */
describe('a blocked event loop: a queued request whose socket frees up after its cutoff', () => {
  const BLOCKED_BUDGET_MS = 600;

  it('node:http: is not sent, although its abort timer has not run yet', async () => {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    const queued = openDeadline({ operation: 'queued', timeoutMs: BLOCKED_BUDGET_MS, parent: null });
    try {
      const first = http.get(`${server.url}/slow`, { agent });
      // Waits in the agent's queue: the only socket is busy with the first request.
      const second = context.with(setDeadline(context.active(), queued), () => http.get(`${server.url}/queued`, { agent }));
      const secondError = requestError(second);
      const firstReply = await response(first);
      // Still inside the poll phase that delivered the first response.
      blockPastCutoff(queued, 50);
      firstReply.resume();
      expect(await secondError).toBeInstanceOf(DeadlineExceededError);
      await sleep(100);
      expect(server.arrivals.map((a) => a.url)).toEqual(['/slow']);
    } finally {
      queued.dispose();
      agent.destroy();
    }
  });

  /** A GET queued on `dispatcher` behind one whose body comes 50 ms late, with the loop blocked past its cutoff there. */
  async function queuedBehindBlockedBody(dispatcher: Dispatcher): Promise<void> {
    const queued = openDeadline({ operation: 'queued', timeoutMs: BLOCKED_BUDGET_MS, parent: null });
    try {
      const first = await dispatcher.request({ path: '/slow-body', method: 'GET' });
      // Waits in the dispatcher's queue: one request at a time on its only connection.
      const second = context.with(setDeadline(context.active(), queued), () =>
        dispatcher.request({ path: '/queued', method: 'GET' }).then((r) => r.body.text(), (err: unknown) => err),
      );
      // The body's last chunk is delivered while undici parses it, before the request completes.
      first.body.on('data', () => blockPastCutoff(queued, 50));
      await first.body.text();
      expect(await second).toBeInstanceOf(DeadlineExceededError);
      await sleep(100);
      expect(server.arrivals.map((a) => a.url)).toEqual(['/slow-body']);
    } finally {
      queued.dispose();
      await dispatcher.close();
    }
  }

  it('undici Client: is not sent, although its abort timer has not run yet', () =>
    queuedBehindBlockedBody(new undici.Client(server.url)),
  );

  it('undici Pool: is not sent, although its abort timer has not run yet', () =>
    queuedBehindBlockedBody(new undici.Pool(server.url, { connections: 1 })),
  );
});

/**
 * Node 20's fetch publishes undici's `undici:request:create` inside the
 * fetch() call, before it has set up the controller its abort listener
 * asserts on: a signal that aborts in there killed the process with an
 * AssertionError from node:internal/deps/undici. A subscriber reading the
 * deadline's `aborted` past the cutoff, as the span processor does when
 * instrumentation-undici starts the client span there, aborts the deadline
 * synchronously; bench/load.bench.mjs crashed that way. The instrumentation
 * now arms the call once fetch() has returned. Run in a child process against
 * the built package (npm test builds first), since the failure is a dead process.
 */
describe('a deadline that aborts while fetch() is still setting up', () => {
  // Cold: the request waits for a new connection, so fetch() returns before it is written.
  // Warm: a kept-alive connection is free, and undici may write the request inside fetch() itself.
  it.each(['cold', 'warm'])('rejects the fetch with DeadlineExceededError, never writes it, and the process lives on (%s connection)', async (connection) => {
    const root = fileURLToPath(new URL('../../', import.meta.url));
    const tmp = fileURLToPath(new URL('../.tmp/', import.meta.url));
    mkdirSync(tmp, { recursive: true });
    const file = `${tmp}fetch-setup-abort-${connection}.mjs`;
    writeFileSync(
      file,
      `import diagnosticsChannel from 'node:diagnostics_channel';
       import { createServer } from 'node:http';
       import { context } from '@opentelemetry/api';
       import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
       import { registerInstrumentations } from '@opentelemetry/instrumentation';
       import { DeadlineInstrumentation, openDeadline, setDeadline } from 'otel-deadline';
       context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
       registerInstrumentations({ instrumentations: [new DeadlineInstrumentation()] });
       let arrivals = 0;
       let bytes = 0;
       const server = createServer((req, res) => {
         if (req.url !== '/warm') arrivals++;
         res.end('ok');
       });
       // Counted at the socket: a request cut mid-write never completes its headers, but its bytes would show here.
       server.on('connection', (socket) => socket.on('data', (chunk) => (bytes += chunk.length)));
       await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
       const url = 'http://127.0.0.1:' + server.address().port;
       if (process.env.CONNECTION === 'warm') await (await fetch(url + '/warm')).text();
       const bytesBefore = bytes;
       const deadline = openDeadline({ operation: 'setup', timeoutMs: 200, parent: null });
       diagnosticsChannel.subscribe('undici:request:create', () => {
         while (deadline.remainingMs() > 0);
         void deadline.aborted;
       });
       const outcome = await context
         .with(setDeadline(context.active(), deadline), () => fetch(url + '/'))
         .then(() => 'resolved', (err) => err.name);
       // Give a request that was written anyway the time to arrive before counting.
       await new Promise((resolve) => setTimeout(resolve, 200));
       console.log(outcome, arrivals, bytes - bytesBefore);
       server.close();`,
    );
    const { stdout, stderr } = await promisify(execFile)(process.execPath, [file], {
      cwd: root,
      timeout: 20_000,
      env: { ...process.env, CONNECTION: connection },
    });
    expect(stderr).toBe('');
    // Refused where undici would have written it: the server never saw the request, not one byte of it.
    expect(stdout.trim()).toBe('DeadlineExceededError 0 0');
  });
});

describe('after the faults', () => {
  it('leaves no socket, timer or listener behind once the servers are closed', async () => {
    held.splice(0).forEach((release) => release());
    await server.close();
    // Client sockets see the close a moment later; wait for it rather than guess how long.
    for (let i = 0; i < 200 && JSON.stringify(activeResources()) !== JSON.stringify(baseline); i++) await sleep(10);
    expect(activeResources()).toEqual(baseline);
    // Deadline timers are unref'd, so getActiveResourcesInfo() does not list them: count them directly.
    expect(timers.live()).toBe(0);
    expect(pending.size).toBe(0);
  });
});
