import { context, SpanKind, trace } from '@opentelemetry/api';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  admitEnvelope,
  DeadlineCancelledError,
  DeadlineExceededError,
  getDeadline,
  InsufficientBudgetError,
  openDeadline,
  readDeadlineEnvelope,
  setDeadline,
  toDeadlineEnvelope,
  withDeadline,
  withEnvelope,
  type DeadlineEnvelope,
} from '../../src';
import { installOtel, sleep, type TestOtel } from '../helpers/otel';

let otel: TestOtel;
beforeAll(() => {
  otel = installOtel();
});
afterAll(() => otel.shutdown());
beforeEach(() => otel.exporter.reset());

/** An envelope as a producer would have sent it `dwellMs` ago with `leftMs` of budget left now. */
function sentEarlier(dwellMs: number, leftMs: number): DeadlineEnvelope {
  const now = Date.now();
  return { v: 1, deadlineAtMs: now + leftMs, sentAtMs: now - dwellMs };
}

describe('toDeadlineEnvelope', () => {
  it('holds the absolute cutoff, the send time and the trace parent, never a duration, and survives JSON', async () => {
    let cutoff = 0;
    let spanId = '';
    const envelope = await withDeadline({ operation: 'agent.run', timeoutMs: 2_000, parent: null }, (d) => {
      cutoff = d.expiresAtMs;
      spanId = trace.getActiveSpan()!.spanContext().spanId;
      return toDeadlineEnvelope();
    });
    expect(Object.keys(envelope).sort()).toEqual(['deadlineAtMs', 'sentAtMs', 'traceparent', 'v']);
    expect(envelope.deadlineAtMs).toBe(Math.floor(cutoff));
    expect(Math.abs(envelope.sentAtMs - Date.now())).toBeLessThan(1_000);
    expect(envelope.traceparent).toMatch(new RegExp(`^00-[0-9a-f]{32}-${spanId}-01$`));
    expect(JSON.parse(JSON.stringify(envelope))).toEqual(envelope);
  });

  it('refuses to build an envelope without an active deadline', () => {
    expect(() => toDeadlineEnvelope()).toThrow(/needs an active deadline/);
  });
});

