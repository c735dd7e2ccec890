import { SpanKind } from '@opentelemetry/api';
import type { ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { registerInstrumentations } from '@opentelemetry/instrumentation';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { DeadlineInstrumentation, getDeadline, InsufficientBudgetError, isDeadlineError, retryWithinDeadline, withDeadline } from '../../src';
import { installOtel, type TestOtel } from '../helpers/otel';
import { callKind, loadGrpc, newClient, type CallResult } from './helpers';
import { startRefusingPeer, type RefusingPeer } from './refusing-peer';

/**
 * A → B → C over gRPC. A (this process's client) calls B (a server in this
 * process); B does its work (a counted write) and calls C, an otel-deadline
 * server in another process (the register entry) that refuses calls with
 * less than 10 s left, so it refuses B's. B passes C's error on as handlers
 * do. A must not be told that B never started.
 */

const MIN_USEFUL_MS = 50;

let otel: TestOtel;
let instrumentation: DeadlineInstrumentation;
let grpc: ReturnType<typeof loadGrpc>['grpc'];
let Echo: ReturnType<typeof loadGrpc>['Echo'];
const servers: import('@grpc/grpc-js').Server[] = [];
const clients: { close(): void }[] = [];
let toB: ReturnType<typeof newClient>;
/** B's writes, by the message A sent: each runs once per call B's handler takes. */
const writes = new Map<string, number>();
let c: RefusingPeer;

async function listen(server: import('@grpc/grpc-js').Server): Promise<string> {
  servers.push(server);
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, bound) => (err ? reject(err) : resolve(bound))),
  );
  return `127.0.0.1:${port}`;
}

/**
 * B's work, then its call to C, under B's deadline from A, or, when B does not
 * trust A and runs without one, under a deadline B opens itself. Settles with C's error.
 */
async function writeThenCallC(toC: ReturnType<typeof newClient>, text: string): Promise<CallResult['error']> {
  writes.set(text, (writes.get(text) ?? 0) + 1);
  const call = () => callKind(toC, 'Unary', text);
  const { error } = await (getDeadline() === undefined ? withDeadline({ operation: 'b.own', timeoutMs: 5_000, parent: null }, call) : call());
  return error;
}

beforeAll(async () => {
  otel = installOtel();
  instrumentation = new DeadlineInstrumentation({ minUsefulMs: MIN_USEFUL_MS });
  registerInstrumentations({ instrumentations: [instrumentation] });
  ({ grpc, Echo } = loadGrpc());

  c = await startRefusingPeer(10_000);
  const toC = newClient(grpc, Echo, c.address);
  clients.push(toC);

  const b = new grpc.Server();
  b.addService(Echo.service, {
    Unary(call: { request: { text: string } }, callback: (err: unknown, value?: unknown) => void) {
      void writeThenCallC(toC, call.request.text).then((err) => callback(err, err ? undefined : { text: 'done' }));
    },
    ServerStream(call: { request: { text: string }; emit(event: string, err: unknown): void; end(): void }) {
      void writeThenCallC(toC, call.request.text).then((err) => (err ? call.emit('error', err) : call.end()));
    },
  } as never);
  const bAddress = await listen(b);
  toB = newClient(grpc, Echo, bAddress);
  clients.push(toB);
});

afterAll(async () => {
  for (const client of clients) client.close();
  for (const server of servers) server.forceShutdown();
  instrumentation.disable();
  await otel.shutdown();
  await c.close();
});

/** A's client span of the call it made under its root span `operation`. */
function clientSpanUnder(operation: string, method: string): ReadableSpan {
  const root = otel.span(operation);
  const found = otel
    .spans()
    .filter((s) => s.kind === SpanKind.CLIENT && s.name === method && s.parentSpanContext?.spanId === root.spanContext().spanId);
  expect(found).toHaveLength(1);
  return found[0];
}

/** B's client span of its call to C: the one other client span of the test. */
function bToCSpan(operation: string, method: string): ReadableSpan {
  const aSpan = clientSpanUnder(operation, method);
  const found = otel.spans().filter((s) => s.kind === SpanKind.CLIENT && s !== aSpan);
  expect(found).toHaveLength(1);
  return found[0];
}

describe.each([
  ['Unary', 'callback(err)', 'a trusted caller', 'test.Echo/Unary'],
  ['ServerStream', "call.emit('error', err)", 'a trusted caller', 'test.Echo/ServerStream'],
  // B's admission gives it no deadline: its handler runs outside ServerCallLifecycle.
  ['Unary', 'callback(err)', 'an untrusted caller', 'test.Echo/Unary'],
  ['ServerStream', "call.emit('error', err)", 'an untrusted caller', 'test.Echo/ServerStream'],
] as const)('A → B → C, C refuses, B passes it on through %s (%s), for %s', (kind, _how, caller, method) => {
  const untrusted = caller === 'an untrusted caller';
  beforeEach(() => {
    otel.exporter.reset();
    if (untrusted) instrumentation.setConfig({ minUsefulMs: MIN_USEFUL_MS, trustIncomingGrpc: () => false });
  });
  afterEach(() => instrumentation.setConfig({ minUsefulMs: MIN_USEFUL_MS }));

  it("A's call did reach B and ran there: its span says unknown, never not_started, and its error claims no refusal", async () => {
    const text = `once-${kind}-${caller}`;
    const operation = `a.${kind}.once.${caller}`;
    const { error } = await withDeadline({ operation, timeoutMs: 5_000, parent: null }, () => callKind(toB, kind, text));

    // B did its work once; C refused B's call before running anything, and B's own span says so.
    expect(writes.get(text)).toBe(1);
    expect(bToCSpan(operation, method).attributes['deadline.outcome']).toBe('not_started');

    // What A gets is C's status as B passed it on, not a refusal of A's call by B.
    expect(error?.code).toBe(grpc.status.DEADLINE_EXCEEDED);
    expect(error?.details).toMatch(/INSUFFICIENT_BUDGET/);
    expect((error as { cause?: unknown }).cause).not.toBeInstanceOf(InsufficientBudgetError);
    expect(isDeadlineError(error)).toBe(false);
    expect(error?.metadata?.get('x-deadline-expired')).toEqual(['downstream']);
    const span = clientSpanUnder(operation, method);
    expect(span.attributes['deadline.outcome']).toBe('unknown');
    expect(span.attributes['deadline.abort.code']).toBeUndefined();
  });

  it('retryWithinDeadline does not repeat the call (so B does not write twice)', async () => {
    const text = `retried-${kind}-${caller}`;
    const operation = `a.${kind}.retry.${caller}`;
    let attempts = 0;
    const failure = await withDeadline({ operation, timeoutMs: 5_000, parent: null }, () =>
      retryWithinDeadline(
        async () => {
          attempts++;
          const { error } = await callKind(toB, kind, text);
          if (error) throw error;
        },
        { operation: 'a.retry', attempts: 3, backoffMs: 0 },
      ),
    ).catch((err: unknown) => err);

    expect((failure as { code?: unknown }).code).toBe(grpc.status.DEADLINE_EXCEEDED);
    expect(attempts).toBe(1);
    expect(writes.get(text)).toBe(1);
    const decisions = otel.span('a.retry').events.map((event) => event.attributes?.['deadline.retry.decision']);
    expect(decisions).toEqual(['deadline_expired_reply']);
  });
});
