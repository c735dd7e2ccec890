import http2 from 'node:http2';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { registerInstrumentations } from '@opentelemetry/instrumentation';
import { afterAll, afterEach, beforeAll, expect } from 'vitest';
import { DeadlineInstrumentation, getDeadline } from '../../src';
import { installOtel } from '../helpers/otel';

type GrpcJs = typeof import('@grpc/grpc-js');
type ServerCall = import('@grpc/grpc-js').ServerUnaryCall<{ text: string }, { text: string }> & {
  on(event: string, listener: (...args: unknown[]) => void): unknown;
};

export const ECHO_PROTO = fileURLToPath(new URL('./fixtures/echo.proto', import.meta.url));
export const KINDS = ['Unary', 'ClientStream', 'ServerStream', 'Bidi'] as const;
export type Kind = (typeof KINDS)[number];

const require = createRequire(import.meta.url);

/**
 * grpc-js and proto-loader through require, after the instrumentation is
 * registered, as an application loads them (an ESM import needs the loader
 * hook of the register entry).
 */
export function loadGrpc(): { grpc: GrpcJs; Echo: import('@grpc/grpc-js').ServiceClientConstructor } {
  const grpc = require('@grpc/grpc-js') as GrpcJs;
  const protoLoader = require('@grpc/proto-loader') as typeof import('@grpc/proto-loader');
  const definition = protoLoader.loadSync(ECHO_PROTO, { keepCase: true });
  const Echo = (grpc.loadPackageDefinition(definition).test as Record<string, unknown>).Echo as import('@grpc/grpc-js').ServiceClientConstructor;
  return { grpc, Echo };
}

/** What a handler saw, sent back as the reply text (JSON). */
export interface Report {
  /** call.getDeadline() in epoch ms; null for none. */
  grpcDeadline: number | null;
  /** The deadline active in the handler's context (after an await). */
  ours: { remainingMs: number; expiresAtMs: number; source: string; wireSkewMs: number | null } | null;
  atMsHeader: string | null;
  remainingHeader: string | null;
  /** The baggage metadata as received, if any. */
  baggageHeader: string | null;
  /** Date.now() when the handler ran. */
  nowEpoch: number;
}

export interface HungCall {
  kind: Kind;
  /** Resolves when grpc-js emits 'cancelled' on the call. */
  cancelled: Promise<void>;
  /** The abort reason of the handler's deadline, once it aborted. */
  deadlineAborted: Promise<unknown>;
}

export interface EchoServer {
  address: string;
  /** HTTP/2 streams the server accepted: a refused client call must add none. */
  streams: number;
  /** Handler invocations, by kind. */
  runs: Record<Kind, number>;
  hung: HungCall[];
  /** What each handler saw the moment it started, before any await: readable even if the call is cut. */
  seen: Report[];
  /** The server call object of each handler run, to count the listeners left on it. */
  calls: import('node:events').EventEmitter[];
  close(): Promise<void>;
}

async function report(call: ServerCall): Promise<Report> {
  // After an await: the deadline must reach everything the handler calls.
  await new Promise((resolve) => setImmediate(resolve));
  return snapshot(call);
}

/** What the handler sees now. */
function snapshot(call: ServerCall): Report {
  const deadline = getDeadline();
  const raw = call.getDeadline();
  const grpcDeadline = raw instanceof Date ? raw.getTime() : Number.isFinite(raw) ? Number(raw) : null;
  const header = (name: string) => (call.metadata.get(name)[0] as string | undefined) ?? null;
  return {
    grpcDeadline,
    ours: deadline === undefined ? null : { remainingMs: deadline.remainingMs(), expiresAtMs: deadline.expiresAtMs, source: deadline.source, wireSkewMs: deadline.wireSkewMs ?? null },
    atMsHeader: header('x-deadline-at-ms'),
    remainingHeader: header('x-deadline-remaining-ms'),
    baggageHeader: header('baggage'),
    nowEpoch: Date.now(),
  };
}

