import { spawn, type ChildProcess } from 'node:child_process';
import http2 from 'node:http2';
import { join } from 'node:path';
import { context, SpanKind } from '@opentelemetry/api';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InsufficientBudgetError, isDeadlineError, openDeadline, setDeadline } from '../../src';
import { callKind, expectFollowsGrpcDeadline, newClient, useEchoSuite, type Report } from './helpers';
import { startRefusingPeer, type RefusingPeer } from './refusing-peer';

const suite = useEchoSuite();
const peer = join(__dirname, 'fixtures', 'plain-peer.cjs');

/** Runs the plain peer to completion and returns its last stdout line as JSON. */
function runPeer(args: string[]): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [peer, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk));
    child.once('error', reject);
    child.once('close', (code) => {
      if (code !== 0) return reject(new Error(`plain peer exited ${code}: ${stderr}`));
      resolve(JSON.parse(stdout.trim().split('\n').at(-1)!) as Record<string, unknown>);
    });
  });
}

describe('a plain grpc-js client (no OpenTelemetry) calling our server', () => {
  it('gives the handler the budget it sent as its deadline', async () => {
    const result = await runPeer(['client', suite.server.address, '5000']);
    const reply = result.reply as Report;
    expect(reply.ours).not.toBeNull();
    expect(reply.ours!.source).toBe('remote');
    expect(reply.ours!.remainingMs).toBeLessThanOrEqual(5_000);
    expect(reply.ours!.remainingMs).toBeGreaterThan(0);
    expectFollowsGrpcDeadline(reply.ours!.expiresAtMs, reply.grpcDeadline!);
  });
});

describe('our client calling a plain grpc-js server', () => {
  let server: ChildProcess;
  let address: string;
  beforeAll(async () => {
    server = spawn(process.execPath, [peer, 'server'], { stdio: ['pipe', 'pipe', 'inherit'] });
    const port = await new Promise<number>((resolve, reject) => {
      server.once('error', reject);
      server.stdout!.once('data', (chunk: Buffer) => resolve((JSON.parse(String(chunk)) as { port: number }).port));
    });
    address = `127.0.0.1:${port}`;
  });
  afterAll(async () => {
    const closed = new Promise((resolve) => server.once('close', resolve));
    server.stdin!.end();
    await closed;
  });

  it('shows the server the clamped deadline in call.getDeadline()', async () => {
    const client = newClient(suite.grpc, suite.Echo, address);
    const deadline = openDeadline({ operation: 'parent', timeoutMs: 5_000, parent: null });
    const { error, reply } = await context.with(setDeadline(context.active(), deadline), () =>
      callKind(client, 'Unary', 'echo', { deadline: Date.now() + 60_000 }),
    );
    deadline.dispose();
    client.close();
    expect(error).toBeNull();
    // The cutoff plus transit (bounded by 1 s even under load), not the call's own 60 s.
    expect(reply!.grpcDeadline!).toBeGreaterThanOrEqual(Math.floor(deadline.expiresAtMs) - 1);
    expect(reply!.grpcDeadline!).toBeLessThan(deadline.expiresAtMs + 1_000);
    expect(reply!.atMsHeader).toBe(String(Math.floor(deadline.expiresAtMs)));
  });
});

describe('an otel-deadline server in another process refusing our call', () => {
  let server: RefusingPeer;
  let client: ReturnType<typeof newClient>;
  beforeAll(async () => {
    // An otel-deadline server that refuses calls with less than 10 s.
    server = await startRefusingPeer(10_000);
    client = newClient(suite.grpc, suite.Echo, server.address);
  });
  afterAll(async () => {
    client.close();
    await server.close();
  });

  async function callUnder5s() {
    const deadline = openDeadline({ operation: 'parent', timeoutMs: 5_000, parent: null });
    const result = await context.with(setDeadline(context.active(), deadline), () => callKind(client, 'Unary', 'echo'));
    deadline.dispose();
    const span = suite.otel.spans().find((s) => s.name === 'test.Echo/Unary' && s.kind === SpanKind.CLIENT);
    return { ...result, span };
  }

  it('believes the refusal of a trusted peer: not_started, and an error that is a deadline error', async () => {
    const { error, span } = await callUnder5s();
    expect(error?.code).toBe(suite.grpc.status.DEADLINE_EXCEEDED);
    expect(error?.details).toMatch(/below minUsefulMs 10000 \(INSUFFICIENT_BUDGET\)/);
    expect(isDeadlineError(error)).toBe(true);
    const cause = (error as { cause?: unknown }).cause as InsufficientBudgetError;
    expect(cause).toBeInstanceOf(InsufficientBudgetError);
    expect(cause.neededMs).toBe(10_000);
    expect(span!.attributes['deadline.outcome']).toBe('not_started');
    expect(span!.attributes['deadline.abort.code']).toBe('INSUFFICIENT_BUDGET');
  });

  it('takes the same status from a peer trustReply does not trust as an ordinary one', async () => {
    const asked: unknown[] = [];
    suite.instrumentation.setConfig({ trustReply: (reply) => (asked.push(reply), false) });
    const { error, span } = await callUnder5s();
    expect(error?.code).toBe(suite.grpc.status.DEADLINE_EXCEEDED);
    expect(isDeadlineError(error)).toBe(false);
    expect(span!.attributes['deadline.outcome']).not.toBe('not_started');
    expect(asked).toEqual([{ transport: 'grpc', method: '/test.Echo/Unary', url: expect.stringMatching(/^https:\/\/127\.0\.0\.1:\d+\/$/), statusCode: 4 }]);
  });
});

