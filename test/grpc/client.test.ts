import net from 'node:net';
import { context, SpanKind } from '@opentelemetry/api';
import { describe, expect, it } from 'vitest';
import {
  DeadlineCancelledError,
  DeadlineExceededError,
  InsufficientBudgetError,
  isDeadlineError,
  openDeadline,
  setDeadline,
  withDeadline,
  type ManagedDeadline,
} from '../../src';
import { passedDeadline } from '../helpers/clock';
import { sleep } from '../helpers/otel';
import { callKind, KINDS, useEchoSuite } from './helpers';

const suite = useEchoSuite();

/** Our own client span of the one call of `kind` (the server's spans share its name). */
function clientSpan(kind: string) {
  const found = suite.otel.spans().filter((span) => span.name === `test.Echo/${kind}` && span.kind === SpanKind.CLIENT);
  expect(found).toHaveLength(1);
  return found[0];
}

function under<T>(deadline: ManagedDeadline, fn: () => T): T {
  return context.with(setDeadline(context.active(), deadline), fn);
}

describe.each(KINDS)('%s call under a deadline', (kind) => {
  it('goes out with its deadline clamped to the cutoff, and our metadata', async () => {
    const deadline = openDeadline({ operation: 'parent', timeoutMs: 5_000, parent: null });
    // The call's own deadline (60 s) is later than the cutoff: the cutoff wins. The
    // wrapper turns the cutoff into an epoch from two clock reads, wall clock first, so
    // a pause between them can only make the deadline it hands grpc-js earlier, by at
    // most the time the call's synchronous start took (measured around it).
    const startedMono = performance.now();
    const pending = under(deadline, () => callKind(suite.client, kind, 'echo', { deadline: Date.now() + 60_000 }));
    const startMs = performance.now() - startedMono;
    // The wrapper ran inside that window: its guard is on the deadline already.
    expect((deadline as unknown as { subscriberCount: number }).subscriberCount).toBe(1);
    const { error, reply } = await pending;
    // The call's guard came off the deadline when its status arrived.
    expect((deadline as unknown as { subscriberCount: number }).subscriberCount).toBe(0);
    deadline.dispose();
    expect(error).toBeNull();
    // grpc-js on the server adds grpc-timeout to its arrival time: the cutoff (less
    // whole-ms rounding and any pause inside the wrapper, see above) plus the transit
    // time, which 1 s bounds even on a loaded machine.
    expect(reply!.grpcDeadline!).toBeGreaterThanOrEqual(Math.floor(deadline.expiresAtMs) - 1 - Math.ceil(startMs));
    expect(reply!.grpcDeadline!).toBeLessThan(deadline.expiresAtMs + 1_000);
    expect(reply!.atMsHeader).toBe(String(Math.floor(deadline.expiresAtMs)));
    expect(Number(reply!.remainingHeader)).toBeLessThanOrEqual(5_000);
    expect(Number(reply!.remainingHeader)).toBeGreaterThan(0);
    // The absolute value is the earliest, and exact to the ms: the handler ends at our cutoff.
    expect(reply!.ours!.source).toBe('remote');
    expect(Math.abs(reply!.ours!.expiresAtMs - deadline.expiresAtMs)).toBeLessThanOrEqual(2);
  });

  it('keeps its own deadline when that is earlier, in grpc-timeout and in our metadata', async () => {
    const deadline = openDeadline({ operation: 'parent', timeoutMs: 60_000, parent: null });
    const own = Date.now() + 5_000;
    const { error, reply } = await under(deadline, () => callKind(suite.client, kind, 'echo', { deadline: own }));
    deadline.dispose();
    expect(error).toBeNull();
    // Its own deadline plus transit (see above), not the 60 s cutoff.
    expect(reply!.grpcDeadline!).toBeGreaterThanOrEqual(own - 1);
    expect(reply!.grpcDeadline!).toBeLessThan(own + 1_000);
    expect(reply!.atMsHeader).toBe(String(own));
    // No false skew of 55 s: both wire values describe the same, earlier deadline;
    // what is left is the transit time, which the skew is there to show.
    expect(reply!.ours!.wireSkewMs).not.toBeNull();
    expect(Math.abs(reply!.ours!.wireSkewMs!)).toBeLessThan(1_000);
  });

  it('is refused before any stream opens when the deadline has expired', async () => {
    const deadline = await passedDeadline('parent');
    const before = { streams: suite.server.streams, runs: suite.server.runs[kind] };
    const { error } = await under(deadline, () => callKind(suite.client, kind, 'echo'));
    deadline.dispose();
    expect(error?.code).toBe(suite.grpc.status.DEADLINE_EXCEEDED);
    expect(isDeadlineError(error)).toBe(true);
    expect(error).toBeInstanceOf(DeadlineExceededError);
    expect((error as { cause?: unknown }).cause).toBeInstanceOf(DeadlineExceededError);
    expect(suite.server.streams).toBe(before.streams);
    expect(suite.server.runs[kind]).toBe(before.runs);
    const span = clientSpan(kind);
    expect(span.attributes['deadline.outcome']).toBe('not_started');
    expect(span.attributes['deadline.abort.code']).toBe('DEADLINE_EXCEEDED');
  });

  it('is refused below minUsefulMs with an INSUFFICIENT_BUDGET cause', async () => {
    suite.instrumentation.setConfig({ minUsefulMs: 10_000 });
    const deadline = openDeadline({ operation: 'parent', timeoutMs: 2_000, parent: null });
    const before = suite.server.streams;
    const { error } = await under(deadline, () => callKind(suite.client, kind, 'echo'));
    deadline.dispose();
    expect(error?.code).toBe(suite.grpc.status.DEADLINE_EXCEEDED);
    expect(isDeadlineError(error)).toBe(true);
    expect((error as { cause?: unknown }).cause).toBeInstanceOf(InsufficientBudgetError);
    expect(suite.server.streams).toBe(before);
  });

  it('ends DEADLINE_EXCEEDED at the cutoff, and the server sees the stream cancelled', async () => {
    const hungBefore = suite.server.hung.length;
    const deadline = openDeadline({ operation: 'parent', timeoutMs: 300, parent: null });
    const { error } = await under(deadline, () => callKind(suite.client, kind, 'hang'));
    // Ended at the cutoff, not before: grpc-js's own timer, set to the same cutoff
    // through Date.now() and whole milliseconds, may run a ms or two ahead of ours.
    expect(deadline.remainingMs()).toBeLessThanOrEqual(5);
    expect(error?.code).toBe(suite.grpc.status.DEADLINE_EXCEEDED);
    expect(isDeadlineError(error)).toBe(true);
    expect(suite.server.hung.length).toBe(hungBefore + 1);
    await suite.server.hung[hungBefore].cancelled; // resolves only on grpc-js's 'cancelled'
    expect((deadline as unknown as { subscriberCount: number }).subscriberCount).toBe(0);
    deadline.dispose();
    const span = clientSpan(kind);
    expect(span.attributes['deadline.abort.code']).toBe('DEADLINE_EXCEEDED');
    expect(['unknown', 'expired']).toContain(span.attributes['deadline.outcome']);
    expect(span.attributes['rpc.grpc.status_code']).toBe(4);
  });

  it("is cancelled with CANCELLED when its parent's signal aborts", async () => {
    const hungBefore = suite.server.hung.length;
    const controller = new AbortController();
    const deadline = openDeadline({ operation: 'parent', timeoutMs: 10_000, parent: null, signal: controller.signal });
    const pending = under(deadline, () => callKind(suite.client, kind, 'hang'));
    // Cancel once the server holds the call, so the cancel reaches a live stream.
    while (suite.server.hung.length === hungBefore) await sleep(5);
    controller.abort(new Error('caller went away'));
    const { error } = await pending;
    expect(error?.code).toBe(suite.grpc.status.CANCELLED);
    expect((error as { cause?: unknown }).cause).toBeInstanceOf(DeadlineCancelledError);
    await suite.server.hung[hungBefore].cancelled;
    deadline.dispose();
  });
});

