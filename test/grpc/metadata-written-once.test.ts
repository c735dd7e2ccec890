import { context, propagation, type TextMapPropagator } from '@opentelemetry/api';
import { CompositePropagator, W3CBaggagePropagator, W3CTraceContextPropagator } from '@opentelemetry/core';
import { GrpcInstrumentation } from '@opentelemetry/instrumentation-grpc';
import { afterEach, describe, expect, it } from 'vitest';
import { DeadlinePropagator, openDeadline, setDeadline } from '../../src';
import { callKind, useEchoSuite } from './helpers';

// The guard leaves the deadline metadata as it is, but for a fresh remaining, only when the global propagator
// holds ours and wrote this call's cutoff a moment before (instrumentation-grpc's inject). Metadata an app
// forwards from an earlier call can hold the same cutoff with values that are not this call's: those are written again.
const suite = useEchoSuite(() => [new GrpcInstrumentation()]);

function useGlobalPropagators(propagators: TextMapPropagator[]): void {
  propagation.disable();
  propagation.setGlobalPropagator(new CompositePropagator({ propagators }));
}

afterEach(() => useGlobalPropagators([new W3CTraceContextPropagator(), new W3CBaggagePropagator(), new DeadlinePropagator()]));

/** Metadata as an app would forward it from an earlier call: `values` by key. */
function forwarded(values: Record<string, string>): import('@grpc/grpc-js').Metadata {
  const metadata = new suite.grpc.Metadata();
  for (const [key, value] of Object.entries(values)) metadata.set(key, value);
  return metadata;
}

/** One unary call under a 20 s deadline, with the metadata `values(atMs, remaining)` gives, read just before the call. */
async function callForwarding(values: (atMs: number, remaining: number) => Record<string, string>) {
  const deadline = openDeadline({ operation: 'parent', timeoutMs: 20_000, parent: null });
  const atMs = Math.floor(deadline.expiresAtMs);
  try {
    const { error, reply } = await context.with(setDeadline(context.active(), deadline), () =>
      callKind(suite.client, 'Unary', 'echo', {}, forwarded(values(atMs, Math.floor(deadline.remainingMs())))),
    );
    expect(error).toBeNull();
    return { atMs, reply: reply! };
  } finally {
    deadline.dispose();
  }
}

describe('deadline metadata forwarded from an earlier call, with no DeadlinePropagator in the global propagator', () => {
  it('has a stale remaining with the same cutoff replaced by this call\'s', async () => {
    useGlobalPropagators([new W3CTraceContextPropagator(), new W3CBaggagePropagator()]);
    const { atMs, reply } = await callForwarding((at) => ({
      'x-deadline-at-ms': String(at),
      'x-deadline-remaining-ms': '60000',
      baggage: `deadline.at_ms=${at}`,
    }));
    expect(reply.atMsHeader).toBe(String(atMs));
    expect(Number(reply.remainingHeader)).toBeLessThanOrEqual(20_000);
  });

  it('gets the cutoff into its baggage when only the headers hold it', async () => {
    useGlobalPropagators([new W3CTraceContextPropagator()]);
    const { atMs, reply } = await callForwarding(() => ({}));
    expect(reply.baggageHeader).toBe(`deadline.at_ms=${atMs}`);
    // The same, with the two headers forwarded fresh but no baggage.
    const again = await callForwarding((at, remaining) => ({ 'x-deadline-at-ms': String(at), 'x-deadline-remaining-ms': String(remaining) }));
    expect(again.reply.baggageHeader).toBe(`deadline.at_ms=${again.atMs}`);
  });
});

describe('a global propagator whose fields() throws', () => {
  it('does not break the call, which carries our metadata', async () => {
    const throwing: TextMapPropagator = {
      inject: () => {},
      extract: (ctx) => ctx,
      fields: () => {
        throw new Error('fields() broke');
      },
    };
    propagation.disable();
    propagation.setGlobalPropagator(throwing);
    const { atMs, reply } = await callForwarding(() => ({}));
    expect(reply.atMsHeader).toBe(String(atMs));
    expect(Number(reply.remainingHeader)).toBeLessThanOrEqual(20_000);
    expect(reply.baggageHeader).toBe(`deadline.at_ms=${atMs}`);
  });
});

describe('with DeadlinePropagator in the global propagator', () => {
  it('writes the remaining again when an interceptor held the start back past what instrumentation-grpc wrote', async () => {
    const { InterceptingCall } = suite.grpc;
    // instrumentation-grpc writes the metadata in the client method; this interceptor starts the call 50 ms later.
    const holdBack: import('@grpc/grpc-js').Interceptor = (options, nextCall) =>
      new InterceptingCall(nextCall(options), { start: (metadata, listener, next) => void setTimeout(() => next(metadata, listener), 50) });
    const deadline = openDeadline({ operation: 'parent', timeoutMs: 20_000, parent: null });
    try {
      const { error, reply, atCall } = await context.with(setDeadline(context.active(), deadline), async () => {
        const atCall = Math.floor(deadline.remainingMs());
        return { ...(await callKind(suite.client, 'Unary', 'echo', { interceptors: [holdBack] })), atCall };
      });
      expect(error).toBeNull();
      expect(Number(reply!.remainingHeader)).toBeLessThanOrEqual(atCall - 40);
      expect(reply!.atMsHeader).toBe(String(Math.floor(deadline.expiresAtMs)));
    } finally {
      deadline.dispose();
    }
  });

  it('sends the values instrumentation-grpc wrote, once each', async () => {
    const { atMs, reply } = await callForwarding(() => ({}));
    expect(reply.atMsHeader).toBe(String(atMs));
    expect(Number(reply.remainingHeader)).toBeLessThanOrEqual(20_000);
    expect(reply.baggageHeader).toBe(`deadline.at_ms=${atMs}`);
  });
});
