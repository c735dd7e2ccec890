import { context, ROOT_CONTEXT, trace } from '@opentelemetry/api';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { openDeadline, setDeadline } from '../../src';
import { makeCreateCallWrapper } from '../../instrumentation/grpc/client';
import { resolveConfig } from '../../instrumentation/config';
import { installOtel, type TestOtel } from '../helpers/otel';

// grpc-js hands `deadline - Date.now()` to setTimeout as it is, and Node keeps
// one timer list per distinct duration: a fractional clamped deadline made a
// new timer list for every call. The clamped deadline is whole milliseconds,
// rounded down so that it never passes the cutoff.
describe('the clamped deadline handed to grpc-js', () => {
  let otel: TestOtel;
  beforeAll(() => {
    otel = installOtel();
  });
  afterAll(() => otel.shutdown());

  it('is a whole number of ms, not after the cutoff and less than 1 ms before it', () => {
    const seen: unknown[] = [];
    const original = (_method: string, deadline: unknown) => {
      seen.push(deadline);
      return { start() {}, cancelWithStatus() {}, getPeer: () => 'target', sendMessageWithContext() {}, startRead() {}, halfClose() {}, getCallNumber: () => 1, setCredentials() {} };
    };
    const host = { grpcEnabled: true, settings: resolveConfig({}), tracer: trace.getTracer('test') };
    const createCall = makeCreateCallWrapper(host, class {} as never)(original as never);
    const channel = { getTarget: () => 'dns:///target:50051' };
    // Both clocks are held still, so the bound is exact. With real clocks a pause inside the
    // wrapper, between its wall-clock read and its remaining-time read, moves the value it
    // hands over earlier by the length of the pause (the safe side, and not something a test
    // can bracket from outside): under CI load that pause exceeded the 1 ms allowed.
    const wallClock = vi.spyOn(Date, 'now').mockReturnValue(1_800_000_000_123);
    const monotonicClock = vi.spyOn(performance, 'now').mockReturnValue(98_765.4321);
    try {
      for (let i = 0; i < 20; i++) {
        const deadline = openDeadline({ operation: 'parent', timeoutMs: 5_000 + i / 7, parent: null });
        context.with(setDeadline(ROOT_CONTEXT, deadline), () => createCall.call(channel as never, '/test.Echo/Unary', Infinity, undefined, null, 0));
        const passed = seen[i] as number;
        expect(Number.isInteger(passed)).toBe(true);
        expect(passed).toBeLessThanOrEqual(deadline.expiresAtMs);
        expect(passed).toBeGreaterThan(deadline.expiresAtMs - 1);
        deadline.dispose();
      }
    } finally {
      wallClock.mockRestore();
      monotonicClock.mockRestore();
    }
  });
});