describe('the cutoff reaches the call wherever it is', () => {
  it.each(['ServerStream', 'Bidi'] as const)('%s: in the middle of the response stream', async (kind) => {
    const hungBefore = suite.server.hung.length;
    const deadline = openDeadline({ operation: 'parent', timeoutMs: 300, parent: null });
    const { error, reply } = await under(deadline, () => callKind(suite.client, kind, 'stream-then-hang'));
    deadline.dispose();
    // The first message arrived; then the stream was cut at the cutoff.
    expect(reply).not.toBeNull();
    expect(error?.code).toBe(suite.grpc.status.DEADLINE_EXCEEDED);
    expect(isDeadlineError(error)).toBe(true);
    await suite.server.hung[hungBefore].cancelled;
    expect(clientSpan(kind).attributes['deadline.outcome']).toBe('unknown');
  });

  it('waiting for a connection that never completes: expired, as nothing was sent', async () => {
    // Accepts TCP and never answers HTTP/2: grpc-js queues the call while it keeps connecting.
    const sockets: net.Socket[] = [];
    const silent = net.createServer((socket) => void sockets.push(socket));
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const { port } = silent.address() as net.AddressInfo;
    const client = new suite.Echo(`127.0.0.1:${port}`, suite.grpc.credentials.createInsecure()) as unknown as typeof suite.client;
    const deadline = openDeadline({ operation: 'parent', timeoutMs: 300, parent: null });
    const { error } = await under(deadline, () => callKind(client, 'Unary', 'echo'));
    deadline.dispose();
    client.close();
    for (const socket of sockets) socket.destroy();
    await new Promise((resolve) => silent.close(resolve));
    expect(error?.code).toBe(suite.grpc.status.DEADLINE_EXCEEDED);
    expect(isDeadlineError(error)).toBe(true);
    const span = clientSpan('Unary');
    expect(span.attributes['deadline.outcome']).toBe('expired');
    expect(span.attributes['deadline.abort.code']).toBe('DEADLINE_EXCEEDED');
  });
});

