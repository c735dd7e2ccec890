import { context, trace } from '@opentelemetry/api';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  DeadlineExceededError,
  getDeadline,
  InsufficientBudgetError,
  openDeadline,
  setDeadline,
  withDeadline,
  type Deadline,
} from '../src';
import { untilPassed } from './helpers/clock';
import { installOtel, sleep, type TestOtel } from './helpers/otel';

let otel: TestOtel;
beforeAll(() => {
  otel = installOtel();
});
afterAll(() => otel.shutdown());
beforeEach(() => otel.exporter.reset());

describe('withDeadline', () => {
  it('makes the deadline active for fn, runs it in a span named after the operation, then disposes', async () => {
    let seen: Deadline | undefined;
    let spanInside: string | undefined;
    const result = await withDeadline({ operation: 'agent.run', timeoutMs: 1_000, parent: null }, async () => {
      seen = getDeadline();
      spanInside = trace.getActiveSpan()?.spanContext().spanId;
      await sleep(5);
      return 42;
    });
    expect(result).toBe(42);
    expect(seen?.operation).toBe('agent.run');
    expect((seen as unknown as { disposed: boolean }).disposed).toBe(true);
    const span = otel.span('agent.run');
    expect(span.spanContext().spanId).toBe(spanInside);
    expect(span.attributes['deadline.outcome']).toBe('completed');
    expect(getDeadline()).toBeUndefined();
  });

  it('clamps under the active deadline by default and nests spans', async () => {
    await withDeadline({ operation: 'root', timeoutMs: 500, parent: null }, async (root) => {
      await withDeadline({ operation: 'child', timeoutMs: 60_000 }, async (child) => {
        expect(child.expiresAtMs).toBe(root.expiresAtMs);
        expect(child.parent).toBe(root);
      });
    });
    const child = otel.span('child');
    const root = otel.span('root');
    expect(child.parentSpanContext?.spanId).toBe(root.spanContext().spanId);
    expect(child.attributes['deadline.at_ms']).toBe(root.attributes['deadline.at_ms']);
  });

  it('rethrows fn errors after ending the span with an error status and no message text', async () => {
    const failure = new Error('secret prompt text');
    await expect(withDeadline({ operation: 'fails', timeoutMs: 500, parent: null }, () => Promise.reject(failure))).rejects.toBe(
      failure,
    );
    const span = otel.span('fails');
    expect(span.status.code).toBe(2);
    expect(JSON.stringify({ status: span.status, attributes: span.attributes, events: span.events })).not.toContain(
      'secret prompt text',
    );
  });

  it('refuses work that cannot fit, and still records a not_started span', async () => {
    let ran = false;
    await withDeadline({ operation: 'root', timeoutMs: 200, parent: null }, async () => {
      await expect(
        withDeadline({ operation: 'enrich', timeoutMs: 5_000, minUsefulMs: 150, reserveMs: 100 }, async () => {
          ran = true;
        }),
      ).rejects.toBeInstanceOf(InsufficientBudgetError);
    });
    expect(ran).toBe(false);
    const skipped = otel.span('enrich');
    expect(skipped.attributes['deadline.outcome']).toBe('not_started');
    expect(skipped.attributes['deadline.late']).toBeUndefined();
  });

  it('refuses under an expired parent with DeadlineExceededError', async () => {
    const parent = openDeadline({ operation: 'p', timeoutMs: 5, parent: null });
    await untilPassed(parent);
    await expect(
      context.with(setDeadline(context.active(), parent), () => withDeadline({ operation: 'late', timeoutMs: 100 }, () => 1)),
    ).rejects.toBeInstanceOf(DeadlineExceededError);
    expect(otel.span('late').attributes['deadline.outcome']).toBe('not_started');
    parent.dispose();
  });

  it('rejects a non-function', async () => {
    await expect(withDeadline({ operation: 'x', timeoutMs: 5, parent: null }, 5 as never)).rejects.toThrow(TypeError);
  });
});
