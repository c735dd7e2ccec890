import { context, ROOT_CONTEXT, trace } from '@opentelemetry/api';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
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

  it('is a whole number of ms, not after the cutoff and at most 1 ms before it', () => {
    const seen: unknown[] = [];
    const original = (_method: string, deadline: unknown) => {
      seen.push(deadline);
      return { start() {}, cancelWithStatus() {}, getPeer: () => 'target', sendMessageWithContext() {}, startRead() {}, halfClose() {}, getCallNumber: () => 1, setCredentials() {} };
    };
    const host = { grpcEnabled: true, settings: resolveConfig({}), tracer: trace.getTracer('test') };
    const createCall = makeCreateCallWrapper(host, class {} as never)(original as never);
    const channel = { getTarget: () => 'dns:///target:50051' };
    for (let i = 0; i < 20; i++) {
      const deadline = openDeadline({ operation: 'parent', timeoutMs: 5_000 + i / 7, parent: null });
      // The cutoff as an epoch, read as the wrapper reads it (Date.now() + remaining),
      // once before the call and once after. Each pair is read in the order in which a
      // pause between its two reads can only widen the bracket: the lower bound's clock
      // first, the upper bound's remaining time first. (Reading the remaining time after
      // both clock reads made the upper bound too small whenever the process was paused.)
      const beforeEpoch = Date.now();
      const lower = beforeEpoch + deadline.remainingMs();
      context.with(setDeadline(ROOT_CONTEXT, deadline), () => createCall.call(channel as never, '/test.Echo/Unary', Infinity, undefined, null, 0));
      const remainingAfter = deadline.remainingMs();
      const upper = remainingAfter + Date.now();
      const passed = seen[i] as number;
      expect(Number.isInteger(passed)).toBe(true);
      // Date.now() is truncated to whole ms (up to 1 ms low) and the wrapper rounds down
      // (up to 1 ms more): the value passed is within [lower - 2, upper + 1].
      expect(passed).toBeLessThanOrEqual(upper + 1);
      expect(passed).toBeGreaterThanOrEqual(lower - 2);
      deadline.dispose();
    }
  });
});