describe('observe mode', () => {
  it('lets a call under an expired deadline go out as it is, and records that it would have been refused', async () => {
    suite.instrumentation.setConfig({ mode: 'observe' });
    const deadline = await passedDeadline('parent');
    const before = suite.server.streams;
    const { error, reply } = await under(deadline, () => callKind(suite.client, 'Unary', 'echo', { deadline: Date.now() + 60_000 }));
    deadline.dispose();
    expect(error).toBeNull();
    expect(suite.server.streams).toBe(before + 1);
    // Not clamped: grpc-js sent the call's own 60 s.
    expect(reply!.grpcDeadline! - reply!.nowEpoch).toBeGreaterThan(50_000);
    const span = clientSpan('Unary');
    expect(span.attributes['deadline.would_reject']).toBe(true);
    expect(span.attributes['deadline.outcome']).not.toBe('not_started');
  });
});

describe('the guard lives as long as the call', () => {
  it('cuts a call started inside withDeadline and awaited after it returned', async () => {
    const hungBefore = suite.server.hung.length;
    const pending = await withDeadline({ operation: 'scope', timeoutMs: 300, parent: null }, async () => ({ call: callKind(suite.client, 'Unary', 'hang') }));
    const { error } = await pending.call;
    expect(error?.code).toBe(suite.grpc.status.DEADLINE_EXCEEDED);
    expect(isDeadlineError(error)).toBe(true);
    await suite.server.hung[hungBefore].cancelled;
  });

  it('passes calls without a deadline through untouched', async () => {
    const { error, reply } = await callKind(suite.client, 'Unary', 'echo');
    expect(error).toBeNull();
    expect(reply!.grpcDeadline).toBeNull();
    expect(reply!.atMsHeader).toBeNull();
    expect(reply!.ours).toBeNull();
    expect(suite.otel.spans()).toHaveLength(0);
  });

  it('Client#makeUnaryRequest is guarded too', async () => {
    const plain = new suite.grpc.Client(suite.server.address, suite.grpc.credentials.createInsecure());
    const deadline = await passedDeadline('parent');
    const before = suite.server.streams;
    const error = await under(deadline, () =>
      new Promise<unknown>((resolve) =>
        plain.makeUnaryRequest('/test.Echo/Unary', (m: Buffer) => m, (b: Buffer) => b, Buffer.alloc(0), (err) => resolve(err)),
      ),
    );
    deadline.dispose();
    plain.close();
    expect((error as { code?: number }).code).toBe(suite.grpc.status.DEADLINE_EXCEEDED);
    expect(isDeadlineError(error)).toBe(true);
    expect(suite.server.streams).toBe(before);
  });
});