function hang(server: EchoServer, kind: Kind, call: ServerCall): void {
  const deadline = getDeadline();
  server.hung.push({
    kind,
    cancelled: new Promise((resolve) => call.on('cancelled', () => resolve())),
    deadlineAborted: new Promise((resolve) => {
      if (deadline === undefined) return;
      deadline.signal.addEventListener('abort', () => resolve(deadline.signal.reason), { once: true });
    }),
  });
}

/**
 * The Echo service on 127.0.0.1 port 0. A message `hang` makes the handler
 * never answer (it is recorded in `hung`); `stream-then-hang` (streaming
 * responses) sends one Report and then never ends; anything else is answered
 * with the handler's Report.
 */
export async function startEchoServer(grpc: GrpcJs, Echo: import('@grpc/grpc-js').ServiceClientConstructor): Promise<EchoServer> {
  const state: EchoServer = {
    address: '',
    streams: 0,
    runs: { Unary: 0, ClientStream: 0, ServerStream: 0, Bidi: 0 },
    hung: [],
    seen: [],
    calls: [],
    close: async () => {},
  };
  const answer = (call: ServerCall, text: string, kind: Kind, send: (report: Report) => void) => {
    state.seen.push(snapshot(call));
    state.calls.push(call as unknown as import('node:events').EventEmitter);
    if (text === 'hang') return hang(state, kind, call);
    if (text === 'stream-then-hang') {
      // One message out, then nothing: a response stream the cutoff must interrupt midway.
      return void report(call).then((r) => {
        (call as unknown as { write(msg: unknown): void }).write({ text: JSON.stringify(r) });
        hang(state, kind, call);
      });
    }
    void report(call).then(send);
  };
  const server = new grpc.Server();
  server.addService(Echo.service, {
    Unary(call: ServerCall, callback: (err: unknown, value?: { text: string }) => void) {
      state.runs.Unary++;
      answer(call, call.request.text, 'Unary', (r) => callback(null, { text: JSON.stringify(r) }));
    },
    ClientStream(call: ServerCall & NodeJS.ReadableStream, callback: (err: unknown, value?: { text: string }) => void) {
      state.runs.ClientStream++;
      call.once('data', (msg: { text: string }) => answer(call, msg.text, 'ClientStream', (r) => callback(null, { text: JSON.stringify(r) })));
      call.on('data', () => {});
    },
    ServerStream(call: ServerCall & { write(msg: unknown): void; end(): void }) {
      state.runs.ServerStream++;
      answer(call, call.request.text, 'ServerStream', (r) => {
        call.write({ text: JSON.stringify(r) });
        call.end();
      });
    },
    Bidi(call: ServerCall & NodeJS.ReadableStream & { write(msg: unknown): void; end(): void }) {
      state.runs.Bidi++;
      call.once('data', (msg: { text: string }) =>
        answer(call, msg.text, 'Bidi', (r) => {
          call.write({ text: JSON.stringify(r) });
          call.end();
        }),
      );
      call.on('data', () => {});
    },
  } as never);
  // Counts streams at the HTTP/2 layer, below grpc-js: grpc-js creates its server through http2.createServer.
  const createServer = http2.createServer;
  http2.createServer = ((...args: Parameters<typeof http2.createServer>) => {
    const h2 = createServer(...args);
    h2.on('stream', () => state.streams++);
    return h2;
  }) as typeof http2.createServer;
  let port: number;
  try {
    port = await new Promise<number>((resolve, reject) =>
      server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, bound) => (err ? reject(err) : resolve(bound))),
    );
  } finally {
    http2.createServer = createServer;
  }
  state.address = `127.0.0.1:${port}`;
  state.close = () => new Promise<void>((resolve) => server.tryShutdown(() => resolve()));
  return state;
}

type EchoClient = import('@grpc/grpc-js').Client & Record<string, (...args: unknown[]) => unknown>;