/** A hand-made gRPC request with a `grpc-timeout` of our choosing: grpc-js's client only writes valid ones. */
function rawCall(address: string, timeout: string): Promise<{ status: string | undefined; message: string | undefined; reply: Report | null }> {
  return new Promise((resolve, reject) => {
    const session = http2.connect(`http://${address}`);
    session.once('error', reject);
    const request = session.request({
      ':method': 'POST',
      ':path': '/test.Echo/Unary',
      'content-type': 'application/grpc',
      te: 'trailers',
      'grpc-timeout': timeout,
    });
    const text = Buffer.from('echo');
    // One length-prefixed message: test.Msg { text = "echo" } (field 1, wire type 2).
    const payload = Buffer.concat([Buffer.from([0x0a, text.length]), text]);
    const frame = Buffer.alloc(5 + payload.length);
    frame.writeUInt32BE(payload.length, 1);
    payload.copy(frame, 5);
    const chunks: Buffer[] = [];
    let headers: http2.IncomingHttpHeaders = {};
    request.on('response', (received) => (headers = received));
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('trailers', (trailers) => (headers = { ...headers, ...trailers }));
    request.once('error', reject);
    request.once('close', () => {
      session.close();
      const body = Buffer.concat(chunks);
      // Skip the 5-byte prefix, the field tag and a one- or two-byte length varint.
      let reply: Report | null = null;
      if (body.length > 7) {
        const start = body[6] & 0x80 ? 8 : 7;
        reply = JSON.parse(body.subarray(start).toString()) as Report;
      }
      resolve({ status: headers['grpc-status'] as string | undefined, message: headers['grpc-message'] as string | undefined, reply });
    });
    request.end(frame);
  });
}

/**
 * The deadline the handler of the last call saw, against what grpc-js computed. `sent` is the
 * Date.now() read before the raw call went out and after its reply came back.
 */
function expectHandlerDeadline(ms: number, sent: { before: number; after: number }): void {
  const seen = suite.server.seen.at(-1)!;
  // grpc-js's own deadline: `ms` from its Date.now() at arrival, which lies between `before` and the
  // handler's read, and the handler's read lies before `after` (whole ms on every read): bracketed,
  // so a pause between arrival and handler only widens the lower bound.
  expect(seen.grpcDeadline! - seen.nowEpoch).toBeLessThanOrEqual(ms);
  expect(seen.grpcDeadline! - seen.nowEpoch).toBeGreaterThanOrEqual(ms - (sent.after - sent.before));
  // Past 99,999,999 ms (27.8 h) grpc-timeout's seconds round ours up by < 1 s.
  expect(seen.ours!.source).toBe('remote');
  expectFollowsGrpcDeadline(seen.ours!.expiresAtMs, seen.grpcDeadline!, ms > 99_999_999 ? 1_000 : 0);
}

describe('grpc-timeout as it arrives at our server', () => {
  // Our server reads the deadline grpc-js computed from the header (grpc-js
  // removes the header itself from the metadata), so the handler's deadline
  // always agrees with the moment grpc-js ends the call.
  it.each([
    ['1H', 3_600_000],
    ['2M', 120_000],
    ['3S', 3_000],
    ['2500m', 2_500],
    ['99999999u', 99_999],
    ['99999999n', 99], // the largest nanosecond value: grpc-js truncates to whole ms
    ['99999999m', 99_999_999], // the 8-digit limit, about 27.8 hours
  ])('%s: the handler runs under %d ms', async (value, ms) => {
    const runs = suite.server.runs.Unary;
    const before = Date.now();
    await rawCall(suite.server.address, value);
    const after = Date.now();
    expect(suite.server.runs.Unary).toBe(runs + 1);
    expectHandlerDeadline(ms, { before, after });
  });

  // What grpc-js 1.14 does with values outside the protocol. Its server matches
  // /(\d{1,8})\s*([HMSmun])/ anywhere in the value and computes `(digits * unit) | 0`.
  it.each([
    ['soon', 'is answered INTERNAL before any handler runs'],
    ['250', 'is answered INTERNAL (no unit)'],
    ['m', 'is answered INTERNAL (no digits)'],
    ['x'.repeat(5_000), 'is answered INTERNAL (5,000 bytes)'],
  ])('%s %s', async (value) => {
    const runs = suite.server.runs.Unary;
    const { status, message } = await rawCall(suite.server.address, value);
    expect(status).toBe('13');
    expect(decodeURIComponent(message!)).toContain('Invalid grpc-timeout value');
    expect(suite.server.runs.Unary).toBe(runs);
  });

  it.each([
    ['-3S', 3_000, 'the sign is skipped'],
    ['1.5S', 5_000, 'the digits after the point are read'],
    ['2500 m', 2_500, 'a space before the unit is accepted'],
    ['123456789m', 23_456_789, 'of 9 digits, the last 8 are read'],
    ['2500m, 5S', 2_500, 'of two joined values, the first is read'],
    ['99999999H', (99_999_999 * 3_600_000) | 0, 'wraps around to about 1.5 days'],
  ])('%s: grpc-js reads %d ms (%s), and so does the handler', async (value, ms) => {
    const runs = suite.server.runs.Unary;
    const before = Date.now();
    await rawCall(suite.server.address, value);
    const after = Date.now();
    expect(suite.server.runs.Unary).toBe(runs + 1);
    expectHandlerDeadline(ms, { before, after });
  });

  it.each([
    ['99999999M', 'wraps around below zero'],
    ['00000000m', 'is zero'],
    ['1000000000n', 'of 10 digits, grpc-js reads 00000000n: zero'],
  ])('%s %s: our server refuses it as passed on arrival', async (value) => {
    const runs = suite.server.runs.Unary;
    const { status, message } = await rawCall(suite.server.address, value);
    expect(status).toBe('4');
    expect(decodeURIComponent(message!)).toMatch(/passed on arrival/);
    expect(suite.server.runs.Unary).toBe(runs);
  });
});
