import { errorMonitor } from 'node:events';
import { context, SpanKind } from '@opentelemetry/api';
import { describe, expect, it } from 'vitest';
import { DeadlineCancelledError, DeadlineExceededError, openDeadline, setDeadline } from '../../src';
import { sleep } from '../helpers/otel';
import { callKind, expectFollowsGrpcDeadline, KINDS, useEchoSuite, type Kind } from './helpers';

const suite = useEchoSuite();

/** Metadata a caller sends by hand; no deadline is active on the client side, so its call passes through untouched. */
function metadataWith(entries: Record<string, string>) {
  const metadata = new suite.grpc.Metadata();
  for (const [key, value] of Object.entries(entries)) metadata.set(key, value);
  return metadata;
}

/** callKind with hand-made metadata. */
function callWith(kind: Kind, text: string, entries: Record<string, string>, options: import('@grpc/grpc-js').CallOptions = {}) {
  return callKind(suite.client, kind, text, options, metadataWith(entries));
}

function serverSpan(kind: Kind) {
  const found = suite.otel.spans().filter((span) => span.name === `test.Echo/${kind}` && span.kind === SpanKind.SERVER);
  expect(found).toHaveLength(1);
  return found[0];
}

describe.each(KINDS)('%s handler', (kind) => {
  it('runs under the deadline from grpc-timeout, seen by getDeadline() after an await', async () => {
    const { error, reply } = await callKind(suite.client, kind, 'echo', { deadline: Date.now() + 10_000 });
    expect(error).toBeNull();
    expect(reply!.ours!.source).toBe('remote');
    // 10 s sent; transit and the handler's await take far less than 5 s even on a loaded machine.
    expect(reply!.ours!.remainingMs).toBeLessThanOrEqual(10_000);
    expect(reply!.ours!.remainingMs).toBeGreaterThan(5_000);
    expectFollowsGrpcDeadline(reply!.ours!.expiresAtMs, reply!.grpcDeadline!);
  });

  it('takes the earlier of grpc-timeout and our absolute metadata', async () => {
    // 10 s ahead: the call arrives long before that even on a loaded machine.
    const at = Date.now() + 10_000;
    const { reply } = await callWith(kind, 'echo', { 'x-deadline-at-ms': String(at) }, { deadline: Date.now() + 60_000 });
    // The absolute value is exact to the ms; grpc-timeout's 60 s lost.
    expect(Math.abs(reply!.ours!.expiresAtMs - at)).toBeLessThanOrEqual(2);
  });

  it('is refused without running the handler when the deadline passed before arrival', async () => {
    const runs = suite.server.runs[kind];
    const { error } = await callWith(kind, 'echo', { 'x-deadline-at-ms': String(Date.now() - 1_000) }, { deadline: Date.now() + 60_000 });
    expect(error?.code).toBe(suite.grpc.status.DEADLINE_EXCEEDED);
    expect(error?.details).toMatch(/refused.*passed on arrival.*DEADLINE_EXCEEDED/);
    expect(error?.metadata?.get('x-deadline-expired')).toEqual(['1']);
    expect(suite.server.runs[kind]).toBe(runs);
    const span = serverSpan(kind);
    expect(span.attributes['deadline.outcome']).toBe('not_started');
    expect(span.attributes['deadline.abort.code']).toBe('DEADLINE_EXCEEDED');
  });

  it('is refused below minUsefulMs, and the message says so', async () => {
    suite.instrumentation.setConfig({ minUsefulMs: 10_000 });
    const runs = suite.server.runs[kind];
    const { error } = await callKind(suite.client, kind, 'echo', { deadline: Date.now() + 2_000 });
    expect(error?.code).toBe(suite.grpc.status.DEADLINE_EXCEEDED);
    expect(error?.details).toMatch(/below minUsefulMs 10000 \(INSUFFICIENT_BUDGET\)/);
    expect(error?.metadata?.get('x-deadline-expired')).toEqual(['1']);
    expect(suite.server.runs[kind]).toBe(runs);
  });

  it('observe mode runs the handler and records what enforce would have refused', async () => {
    suite.instrumentation.setConfig({ mode: 'observe' });
    const runs = suite.server.runs[kind];
    const { error } = await callWith(kind, 'echo', { 'x-deadline-at-ms': String(Date.now() - 1_000) }, { deadline: Date.now() + 60_000 });
    expect(error).toBeNull();
    expect(suite.server.runs[kind]).toBe(runs + 1);
    expect(serverSpan(kind).attributes['deadline.would_reject']).toBe(true);
  });
});

