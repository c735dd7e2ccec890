import { context, SpanKind } from '@opentelemetry/api';
import { GrpcInstrumentation } from '@opentelemetry/instrumentation-grpc';
import { describe, expect, it } from 'vitest';
import { isDeadlineError, openDeadline, setDeadline, type ManagedDeadline } from '../../src';
import { passedDeadline } from '../helpers/clock';
import { callKind, expectFollowsGrpcDeadline, KINDS, useEchoSuite, type Kind } from './helpers';

// Both sides under otel-deadline, with @opentelemetry/instrumentation-grpc registered
// too (before us, as NodeSDK lists it): outcomes land on its spans, and we add none.
const suite = useEchoSuite(() => [new GrpcInstrumentation()]);

function under<T>(deadline: ManagedDeadline, fn: () => T): T {
  return context.with(setDeadline(context.active(), deadline), fn);
}

/** instrumentation-grpc names its spans `grpc.package.Service/Method`. */
function spanOf(kind: Kind, spanKind: SpanKind) {
  const found = suite.otel.spans().filter((span) => span.name === `grpc.test.Echo/${kind}` && span.kind === spanKind);
  expect(found).toHaveLength(1);
  return found[0];
}

function expectNoSpansOfOurs(): void {
  expect(suite.otel.spans().filter((span) => span.name.startsWith('test.Echo/'))).toEqual([]);
}

describe.each(KINDS)('%s', (kind) => {
  it('is clamped, and the handler runs under the cutoff within instrumentation-grpc\'s spans', async () => {
    const deadline = openDeadline({ operation: 'parent', timeoutMs: 5_000, parent: null });
    const { error, reply } = await under(deadline, () => callKind(suite.client, kind, 'echo', { deadline: Date.now() + 60_000 }));
    deadline.dispose();
    expect(error).toBeNull();
    // Transit bounds the relative value (1 s even under load); the absolute one is exact.
    expect(reply!.grpcDeadline!).toBeLessThan(deadline.expiresAtMs + 1_000);
    expect(Math.abs(reply!.ours!.expiresAtMs - deadline.expiresAtMs)).toBeLessThanOrEqual(2);
    const client = spanOf(kind, SpanKind.CLIENT);
    const server = spanOf(kind, SpanKind.SERVER);
    expect(server.parentSpanContext?.spanId).toBe(client.spanContext().spanId);
    expect(client.attributes['deadline.at_ms']).toBe(Math.floor(deadline.expiresAtMs));
    expect(server.attributes['deadline.source']).toBe('remote');
    expectNoSpansOfOurs();
  });

  it('records a client refusal as not_started on instrumentation-grpc\'s client span', async () => {
    const streams = suite.server.streams;
    const deadline = await passedDeadline('parent');
    const { error } = await under(deadline, () => callKind(suite.client, kind, 'echo'));
    deadline.dispose();
    expect(error?.code).toBe(suite.grpc.status.DEADLINE_EXCEEDED);
    expect(isDeadlineError(error)).toBe(true);
    expect(suite.server.streams).toBe(streams);
    const client = spanOf(kind, SpanKind.CLIENT);
    expect(client.attributes['deadline.outcome']).toBe('not_started');
    expect(client.attributes['rpc.grpc.status_code']).toBe(4);
    expectNoSpansOfOurs();
  });

  it('records the cutoff on both of instrumentation-grpc\'s spans', async () => {
    const hungBefore = suite.server.hung.length;
    const deadline = openDeadline({ operation: 'parent', timeoutMs: 300, parent: null });
    const { error } = await under(deadline, () => callKind(suite.client, kind, 'hang'));
    expect(error?.code).toBe(suite.grpc.status.DEADLINE_EXCEEDED);
    await suite.server.hung[hungBefore].cancelled;
    deadline.dispose();
    const client = spanOf(kind, SpanKind.CLIENT);
    expect(client.attributes['deadline.abort.code']).toBe('DEADLINE_EXCEEDED');
    expect(['expired', 'unknown']).toContain(client.attributes['deadline.outcome']);
    expectNoSpansOfOurs();
  });

  it('records a server refusal on instrumentation-grpc\'s server span', async () => {
    suite.instrumentation.setConfig({ minUsefulMs: 10_000 });
    const runs = suite.server.runs[kind];
    const { error } = await callKind(suite.client, kind, 'echo', { deadline: Date.now() + 2_000 });
    expect(error?.code).toBe(suite.grpc.status.DEADLINE_EXCEEDED);
    expect(error?.metadata?.get('x-deadline-expired')).toEqual(['1']);
    expect(suite.server.runs[kind]).toBe(runs);
    const server = spanOf(kind, SpanKind.SERVER);
    expect(server.attributes['deadline.outcome']).toBe('not_started');
    expect(server.attributes['deadline.abort.code']).toBe('INSUFFICIENT_BUDGET');
    expectNoSpansOfOurs();
  });
});

describe("reusing the deadline instrumentation-grpc's propagator extracted", () => {
  it('is not done when grpc-timeout, which grpc-js keeps out of the metadata, is earlier', async () => {
    const metadata = new suite.grpc.Metadata();
    metadata.set('x-deadline-at-ms', String(Date.now() + 60_000));
    const { reply } = await callKind(suite.client, 'Unary', 'echo', { deadline: Date.now() + 5_000 }, metadata);
    // The handler ends with grpc-js's deadline (5 s), not at the 60 s in the metadata.
    expectFollowsGrpcDeadline(reply!.ours!.expiresAtMs, reply!.grpcDeadline!);
  });

  it('caps it at maxIncomingMs', async () => {
    suite.instrumentation.setConfig({ maxIncomingMs: 1_000 });
    const deadline = openDeadline({ operation: 'parent', timeoutMs: 60_000, parent: null });
    const { reply } = await under(deadline, () => callKind(suite.client, 'Unary', 'echo'));
    deadline.dispose();
    expect(reply!.ours!.remainingMs).toBeLessThanOrEqual(1_000);
  });
});
