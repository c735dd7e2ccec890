import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  admit,
  DeadlineCancelledError,
  DeadlineExceededError,
  getDeadline,
  InsufficientBudgetError,
  openDeadline,
  type ManagedDeadline,
  withAdmission,
  withDeadline,
} from '../../src';
import { passedDeadline } from '../helpers/clock';
import { installOtel, sleep, type TestOtel } from '../helpers/otel';
import { reply, startDependency, type FakeDependency } from './fixtures';

let otel: TestOtel;
let enrichment: FakeDependency | undefined;
beforeAll(() => {
  otel = installOtel();
});
afterAll(() => otel.shutdown());
beforeEach(() => otel.exporter.reset());
afterEach(async () => {
  await enrichment?.close();
  enrichment = undefined;
});

function cancelledAfterOpening() {
  const caller = new AbortController();
  const d = openDeadline({ operation: 'r', timeoutMs: 5_000, parent: null, signal: caller.signal });
  caller.abort(new Error('left'));
  return d;
}

describe('admit', () => {
  it('returns the usable time: remaining minus the reserve', () => {
    const started = performance.now();
    const d = openDeadline({ operation: 'agent.run', timeoutMs: 1_000, parent: null });
    const usable = admit(200, { reserveMs: 300, deadline: d });
    const elapsedMs = performance.now() - started;
    // 1 000 ms less the reserve, less the time since the open, which the monotonic reads around
    // the open and the admit bracket (a pause between them widens the bracket, never fails it).
    expect(usable).toBeGreaterThanOrEqual(700 - elapsedMs);
    expect(usable).toBeLessThanOrEqual(700);
    d.dispose();
  });

  const refusals: [string, number, object, () => ManagedDeadline | Promise<ManagedDeadline>, unknown][] = [
    ['too little usable after the reserve', 500, { reserveMs: 300 }, () => openDeadline({ operation: 'r', timeoutMs: 700, parent: null }), InsufficientBudgetError],
    ['nothing usable at all', 0, { reserveMs: 800 }, () => openDeadline({ operation: 'r', timeoutMs: 700, parent: null }), InsufficientBudgetError],
    ['a passed deadline', 0, {}, () => passedDeadline('r'), DeadlineExceededError],
    ['a cancelled deadline', 0, {}, cancelledAfterOpening, DeadlineCancelledError],
  ];
  it.each(refusals)('throws for %s', async (_name, minUsefulMs, options, make, type) => {
    const d = await make();
    expect(() => admit(minUsefulMs, { ...options, deadline: d })).toThrow(type as never);
    d.dispose();
  });

  it('reads the active deadline, and admits anything with none (Infinity)', async () => {
    expect(admit(10_000)).toBe(Infinity);
    await withDeadline({ operation: 'agent.run', timeoutMs: 300, parent: null }, () => {
      expect(getDeadline()).toBeDefined();
      expect(() => admit(400)).toThrow(InsufficientBudgetError);
      expect(() => admit(100, { reserveMs: 250 })).toThrow(/needs 350 ms/);
    });
  });

  it('rejects bad arguments clearly', () => {
    expect(() => admit(-1)).toThrow(RangeError);
    expect(() => admit(NaN)).toThrow(RangeError);
    expect(() => admit(1, { reserveMs: Infinity })).toThrow(RangeError);
    expect(() => admit('5' as never)).toThrow(TypeError);
  });
});

describe('withAdmission: keeping 300 ms to serialize a partial answer', () => {
  it('skips an optional enrichment that cannot fit, returns the partial result; the skipped span is not_started', async () => {
    enrichment = await startDependency((_req, res) => reply(res, 200, { extra: true }));
    const url = enrichment.url;
    const answer = await withDeadline({ operation: 'agent.run', timeoutMs: 900, parent: null }, async () => {
      const parts: string[] = ['facts'];
      await sleep(300); // planning and the required tools used part of the budget
      try {
        await withAdmission({ operation: 'enrichment', minUsefulMs: 400, reserveMs: 300 }, async (d) => {
          const res = await fetch(url, { signal: d.signal });
          parts.push(((await res.json()) as { extra: boolean }).extra ? 'comparison' : '');
        });
      } catch (err) {
        if (!(err instanceof InsufficientBudgetError)) throw err;
      }
      return { status: parts.length === 1 ? 'partial' : 'complete', parts, leftMs: getDeadline()!.remainingMs() };
    });
    expect(answer.status).toBe('partial');
    expect(answer.parts).toEqual(['facts']);
    // About 600 ms are left when the enrichment is refused; an enrichment that ran would eat down to the 300 ms reserve.
    expect(answer.leftMs).toBeGreaterThan(250);
    expect(enrichment.arrivals).toHaveLength(0);
    const skipped = otel.span('enrichment');
    expect(skipped.attributes['deadline.outcome']).toBe('not_started');
    expect(skipped.parentSpanContext?.spanId).toBe(otel.span('agent.run').spanContext().spanId);
    expect(skipped.attributes['deadline.late']).toBeUndefined();
  });

  it('runs the enrichment when it fits, with a deadline that ends reserveMs before the caller', async () => {
    let rootCutoff = 0;
    let childCutoff = 0;
    await withDeadline({ operation: 'agent.run', timeoutMs: 2_000, parent: null }, async (root) => {
      rootCutoff = root.expiresAtMs;
      await withAdmission({ operation: 'enrichment', minUsefulMs: 400, reserveMs: 300 }, (d) => {
        childCutoff = d.expiresAtMs;
      });
    });
    // The reserve comes off the caller's cutoff itself, not off a time left read a moment earlier:
    // exactly 300 ms, to floating-point rounding of the epoch values (no pause can move it).
    expect(rootCutoff - childCutoff).toBeCloseTo(300, 3);
    expect(otel.span('enrichment').attributes['deadline.outcome']).toBe('completed');
  });

  it('needs a deadline or a timeoutMs', async () => {
    await expect(withAdmission({ operation: 'x', minUsefulMs: 1 }, () => 1)).rejects.toThrow(/active deadline or a timeoutMs/);
    expect(await withAdmission({ operation: 'x', minUsefulMs: 1, timeoutMs: 100 }, () => 2)).toBe(2);
  });
});