describe('caller trust and caps', () => {
  it('maxIncomingMs caps what a caller asks for', async () => {
    suite.instrumentation.setConfig({ maxIncomingMs: 1_000 });
    const { reply } = await callKind(suite.client, 'Unary', 'echo', { deadline: Date.now() + 60_000 });
    expect(reply!.ours!.remainingMs).toBeLessThanOrEqual(1_000);
  });

  it('a server with trustIncoming but no trustIncomingGrpc does not believe gRPC callers', async () => {
    suite.instrumentation.setConfig({ trustIncoming: () => true });
    const { reply } = await callKind(suite.client, 'Unary', 'echo', { deadline: Date.now() + 5_000 });
    expect(reply!.ours).toBeNull();
  });

  it('trustIncomingGrpc decides per call, from the path and metadata', async () => {
    const seen: string[] = [];
    suite.instrumentation.setConfig({
      trustIncomingGrpc: (call) => {
        seen.push(call.path);
        return call.metadata.get('x-tenant')[0] === 'inside';
      },
    });
    const trusted = await callWith('Unary', 'echo', { 'x-tenant': 'inside' }, { deadline: Date.now() + 5_000 });
    const untrusted = await callWith('Unary', 'echo', { 'x-tenant': 'outside' }, { deadline: Date.now() + 5_000 });
    expect(trusted.reply!.ours).not.toBeNull();
    expect(untrusted.reply!.ours).toBeNull();
    expect(seen).toEqual(['/test.Echo/Unary', '/test.Echo/Unary']);
  });

  it('a call without any deadline runs without one', async () => {
    const { reply } = await callKind(suite.client, 'Unary', 'echo');
    expect(reply!.ours).toBeNull();
  });
});

describe('client cancellation', () => {
  it.each(['Unary', 'Bidi'] as const)("%s: the handler's deadline aborts with CANCELLED", async (kind) => {
    const hungBefore = suite.server.hung.length;
    const options = { deadline: Date.now() + 10_000 };
    type Cancellable = { cancel(): void; on(event: string, listener: () => void): unknown; write?(message: unknown): unknown };
    const call = (kind === 'Unary' ? suite.client.Unary({ text: 'hang' }, new suite.grpc.Metadata(), options, () => {}) : suite.client.Bidi(new suite.grpc.Metadata(), options)) as Cancellable;
    call.on('error', () => {}); // the cancel's own CANCELLED status, expected
    call.write?.({ text: 'hang' });
    while (suite.server.hung.length === hungBefore) await sleep(5);
    call.cancel();
    const reason = await suite.server.hung[hungBefore].deadlineAborted;
    expect(reason).toBeInstanceOf(DeadlineCancelledError);
    await suite.server.hung[hungBefore].cancelled;
    const span = serverSpan(kind);
    expect(span.attributes['deadline.outcome']).toBe('cancelled');
    expect(span.attributes['deadline.abort.code']).toBe('CANCELLED');
  });
});

describe("the caller's deadline passing", () => {
  it("aborts the handler's deadline with DEADLINE_EXCEEDED, not CANCELLED", async () => {
    const hungBefore = suite.server.hung.length;
    // An otel-deadline caller: its metadata carries the absolute cutoff, so the
    // server knows the cutoff has passed when the caller's cancel arrives.
    const deadline = openDeadline({ operation: 'parent', timeoutMs: 300, parent: null });
    const { error } = await context.with(setDeadline(context.active(), deadline), () => callKind(suite.client, 'Unary', 'hang'));
    deadline.dispose();
    expect(error?.code).toBe(suite.grpc.status.DEADLINE_EXCEEDED);
    const reason = await suite.server.hung[hungBefore].deadlineAborted;
    expect(reason).toBeInstanceOf(DeadlineExceededError);
    // The span ends when grpc-js reports the call cancelled, which may come after the cutoff's timer.
    await suite.server.hung[hungBefore].cancelled;
    const span = serverSpan('Unary');
    expect(span.attributes['deadline.outcome']).toBe('expired');
    expect(span.attributes['deadline.abort.code']).toBe('DEADLINE_EXCEEDED');
  });
});

describe('nothing outlives the call', () => {
  it.each(KINDS)('%s: the server call object keeps no listener of ours once the call ended', async (kind) => {
    // Baseline: a call without a deadline is not guarded at all.
    await callKind(suite.client, kind, 'echo');
    const plain = suite.server.calls.at(-1)!;
    await callKind(suite.client, kind, 'echo', { deadline: Date.now() + 10_000 });
    const guarded = suite.server.calls.at(-1)!;
    for (const event of ['cancelled', 'finish', 'error', errorMonitor] as const) {
      expect(guarded.listenerCount(event), String(event)).toBe(plain.listenerCount(event));
    }
  });
});
