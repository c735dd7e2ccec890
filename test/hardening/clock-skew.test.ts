/**
 * A sender whose wall clock is off by ±30 s, over a real loopback HTTP hop.
 *
 * The sender's skew is real as far as the package can tell: Date.now() is
 * shifted while the sender opens its deadline and injects it, so its
 * `x-deadline-at-ms` and baggage `deadline.at_ms` come from the skewed clock
 * while `x-deadline-remaining-ms` comes from the monotonic one, exactly as on
 * a host with a wrong clock.
 */
import {
  defaultTextMapGetter,
  propagation,
  ROOT_CONTEXT,
  SpanKind,
  trace,
  type Context,
  type TextMapPropagator,
} from '@opentelemetry/api';
import type { IncomingHttpHeaders } from 'node:http';
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import {
  DeadlineAttributes,
  DeadlinePropagator,
  getDeadline,
  openDeadline,
  setDeadline,
  type ClockPolicy,
} from '../../src';
import { installOtel, type TestOtel } from '../helpers/otel';
import { send, startFixture, type Fixture } from './http-fixture';

const SENDER_BUDGET_MS = 2_000;
const SKEW_MS = 30_000;

let otel: TestOtel;
let server: Fixture;
/** How the receiving hop reads headers; the default is the globally installed composite propagator. */
let receive: (headers: IncomingHttpHeaders) => Context;
const received: { budgetMs: number; remainingMs: number }[] = [];

beforeAll(async () => {
  otel = installOtel();
  server = await startFixture((req, res) => {
    const ctx = receive(req.headers);
    const span = trace.getTracer('clock-skew.test').startSpan('inventory.handle', { kind: SpanKind.SERVER }, ctx);
    const deadline = getDeadline(ctx);
    if (deadline !== undefined) received.push({ budgetMs: deadline.budgetMs, remainingMs: deadline.remainingMs() });
    span.end();
    res.end();
  });
});
afterAll(async () => {
  await server.close();
  await otel.shutdown();
});
beforeEach(() => {
  otel.exporter.reset();
  received.length = 0;
  receive = (headers) => propagation.extract(ROOT_CONTEXT, headers);
});

function receiveWith(clock: ClockPolicy): void {
  const propagator: TextMapPropagator = new DeadlinePropagator({ clock });
  receive = (headers) => propagator.extract(ROOT_CONTEXT, headers, defaultTextMapGetter);
}

/**
 * Opens a deadline and injects it on a host whose wall clock is `skewMs` off,
 * then sends it. Resolves with how long the whole exchange took, which bounds
 * the time the budget legitimately lost in flight.
 */
async function sendFromSkewedSender(skewMs: number): Promise<{ elapsedMs: number }> {
  const realNow = Date.now.bind(Date);
  const started = performance.now();
  const headers: Record<string, string> = {};
  const beforeOpen = realNow();
  const skewed = vi.spyOn(Date, 'now').mockImplementation(() => realNow() + skewMs);
  let deadline;
  try {
    deadline = openDeadline({ operation: 'checkout', timeoutMs: SENDER_BUDGET_MS, parent: null });
    propagation.inject(setDeadline(ROOT_CONTEXT, deadline), headers);
  } finally {
    skewed.mockRestore();
  }
  const afterInject = realNow();
  // The header is the skewed Date.now() read at the open, plus the budget: bracketed by the real
  // clock read before the open and after the inject, exactly (whole ms on all three reads).
  expect(Number(headers['x-deadline-at-ms'])).toBeGreaterThanOrEqual(beforeOpen + skewMs + SENDER_BUDGET_MS);
  expect(Number(headers['x-deadline-at-ms'])).toBeLessThanOrEqual(afterInject + skewMs + SENDER_BUDGET_MS);
  await send(`${server.url}/reserve`, { headers });
  deadline.dispose();
  return { elapsedMs: performance.now() - started };
}

/**
 * deadline.wire_skew_ms is at - (now + remaining): the sender's absolute value (its skewed Date.now()
 * at the open, truncated, plus the budget) minus the receiver's Date.now() (truncated) plus the
 * relative value (the monotonic time left at the inject, floored). With the open at mono t0, its
 * Date.now() at t1, the inject at t2 and the receiver's read at t3, that is the skew plus
 * (t1 - t0) - (t3 - t2), plus less than 1 ms from each of the two Date.now() truncations and less
 * than 1 ms more from the floor. Both gaps lie inside the sender's elapsedMs (read before the open
 * and after the reply), so the bounds are bracketed by it: a pause anywhere only widens them.
 */
function expectWireSkew(wireSkew: number, skewMs: number, elapsedMs: number): void {
  expect(wireSkew).toBeLessThanOrEqual(skewMs + elapsedMs + 2);
  expect(wireSkew).toBeGreaterThanOrEqual(skewMs - elapsedMs - 1);
}

function handlerSpanAttributes() {
  return otel.span('inventory.handle').attributes;
}

describe.each([
  ['ahead', SKEW_MS],
  ['behind', -SKEW_MS],
])('a sender whose clock is 30 s %s', (_label, skewMs) => {
  it('the default policy (min) never extends the budget', async () => {
    const { elapsedMs } = await sendFromSkewedSender(skewMs);
    expect(received).toHaveLength(1);
    const [{ budgetMs, remainingMs }] = received;
    expect(budgetMs).toBeLessThanOrEqual(SENDER_BUDGET_MS);
    expect(remainingMs).toBeLessThanOrEqual(SENDER_BUDGET_MS);
    if (skewMs > 0) {
      // The relative value wins: the budget is what the sender had, less the time in flight.
      expect(budgetMs).toBeGreaterThanOrEqual(SENDER_BUDGET_MS - elapsedMs - 1);
    } else {
      // The skewed absolute value wins: shorter, never longer. The hop starts out expired.
      expect(budgetMs).toBe(0);
    }
    expect(handlerSpanAttributes()[DeadlineAttributes.BUDGET_MS]).toBe(Math.round(budgetMs));
  });

  it('shows the skew in deadline.wire_skew_ms on the receiving span', async () => {
    const { elapsedMs } = await sendFromSkewedSender(skewMs);
    const wireSkew = handlerSpanAttributes()[DeadlineAttributes.WIRE_SKEW_MS] as number;
    expectWireSkew(wireSkew, skewMs, elapsedMs);
  });

  it("clock: 'relative' ignores the skew: the budget is the sender's remaining time", async () => {
    receiveWith('relative');
    const { elapsedMs } = await sendFromSkewedSender(skewMs);
    const [{ budgetMs }] = received;
    expect(budgetMs).toBeLessThanOrEqual(SENDER_BUDGET_MS);
    expect(budgetMs).toBeGreaterThanOrEqual(SENDER_BUDGET_MS - elapsedMs - 1);
    // The skew is still reported, for diagnosis.
    expectWireSkew(handlerSpanAttributes()[DeadlineAttributes.WIRE_SKEW_MS] as number, skewMs, elapsedMs);
  });

  it("clock: 'absolute' follows the sender's clock (why it is not the default)", async () => {
    receiveWith('absolute');
    const { elapsedMs } = await sendFromSkewedSender(skewMs);
    const [{ budgetMs }] = received;
    if (skewMs > 0) expect(budgetMs).toBeGreaterThanOrEqual(SENDER_BUDGET_MS + skewMs - elapsedMs - 1);
    else expect(budgetMs).toBe(0);
  });
});