export interface CallResult {
  error: (Error & { code?: number; details?: string; metadata?: import('@grpc/grpc-js').Metadata }) | null;
  reply: Report | null;
}

/**
 * Makes one call of `kind` with a single message `text` through the
 * generated client, and settles with its error or its parsed reply.
 */
export function callKind(
  client: EchoClient,
  kind: Kind,
  text: string,
  options: import('@grpc/grpc-js').CallOptions = {},
  metadata: import('@grpc/grpc-js').Metadata = new (require('@grpc/grpc-js') as GrpcJs).Metadata(),
): Promise<CallResult> {
  return new Promise((resolve) => {
    const done = (error: CallResult['error'], value?: { text: string } | null) =>
      resolve({ error, reply: value ? (JSON.parse(value.text) as Report) : null });
    if (kind === 'Unary') return void client.Unary({ text }, metadata, options, done);
    if (kind === 'ClientStream') {
      const call = client.ClientStream(metadata, options, done) as NodeJS.WritableStream;
      call.write({ text } as never);
      return void call.end();
    }
    const call = (kind === 'ServerStream' ? client.ServerStream({ text }, metadata, options) : client.Bidi(metadata, options)) as NodeJS.ReadWriteStream;
    let reply: { text: string } | null = null;
    call.on('data', (msg: { text: string }) => (reply = msg));
    // An error keeps what arrived before it: a stream cut midway.
    call.on('error', (error: CallResult['error']) => done(error, reply));
    call.on('end', () => done(null, reply));
    if (kind === 'Bidi') {
      call.write({ text } as never);
      call.end();
    }
  });
}

export function newClient(grpc: GrpcJs, Echo: import('@grpc/grpc-js').ServiceClientConstructor, address: string): EchoClient {
  return new Echo(address, grpc.credentials.createInsecure()) as unknown as EchoClient;
}

export interface EchoSuite {
  otel: import('../helpers/otel').TestOtel;
  instrumentation: import('../../src').DeadlineInstrumentation;
  grpc: GrpcJs;
  Echo: import('@grpc/grpc-js').ServiceClientConstructor;
  server: EchoServer;
  client: EchoClient;
}

/**
 * The usual suite: the real SDK, DeadlineInstrumentation registered (plus
 * `others`, registered before it, as NodeSDK lists them), grpc-js loaded
 * after it, an Echo server and a client. Config and spans are reset after
 * each test.
 */
export function useEchoSuite(others: () => import('@opentelemetry/instrumentation').Instrumentation[] = () => []): EchoSuite {
  const suite = {} as EchoSuite;
  beforeAll(async () => {
    suite.otel = installOtel();
    suite.instrumentation = new DeadlineInstrumentation();
    registerInstrumentations({ instrumentations: [...others(), suite.instrumentation] });
    ({ grpc: suite.grpc, Echo: suite.Echo } = loadGrpc());
    suite.server = await startEchoServer(suite.grpc, suite.Echo);
    suite.client = newClient(suite.grpc, suite.Echo, suite.server.address);
  });
  afterAll(async () => {
    suite.client.close();
    await suite.server.close();
    suite.instrumentation.disable();
    await suite.otel.shutdown();
  });
  afterEach(() => {
    suite.instrumentation.setConfig({});
    suite.otel.exporter.reset();
  });
  return suite;
}

/**
 * The handler's deadline, read back from the deadline grpc-js computed on
 * arrival: never earlier (whole ms on both sides), and later only by the
 * time between the two clock readings that turn grpc-js's deadline into time
 * left and back (normally 0 ms; 1 s bounds a process descheduled in between
 * on a loaded machine), plus `roundingMs` of grpc-timeout's unit.
 */
export function expectFollowsGrpcDeadline(oursExpiresAtMs: number, grpcDeadline: number, roundingMs = 0): void {
  expect(oursExpiresAtMs - grpcDeadline).toBeGreaterThanOrEqual(-1);
  expect(oursExpiresAtMs - grpcDeadline).toBeLessThan(1_000 + roundingMs);
}
