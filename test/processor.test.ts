import { context, defaultTextMapGetter, propagation, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { DeadlineSpanProcessor, openDeadline, setDeadline, withDeadline } from '../src';
import { passedDeadline, untilPassed } from './helpers/clock';
import { markStatementInFlight } from '../src/processor/statement-in-flight';
import { aborted, installOtel, sleep, type TestOtel } from './helpers/otel';

let otel: TestOtel;
beforeAll(() => {
  otel = installOtel();
});
afterAll(() => otel.shutdown());
beforeEach(() => otel.exporter.reset());

const tracer = () => trace.getTracer('processor-test');

describe('attributes at start', () => {
  it('records the cutoff, remaining, budget, source and operation of a local deadline', async () => {
    // Each value is bracketed by reads of its own clock around the work, so a pause anywhere can
    // only widen a bracket: the cutoff is wall-clock epoch ms (Date.now() at the open plus the
    // budget), the time left is counted on the monotonic clock.
    const before = Date.now();
    const startedMono = performance.now();
    await withDeadline({ operation: 'agent.run', timeoutMs: 1_000, parent: null }, () => sleep(1));
    const elapsedMono = performance.now() - startedMono;
    const after = Date.now();
    const a = otel.span('agent.run').attributes;
    expect(a['deadline.at_ms']).toBeGreaterThanOrEqual(before + 1_000);
    expect(a['deadline.at_ms']).toBeLessThanOrEqual(after + 1_000);
    expect(Number.isInteger(a['deadline.at_ms'])).toBe(true);
    // Taken at span start, right after the open: Math.floor(1_000 - t), where t is the monotonic time
    // from the open to the span start, which lies inside [startedMono, startedMono + elapsedMono].
    // (The old lower bound, at_ms - Date.now() - 2, set a wall-clock cutoff against a monotonic
    // remaining time; this one stays on the one clock.)
    expect(a['deadline.remaining_ms']).toBeLessThanOrEqual(1_000);
    expect(a['deadline.remaining_ms']).toBeGreaterThanOrEqual(Math.floor(1_000 - elapsedMono));
    expect(Number.isInteger(a['deadline.remaining_ms'])).toBe(true);
    expect(a['deadline.budget_ms']).toBe(1_000);
    expect(a['deadline.source']).toBe('local');
    expect(a['deadline.operation']).toBe('agent.run');
    expect(a['deadline.wire_skew_ms']).toBeUndefined();
  });

  it('records a remote deadline with what arrived as its budget, and the wire skew', () => {
    const sent = Date.now();
    const headers = { 'x-deadline-remaining-ms': '800', 'x-deadline-at-ms': String(sent + 800 - 30_000) };
    const ctx = propagation.extract(context.active(), headers, defaultTextMapGetter);
    const extracted = Date.now();
    tracer().startSpan('handle', { kind: SpanKind.SERVER }, ctx).end();
    const a = otel.span('handle').attributes;
    expect(a['deadline.source']).toBe('remote');
    // The skew is the absolute value minus (extract's clock + the relative value):
    // -30 s, less the ms that passed between writing the header and extracting it.
    expect(a['deadline.wire_skew_ms']).toBeLessThanOrEqual(-30_000);
    expect(a['deadline.wire_skew_ms']).toBeGreaterThanOrEqual(-30_000 - (extracted - sent));
    // The skewed absolute value is earlier, and the default policy takes the earliest: it is already expired.
    expect(a['deadline.remaining_ms']).toBe(0);
    expect(a['deadline.budget_ms']).toBe(0);
  });

  it('leaves spans without a deadline untouched', () => {
    tracer().startSpan('plain').end();
    expect(Object.keys(otel.span('plain').attributes).filter((k) => k.startsWith('deadline.'))).toEqual([]);
  });
});

describe('attributes at end', () => {
  it('marks work that finished in time as completed', async () => {
    const start = performance.now();
    await withDeadline({ operation: 'quick', timeoutMs: 1_000, parent: null }, () => sleep(1));
    const elapsed = performance.now() - start;
    const a = otel.span('quick').attributes;
    expect(a['deadline.outcome']).toBe('completed');
    expect(a['deadline.exceeded']).toBe(false);
    // What was left at the end: the budget less the time the scope took (bracketed on the same clock; 1 ms for whole-ms rounding).
    expect(a['deadline.remaining_at_end_ms']).toBeGreaterThanOrEqual(1_000 - elapsed - 1);
    expect(a['deadline.remaining_at_end_ms']).toBeLessThanOrEqual(1_000);
    expect(a['deadline.abort.code']).toBeUndefined();
    expect(a['deadline.late']).toBeUndefined();
  });

  it('marks work stopped at its cutoff as expired, with the abort code and reason', async () => {
    await withDeadline({ operation: 'slow', timeoutMs: 30, parent: null }, (d) => aborted(d.signal));
    const a = otel.span('slow').attributes;
    expect(a['deadline.outcome']).toBe('expired');
    expect(a['deadline.exceeded']).toBe(true);
    expect(a['deadline.remaining_at_end_ms']).toBe(0);
    expect(a['deadline.abort.code']).toBe('DEADLINE_EXCEEDED');
    expect(a['deadline.abort.reason']).toMatch(/deadline of "slow" passed at/);
  });

  it('reads a cutoff that passed while the span ran, before any timer could fire, as expired in every attribute at once', () => {
    const d = openDeadline({ operation: 'overran', timeoutMs: 5, parent: null });
    const span = tracer().startSpan('overran', {}, setDeadline(ROOT_CONTEXT, d));
    // No await: the deadline's timer cannot run, so only a clock read at the end can tell the cutoff passed.
    while (d.remainingMs() > 0);
    span.end();
    const a = otel.span('overran').attributes;
    expect(a['deadline.outcome']).toBe('expired');
    expect(a['deadline.exceeded']).toBe(true);
    expect(a['deadline.remaining_at_end_ms']).toBe(0);
    expect(a['deadline.abort.code']).toBe('DEADLINE_EXCEEDED');
    expect(a['deadline.abort.reason']).toMatch(/deadline of "overran" passed at/);
    d.dispose();
  });

  it('marks work whose caller went away as cancelled, without copying the reason text', async () => {
    const caller = new AbortController();
    await withDeadline({ operation: 'cancelled', timeoutMs: 5_000, parent: null, signal: caller.signal }, async (d) => {
      setTimeout(() => caller.abort(new Error('user token sk-123 in message')), 5);
      await aborted(d.signal);
    });
    const a = otel.span('cancelled').attributes;
    expect(a['deadline.outcome']).toBe('cancelled');
    expect(a['deadline.exceeded']).toBe(false);
    expect(a['deadline.abort.code']).toBe('CANCELLED');
    expect(a['deadline.abort.reason']).toBe('Error');
  });

  it('gives a child span of an aborted parent the parent reason', async () => {
    const caller = new AbortController();
    await withDeadline({ operation: 'root', timeoutMs: 5_000, parent: null, signal: caller.signal }, () =>
      withDeadline({ operation: 'leaf', timeoutMs: 5_000 }, async (leaf) => {
        caller.abort('client left');
        await aborted(leaf.signal);
      }),
    );
    expect(otel.span('leaf').attributes['deadline.outcome']).toBe('cancelled');
    expect(otel.span('root').attributes['deadline.outcome']).toBe('cancelled');
  });
  it('ends a span past its cutoff once, without running abort listeners inside span.end()', async () => {
    // The cutoff has passed on the clock but its timer has not run (the event loop is busy): the
    // processor reads the deadline in onEnding, before the SDK marks the span ended. Had that read
    // fired the abort, a listener ending the same span (instrumentation-ioredis does, through a
    // command guard) would end it again from inside end() and the exporter would get it twice.
    const cut = openDeadline({ operation: 'cut', timeoutMs: 5, parent: null });
    const span = tracer().startSpan('ended-once', {}, setDeadline(ROOT_CONTEXT, cut));
    let endedInsideEnd = false;
    let ending = false;
    cut.signal.addEventListener('abort', () => {
      endedInsideEnd = ending;
      span.end();
    });
    while (!cut.expired); // past the cutoff before its timer can run
    ending = true;
    span.end();
    ending = false;
    expect(endedInsideEnd).toBe(false);
    expect(otel.exporter.getFinishedSpans().filter((s) => s.name === 'ended-once')).toHaveLength(1);
    await aborted(cut.signal); // the timer's abort reaches the listener afterwards: the span stays ended once
    cut.dispose();
    expect(otel.exporter.getFinishedSpans().filter((s) => s.name === 'ended-once')).toHaveLength(1);
    const a = otel.span('ended-once').attributes;
    expect(a['deadline.outcome']).toBe('expired');
    expect(a['deadline.abort.code']).toBe('DEADLINE_EXCEEDED');
    expect(a['deadline.abort.reason']).toMatch(/deadline of "cut" passed at/);
  });
});

describe('lateness', () => {
  it('flags later_than_parent when a child opens a new root with a longer budget', async () => {
    await withDeadline({ operation: 'request', timeoutMs: 200, parent: null }, () =>
      withDeadline({ operation: 'rogue', timeoutMs: 10_000, parent: null }, () => sleep(1)),
    );
    const rogue = otel.span('rogue').attributes;
    expect(rogue['deadline.late']).toBe(true);
    expect(rogue['deadline.violation']).toBe('later_than_parent');
    expect(otel.span('request').attributes['deadline.late']).toBeUndefined();
  });

  it('does not flag a clamped child', async () => {
    await withDeadline({ operation: 'request', timeoutMs: 200, parent: null }, () =>
      withDeadline({ operation: 'clamped', timeoutMs: 10_000 }, () => sleep(1)),
    );
    expect(otel.span('clamped').attributes['deadline.late']).toBeUndefined();
  });

  it('flags ended_after_parent for unawaited work that outlives its parent span', async () => {
    let followUp: Promise<void> | undefined;
    await withDeadline({ operation: 'tool', timeoutMs: 5_000, parent: null }, async () => {
      followUp = withDeadline({ operation: 'follow-up', timeoutMs: 5_000 }, () => sleep(30));
    });
    await followUp;
    const a = otel.span('follow-up').attributes;
    expect(a['deadline.late']).toBe(true);
    expect(a['deadline.violation']).toBe('ended_after_parent');
  });

  it('flags ended_after_parent for a follow-up that starts after its parent span ended', async () => {
    let release: () => void = () => {};
    const gate = new Promise<void>((resolve) => (release = resolve));
    let followUp: Promise<void> | undefined;
    await withDeadline({ operation: 'tool', timeoutMs: 5_000, parent: null }, async () => {
      followUp = gate.then(() => withDeadline({ operation: 'released', timeoutMs: 1_000 }, () => sleep(1)));
    });
    release();
    await followUp;
    const a = otel.span('released').attributes;
    expect(a['deadline.late']).toBe(true);
    expect(a['deadline.violation']).toBe('ended_after_parent');
  });

  it('flags started_after_cancel for work started under a cancelled deadline, and not a refusal', async () => {
    const caller = new AbortController();
    await withDeadline({ operation: 'request', timeoutMs: 5_000, parent: null, signal: caller.signal }, async () => {
      caller.abort('client left');
      tracer().startSpan('ignores-cancel').end();
      await expect(withDeadline({ operation: 'refused', timeoutMs: 100 }, () => 1)).rejects.toThrow();
    });
    expect(otel.span('ignores-cancel').attributes['deadline.violation']).toBe('started_after_cancel');
    expect(otel.span('refused').attributes['deadline.outcome']).toBe('not_started');
    expect(otel.span('refused').attributes['deadline.late']).toBeUndefined();
  });

  it('does not flag a consumer span that runs after its producer span ended', async () => {
    let producerCtx = context.active();
    await withDeadline({ operation: 'enqueue', timeoutMs: 5_000, parent: null }, async () => {
      const producer = tracer().startSpan('send', { kind: SpanKind.PRODUCER });
      producerCtx = trace.setSpan(context.active(), producer);
      producer.end();
    });
    await sleep(5);
    tracer().startSpan('process', { kind: SpanKind.CONSUMER }, producerCtx).end();
    expect(otel.span('process').attributes['deadline.late']).toBeUndefined();
  });

  it('flags ended_after_deadline for work that ignores its signal', async () => {
    // The work ignores its signal and ends at least 380 ms past the 20 ms cutoff, well beyond the 250 ms default allowance.
    await withDeadline({ operation: 'stubborn', timeoutMs: 20, parent: null }, () => sleep(400));
    const a = otel.span('stubborn').attributes;
    expect(a['deadline.stop_lag_ms']).toBeGreaterThanOrEqual(380);
    expect(a['deadline.late']).toBe(true);
    expect(a['deadline.violation']).toBe('ended_after_deadline');
    expect(a['deadline.outcome']).toBe('expired');
  });

  it('does not flag an abort that unwinds within the grace period', async () => {
    // A provider of its own with a wide grace, so a timer delayed by a loaded machine cannot flip the result.
    const exporter = new InMemorySpanExporter();
    const provider = new BasicTracerProvider({
      spanProcessors: [new DeadlineSpanProcessor({ lateGraceMs: 1_000 }), new SimpleSpanProcessor(exporter)],
    });
    const d = openDeadline({ operation: 'prompt', timeoutMs: 20, parent: null });
    const span = provider.getTracer('grace').startSpan('prompt', {}, setDeadline(ROOT_CONTEXT, d));
    await aborted(d.signal);
    span.end();
    const a = exporter.getFinishedSpans()[0].attributes;
    expect(a['deadline.outcome']).toBe('expired');
    expect(a['deadline.violation']).toBeUndefined();
    d.dispose();
    await provider.shutdown();
  });

  it('works on span objects that take no new properties', async () => {
    // A processor ahead of ours seals every span against new properties; the SDK itself only writes existing ones.
    const sealing = { onStart: (span: object) => void Object.preventExtensions(span), onEnd() {}, forceFlush: async () => {}, shutdown: async () => {} };
    const exporter = new InMemorySpanExporter();
    const provider = new BasicTracerProvider({ spanProcessors: [sealing, new DeadlineSpanProcessor(), new SimpleSpanProcessor(exporter)] });
    const sealed = provider.getTracer('sealed');
    const d = openDeadline({ operation: 'parent', timeoutMs: 1_000, parent: null });
    const parent = sealed.startSpan('parent', {}, setDeadline(ROOT_CONTEXT, d));
    const child = sealed.startSpan('child', {}, trace.setSpan(setDeadline(ROOT_CONTEXT, d), parent));
    parent.end();
    // A later event-loop turn, not only a later time: a 1 ms timer can fire in the timers phase the parent ended in,
    // and a child ending on its parent's turn is not flagged (src/processor/event-loop-turn.ts).
    await sleep(1);
    await new Promise((resolve) => setImmediate(resolve));
    child.end();
    const byName = Object.fromEntries(exporter.getFinishedSpans().map((s) => [s.name, s.attributes]));
    expect(byName.parent['deadline.outcome']).toBe('completed');
    expect(byName.child['deadline.outcome']).toBe('completed');
    expect(byName.child['deadline.violation']).toBe('ended_after_parent');
    d.dispose();
    await provider.shutdown();
  });

  it('flags started_after_expiry for a span started when its deadline had passed', async () => {
    const d = await passedDeadline('request');
    context.with(setDeadline(context.active(), d), () => tracer().startSpan('too-late').end());
    const a = otel.span('too-late').attributes;
    expect(a['deadline.late']).toBe(true);
    expect(String(a['deadline.violation']).split(',')).toContain('started_after_expiry');
    expect(a['deadline.remaining_ms']).toBe(0);
    d.dispose();
  });

  it("compares a child that starts after its parent span ended with the parent's cutoff", () => {
    const parent = openDeadline({ operation: 'parent', timeoutMs: 1_000, parent: null });
    const parentContext = setDeadline(ROOT_CONTEXT, parent);
    const parentSpan = tracer().startSpan('ended-parent', {}, parentContext);
    parentSpan.end();
    // Started after the parent ended: the same deadline is not later, a new root with a longer budget is.
    const underParent = trace.setSpan(parentContext, parentSpan);
    tracer().startSpan('same-deadline', {}, underParent).end();
    const rogue = openDeadline({ operation: 'rogue', timeoutMs: 10_000, parent: null });
    tracer().startSpan('longer-root', {}, setDeadline(underParent, rogue)).end();
    const clamped = parent.child('clamped', 10_000);
    tracer().startSpan('clamped-child', {}, setDeadline(underParent, clamped)).end();
    for (const d of [clamped, rogue, parent]) d.dispose();
    const violations = (name: string) => String(otel.span(name).attributes['deadline.violation']).split(',');
    expect(violations('same-deadline')).toEqual(['ended_after_parent']);
    expect(violations('longer-root')).toEqual(['later_than_parent', 'ended_after_parent']);
    expect(violations('clamped-child')).toEqual(['ended_after_parent']);
  });

  it('lets go of the deadline once its span has ended, while the span waits to be exported', async () => {
    setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as () => void;
    const held = (() => {
      const deadline = openDeadline({ operation: 'held', timeoutMs: 1_000, parent: null });
      tracer().startSpan('held', {}, setDeadline(ROOT_CONTEXT, deadline)).end();
      deadline.dispose();
      return new WeakRef(deadline);
    })();
    await sleep(1);
    gc();
    // The in-memory exporter still holds the span, as a batch queue would.
    expect(otel.span('held').attributes['deadline.outcome']).toBe('completed');
    expect(held.deref()).toBeUndefined();
  });

  it('joins several violation kinds with commas', async () => {
    let rogue: Promise<void> | undefined;
    await withDeadline({ operation: 'parent', timeoutMs: 100, parent: null }, async () => {
      rogue = withDeadline({ operation: 'both', timeoutMs: 10_000, parent: null }, () => sleep(30));
    });
    await rogue;
    expect(otel.span('both').attributes['deadline.violation']).toBe('later_than_parent,ended_after_parent');
  });
});

/** Histogram counts and sums of `deadline.remaining` so far, by span kind. */
async function remainingByKind(): Promise<Record<string, { count: number; sum: number }>> {
  const byKind: Record<string, { count: number; sum: number }> = {};
  for (const p of await otel.metricPoints('deadline.remaining')) byKind[String(p.attributes['span.kind'])] = { count: p.value, sum: p.sum ?? 0 };
  return byKind;
}

describe('metrics', () => {
  it('counts violations by kind and aborts by code', async () => {
    await withDeadline({ operation: 'request', timeoutMs: 200, parent: null }, () =>
      withDeadline({ operation: 'rogue', timeoutMs: 10_000, parent: null }, () => sleep(1)),
    );
    await withDeadline({ operation: 'slow', timeoutMs: 20, parent: null }, (d) => aborted(d.signal));
    const violations = await otel.metricPoints('deadline.violations');
    expect(violations.find((p) => p.attributes['deadline.violation'] === 'later_than_parent')?.value).toBeGreaterThanOrEqual(1);
    const aborts = await otel.metricPoints('deadline.aborts');
    expect(aborts.find((p) => p.attributes['deadline.abort.code'] === 'DEADLINE_EXCEEDED')?.value).toBeGreaterThanOrEqual(1);
  });

  it('records the remaining budget at hop entries only: server and consumer spans', async () => {
    const before = await remainingByKind();
    const deadline = openDeadline({ operation: 'hop', timeoutMs: 5_000, parent: null });
    const ctx = setDeadline(ROOT_CONTEXT, deadline);
    for (const kind of [SpanKind.SERVER, SpanKind.CONSUMER, SpanKind.CLIENT, SpanKind.PRODUCER, SpanKind.INTERNAL]) {
      tracer().startSpan(`kind ${kind}`, { kind }, ctx).end();
    }
    // A hop entry without a deadline has no budget to record.
    tracer().startSpan('server without deadline', { kind: SpanKind.SERVER }, ROOT_CONTEXT).end();
    deadline.dispose();
    const after = await remainingByKind();

    const added = (kind: string) => (after[kind]?.count ?? 0) - (before[kind]?.count ?? 0);
    expect({ server: added('server'), consumer: added('consumer') }).toEqual({ server: 1, consumer: 1 });
    // The budget that reached the hop: at most what was opened, and not used up by five span starts.
    const serverSum = after.server.sum - (before.server?.sum ?? 0);
    expect(serverSum).toBeGreaterThan(0);
    expect(serverSum).toBeLessThanOrEqual(5_000);
    // Every span of this file so far, client and internal ones included, still carries its attributes,
    // but none of them is in the histogram.
    expect(Object.keys(after).sort()).toEqual(['consumer', 'server']);
    expect(otel.span(`kind ${SpanKind.CLIENT}`).attributes['deadline.remaining_ms']).toBeGreaterThan(0);
    expect(otel.span(`kind ${SpanKind.INTERNAL}`).attributes['deadline.remaining_ms']).toBeGreaterThan(0);
  });
});

describe('how the attributes are written', () => {
  /**
   * A provider of its own with `limits` and this processor (or a copy of it
   * that hides onEnding), and a deadline context. Unless onEnding is hidden, a
   * first span has ended, so the processor knows the SDK calls onEnding.
   */
  function isolated(options: { limits?: Record<string, number>; hideOnEnding?: boolean; operation?: string } = {}) {
    const processor = new DeadlineSpanProcessor();
    const withoutOnEnding = {
      onStart: processor.onStart.bind(processor),
      onEnd: processor.onEnd.bind(processor),
      forceFlush: async () => {},
      shutdown: async () => {},
    };
    const exporter = new InMemorySpanExporter();
    const provider = new BasicTracerProvider({
      spanLimits: options.limits,
      spanProcessors: [options.hideOnEnding ? withoutOnEnding : processor, new SimpleSpanProcessor(exporter)],
    });
    const tracer = provider.getTracer('isolated');
    const deadline = openDeadline({ operation: options.operation ?? 'request', timeoutMs: 1_000, parent: null });
    const ctx = setDeadline(ROOT_CONTEXT, deadline);
    if (!options.hideOnEnding) tracer.startSpan('first', {}, ctx).end();
    return {
      tracer,
      ctx,
      finished: (name: string) => exporter.getFinishedSpans().find((s) => s.name === name)!,
      async close() {
        deadline.dispose();
        await provider.shutdown();
      },
    };
  }
  const ownAttributes = (count: number) => Object.fromEntries(Array.from({ length: count }, (_, i) => [`http.own.${i}`, i]));

  it('takes the start values when the span starts, though it writes them when the span ends', async () => {
    const { tracer, ctx, finished, close } = isolated();
    const span = tracer.startSpan('later', {}, ctx);
    await sleep(60);
    span.end();
    const a = finished('later').attributes;
    expect(Number(a['deadline.remaining_ms']) - Number(a['deadline.remaining_at_end_ms'])).toBeGreaterThanOrEqual(50);
    expect(a['deadline.operation']).toBe('request');
    await close();
  });

  it('sets the start attributes at start on an SDK that never calls onEnding', async () => {
    const { tracer, ctx, finished, close } = isolated({ hideOnEnding: true });
    const live = tracer.startSpan('live', {}, ctx);
    // Readable while the span is still open: nothing waits for an end hook that will not come.
    expect((live as unknown as { attributes: Record<string, unknown> }).attributes['deadline.operation']).toBe('request');
    live.end();
    const a = finished('live').attributes;
    expect(a['deadline.budget_ms']).toBe(1_000);
    expect(a['deadline.outcome']).toBeUndefined();
    await close();
  });

  it('keeps the SDK attribute count limit: what does not fit is dropped and counted as before', async () => {
    const { tracer, ctx, finished, close } = isolated({ limits: { attributeCountLimit: 12 } });
    tracer.startSpan('crowded', { attributes: ownAttributes(8) }, ctx).end();
    const crowded = finished('crowded');
    expect(Object.keys(crowded.attributes)).toHaveLength(12);
    // Ours are 8 here (at, remaining, budget, source, operation, remaining at end, exceeded, outcome): 4 fit.
    expect(crowded.droppedAttributesCount).toBe(4);
    await close();
  });

  it('leaves the SDK reporting nothing dropped when everything fits', async () => {
    const { tracer, ctx, finished, close } = isolated({ limits: { attributeCountLimit: 40 } });
    const span = tracer.startSpan('roomy', { attributes: ownAttributes(20) }, ctx);
    span.end();
    const roomy = finished('roomy');
    expect(Object.keys(roomy.attributes)).toHaveLength(28);
    expect(roomy.droppedAttributesCount).toBe(0);
    await close();
  });

  it('keeps the SDK value length limit: a long operation name is cut as setAttribute cuts it', async () => {
    const { tracer, ctx, finished, close } = isolated({ limits: { attributeValueLengthLimit: 6 }, operation: 'a-long-operation-name' });
    tracer.startSpan('cut', {}, ctx).end();
    const a = finished('cut').attributes;
    expect(a['deadline.operation']).toBe('a-long');
    expect(a['deadline.outcome']).toBe('comple');
    await close();
  });
});

describe('a database command in flight on the span (statement-in-flight)', () => {
  // A span that starts under a live deadline and ends after its cutoff instant, with nothing
  // subscribed (no timer runs): what a Redis reply read after the cutoff, before its timer, looks like.
  async function spanEndingAfterCutoff(mark: boolean, error = false): Promise<{ outcome: unknown; marked: boolean }> {
    const deadline = openDeadline({ operation: 'cmd', timeoutMs: 30, parent: null });
    const span = tracer().startSpan('get', { kind: SpanKind.CLIENT }, setDeadline(context.active(), deadline));
    const marked = mark ? markStatementInFlight(span) : false;
    await untilPassed(deadline);
    if (error) span.setStatus({ code: SpanStatusCode.ERROR });
    span.end();
    deadline.dispose();
    return { outcome: otel.span('get').attributes['deadline.outcome'], marked };
  }

  it('ends completed after the cutoff instant when marked, expired when not', async () => {
    expect(await spanEndingAfterCutoff(true)).toEqual({ outcome: 'completed', marked: true });
    otel.exporter.reset();
    expect(await spanEndingAfterCutoff(false)).toEqual({ outcome: 'expired', marked: false });
  });

  it('a marked span that ends with an error status is judged by the clock', async () => {
    expect(await spanEndingAfterCutoff(true, true)).toEqual({ outcome: 'expired', marked: true });
  });

  it('an outcome already written on the span wins over the mark', () => {
    const deadline = openDeadline({ operation: 'cmd', timeoutMs: 10_000, parent: null });
    const span = tracer().startSpan('set', { kind: SpanKind.CLIENT }, setDeadline(context.active(), deadline));
    markStatementInFlight(span);
    span.setAttribute('deadline.outcome', 'unknown');
    span.end();
    deadline.dispose();
    expect(otel.span('set').attributes['deadline.outcome']).toBe('unknown');
  });

  it('cannot mark a span no processor keeps state for: none under a deadline, none after shutdown', async () => {
    const unguarded = tracer().startSpan('no-deadline', {}, ROOT_CONTEXT);
    expect(markStatementInFlight(unguarded)).toBe(false);
    unguarded.end();
    const exporter = new InMemorySpanExporter();
    const processor = new DeadlineSpanProcessor();
    const provider = new BasicTracerProvider({ spanProcessors: [processor, new SimpleSpanProcessor(exporter)] });
    const deadline = openDeadline({ operation: 'cmd', timeoutMs: 10_000, parent: null });
    const ctx = setDeadline(ROOT_CONTEXT, deadline);
    const before = provider.getTracer('t').startSpan('before', {}, ctx);
    expect(markStatementInFlight(before)).toBe(true);
    before.end();
    // The processor alone is shut down: the provider still records, and the processor's state is still made.
    await processor.shutdown();
    const after = provider.getTracer('t').startSpan('after', {}, ctx);
    expect(after.isRecording()).toBe(true);
    expect(markStatementInFlight(after)).toBe(false);
    after.end();
    deadline.dispose();
    await provider.shutdown();
  });
});