describe('admitEnvelope', () => {
  it('gives the worker the original cutoff, source remote and the dwell, not a reset budget', async () => {
    const sender = openDeadline({ operation: 'agent.run', timeoutMs: 2_000, parent: null });
    const envelope = JSON.parse(JSON.stringify(toDeadlineEnvelope(setDeadline(context.active(), sender))));
    await sleep(120);
    const job = admitEnvelope(envelope, { operation: 'report.render' });
    expect(job.expiresAtMs).toBe(Math.floor(sender.expiresAtMs));
    expect(job.source).toBe('remote');
    expect(job.operation).toBe('report.render');
    // The 120 ms sleep, read on the wall clock in whole ms; 10 ms covers a timer firing a little early.
    expect(job.queueDwellMs).toBeGreaterThanOrEqual(110);
    // The sender's time left read first: a pause before the job's read can only make the job's smaller.
    const senderLeft = sender.remainingMs();
    expect(job.remainingMs()).toBeLessThanOrEqual(senderLeft + 1);
    expect(job.remainingMs()).toBeLessThan(2_000 - 110);
    job.dispose();
    sender.dispose();
  });

  // Envelopes are built when each test runs, so a slow machine cannot age them before use.
  const refusals: [string, () => DeadlineEnvelope, object, unknown][] = [
    ['expired in the queue', () => sentEarlier(500, -10), {}, DeadlineExceededError],
    ['less than minUsefulMs left', () => sentEarlier(100, 200), { minUsefulMs: 500 }, InsufficientBudgetError],
    ['the reserve eats the budget', () => sentEarlier(100, 400), { minUsefulMs: 200, reserveMs: 300 }, InsufficientBudgetError],
    ['the worker is shutting down', () => sentEarlier(0, 5_000), { signal: AbortSignal.abort() }, DeadlineCancelledError],
  ];
  it.each(refusals)('refuses before any work: %s', (_name, envelope, options, type) => {
    expect(() => admitEnvelope(envelope(), options)).toThrow(type as never);
  });

  it('caps what a less trusted producer can ask for with maxRemainingMs', () => {
    const job = admitEnvelope(sentEarlier(0, 3_600_000), { maxRemainingMs: 1_000 });
    expect(job.remainingMs()).toBeLessThanOrEqual(1_000);
    job.dispose();
  });

  it('never ends later than a deadline already active in the worker', () => {
    const active = openDeadline({ operation: 'consumer', timeoutMs: 300, parent: null });
    const job = admitEnvelope(sentEarlier(0, 10_000), { parent: active });
    expect(job.expiresAtMs).toBe(active.expiresAtMs);
    expect(job.remainingMs()).toBeLessThanOrEqual(300);
    job.dispose();
    active.dispose();
  });

  const malformed: [string, unknown, RegExp][] = [
    ['null', null, /expected an object, got null/],
    ['a number', 42, /expected an object, got number/],
    ['an array', [], /got an array/],
    ['broken JSON', '{"v":1,', /not JSON/],
    ['JSON of a string', '"x"', /got string/],
    ['too long', `{"v":1,"pad":"${'x'.repeat(5_000)}"}`, /longer than/],
    ['another version', { v: 2, deadlineAtMs: 1, sentAtMs: 1 }, /unsupported version 2/],
    ['no version', { deadlineAtMs: 1, sentAtMs: 1 }, /unsupported version undefined/],
    ['cutoff as a string', { v: 1, deadlineAtMs: '1', sentAtMs: 1 }, /deadlineAtMs must be/],
    ['NaN cutoff', { v: 1, deadlineAtMs: NaN, sentAtMs: 1 }, /deadlineAtMs must be/],
    ['negative send time', { v: 1, deadlineAtMs: 1, sentAtMs: -1 }, /sentAtMs must be/],
    ['Infinity', { v: 1, deadlineAtMs: Infinity, sentAtMs: 1 }, /deadlineAtMs must be/],
    ['a duration instead of a cutoff', { v: 1, timeoutMs: 5_000, sentAtMs: 1 }, /deadlineAtMs must be/],
  ];
  it.each(malformed)('rejects a malformed envelope (%s) with a clear TypeError', (_name, input, message) => {
    expect(() => admitEnvelope(input)).toThrow(TypeError);
    expect(() => admitEnvelope(input)).toThrow(message);
  });

  it('accepts JSON text, ignores unknown fields and drops a bad traceparent', () => {
    const text = JSON.stringify({ ...sentEarlier(0, 1_000), traceparent: '00-zz-yy-01', extra: { nested: true } });
    expect(readDeadlineEnvelope(text)).toEqual({ v: 1, deadlineAtMs: expect.any(Number), sentAtMs: expect.any(Number) });
  });
});

describe('withEnvelope', () => {
  it('runs the job in a consumer span of the sender trace with deadline.queue_dwell_ms', async () => {
    const envelope = await withDeadline({ operation: 'agent.run', timeoutMs: 2_000, parent: null }, () => toDeadlineEnvelope());
    await sleep(80);
    const seen = await withEnvelope(envelope, { operation: 'report.render' }, (d) => ({
      same: getDeadline() === d,
      remaining: d.remainingMs(),
    }));
    expect(seen.same).toBe(true);
    const job = otel.span('report.render');
    const root = otel.span('agent.run');
    expect(job.kind).toBe(SpanKind.CONSUMER);
    expect(job.spanContext().traceId).toBe(root.spanContext().traceId);
    expect(job.parentSpanContext?.spanId).toBe(root.spanContext().spanId);
    expect(job.attributes['deadline.queue_dwell_ms']).toBeGreaterThanOrEqual(75);
    expect(job.attributes['deadline.source']).toBe('remote');
    expect(job.attributes['deadline.at_ms']).toBe(envelope.deadlineAtMs);
    expect(job.attributes['deadline.outcome']).toBe('completed');
  });

  it('refuses an expired job: fn never runs and the span says not_started', async () => {
    let ran = false;
    const err = await withEnvelope(sentEarlier(900, -100), { operation: 'late.job' }, () => {
      ran = true;
    }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(DeadlineExceededError);
    expect(ran).toBe(false);
    const span = otel.span('late.job');
    expect(span.attributes['deadline.outcome']).toBe('not_started');
    expect(span.attributes['deadline.queue_dwell_ms']).toBeGreaterThanOrEqual(900);
    expect(span.attributes['deadline.late']).toBeUndefined();
  });
});

