import net from 'node:net';
import { context } from '@opentelemetry/api';
import { registerInstrumentations } from '@opentelemetry/instrumentation';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DeadlineInstrumentation, openDeadline, setDeadline, type ManagedDeadline } from '../../src';
import { installOtel, type TestOtel } from '../helpers/otel';
import { callKind, loadGrpc, newClient, type CallResult } from './helpers';

/**
 * Issue 35 §1: calls made while a channel is still connecting wait in
 * grpc-js's queue and go out from the channel's connectivity change, which
 * runs in the async context of whichever call started the connection. Each
 * must still carry, and be judged by, the deadline of the caller that made it.
 */

type GrpcJs = ReturnType<typeof loadGrpc>['grpc'];

let otel: TestOtel;
let instrumentation: DeadlineInstrumentation;
let grpc: GrpcJs;
let Echo: ReturnType<typeof loadGrpc>['Echo'];

beforeAll(() => {
  otel = installOtel();
  instrumentation = new DeadlineInstrumentation();
  registerInstrumentations({ instrumentations: [instrumentation] });
  ({ grpc, Echo } = loadGrpc());
});
afterAll(async () => {
  instrumentation.disable();
  await otel.shutdown();
});

/** What the server saw of one call. */
interface Arrival {
  atMsHeader: string | null;
  remainingHeader: string | null;
  /** call.getDeadline() in epoch ms; null for none. */
  grpcDeadline: number | null;
}

/** A port nothing listens on yet. */
async function freePort(): Promise<number> {
  const probe = net.createServer();
  await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
  const { port } = probe.address() as net.AddressInfo;
  await new Promise((resolve) => probe.close(resolve));
  return port;
}

/** An Echo server on `port` that records every Unary call's deadline metadata by its message. */
async function startRecordingServer(port: number, arrivals: Map<string, Arrival[]>): Promise<import('@grpc/grpc-js').Server> {
  const server = new grpc.Server();
  server.addService(Echo.service, {
    Unary(call: import('@grpc/grpc-js').ServerUnaryCall<{ text: string }, unknown>, callback: (err: unknown, value?: unknown) => void) {
      const raw = call.getDeadline();
      const epoch = raw instanceof Date ? raw.getTime() : Number(raw);
      const header = (name: string) => (call.metadata.get(name)[0] as string | undefined) ?? null;
      const seen = arrivals.get(call.request.text) ?? [];
      seen.push({ atMsHeader: header('x-deadline-at-ms'), remainingHeader: header('x-deadline-remaining-ms'), grpcDeadline: Number.isFinite(epoch) ? epoch : null });
      arrivals.set(call.request.text, seen);
      callback(null, { text: JSON.stringify({}) });
    },
  } as never);
  await new Promise<number>((resolve, reject) =>
    server.bindAsync(`127.0.0.1:${port}`, grpc.ServerCredentials.createInsecure(), (err, bound) => (err ? reject(err) : resolve(bound))),
  );
  return server;
}

/**
 * A client interceptor that holds each call's start until the channel is
 * ready: the start, and so our guard's, then runs in the callback of the
 * channel's connectivity change, in whatever context that carries.
 */
function startWhenReady(client: () => import('@grpc/grpc-js').Client): import('@grpc/grpc-js').Interceptor {
  return (options, nextCall) =>
    new grpc.InterceptingCall(nextCall(options), {
      start(metadata, listener, next) {
        client().waitForReady(Date.now() + 20_000, () => next(metadata, listener));
      },
    });
}

/** The calls of one run: name, the budget of the caller's deadline (none: no deadline). */
const CALLS: [string, number | undefined][] = [
  ['first', 10_000],
  ['second', 6_000],
  ['bare', undefined],
  ['third', 8_000],
  // Cut while still queued: the server starts listening after its cutoff.
  ['short', 150],
  ['bare-again', undefined],
];

describe.each([
  ['made while the channel connects (waitForReady)', false],
  ['whose start an interceptor holds until the channel is ready', true],
] as const)('calls %s', (_name, intercepted) => {
  it("each carries its own caller's deadline, or none, and is judged by it", async () => {
    const port = await freePort();
    const arrivals = new Map<string, Arrival[]>();
    const holder: { client?: ReturnType<typeof newClient> } = {};
    const options = {
      'grpc.initial_reconnect_backoff_ms': 100,
      'grpc.max_reconnect_backoff_ms': 200,
      ...(intercepted ? { interceptors: [startWhenReady(() => holder.client!)] } : {}),
    };
    const client = new Echo(`127.0.0.1:${port}`, grpc.credentials.createInsecure(), options) as unknown as ReturnType<typeof newClient>;
    holder.client = client;
    const deadlines = new Map<string, ManagedDeadline>();
    const results = new Map<string, Promise<CallResult>>();
    // Each call is made in its own caller's context; the first one starts the connection.
    for (const [name, budget] of CALLS) {
      // waitForReady: the calls stay queued through the refused connection attempts.
      const call = () => callKind(client, 'Unary', name, {}, new grpc.Metadata({ waitForReady: true }));
      if (budget === undefined) {
        results.set(name, call());
        continue;
      }
      const deadline = openDeadline({ operation: name, timeoutMs: budget, parent: null });
      deadlines.set(name, deadline);
      results.set(name, context.with(setDeadline(context.active(), deadline), call));
    }
    // The server starts after the short call's cutoff (a timer set later and longer fires later):
    // until then every call waits in the queue.
    await new Promise((resolve) => setTimeout(resolve, 400));
    const server = await startRecordingServer(port, arrivals);
    try {
      const settled = new Map<string, CallResult>();
      for (const [name, result] of results) settled.set(name, await result);

      const short = settled.get('short')!;
      expect(short.error?.code, short.error?.details).toBe(grpc.status.DEADLINE_EXCEEDED);
      expect(arrivals.get('short')).toBeUndefined();
      for (const [name, budget] of CALLS) {
        if (name === 'short') continue;
        expect(settled.get(name)!.error, name).toBeNull();
        const seen = arrivals.get(name);
        expect(seen, name).toHaveLength(1);
        const [arrival] = seen!;
        if (budget === undefined) {
          expect(arrival, name).toEqual({ atMsHeader: null, remainingHeader: null, grpcDeadline: null });
          continue;
        }
        const { expiresAtMs } = deadlines.get(name)!;
        expect(arrival.atMsHeader, name).toBe(String(Math.floor(expiresAtMs)));
        // grpc-timeout is relative: it lands within transit (bounded by 1 s under load) of the cutoff,
        // while the budgets differ by 2 s or more.
        expect(Math.abs(arrival.grpcDeadline! - expiresAtMs), name).toBeLessThan(1_000);
      }
    } finally {
      for (const deadline of deadlines.values()) deadline.dispose();
      client.close();
      server.forceShutdown();
    }
  });
});
