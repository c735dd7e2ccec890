import { context, propagation, trace } from '@opentelemetry/api';
import { CompositePropagator, W3CBaggagePropagator, W3CTraceContextPropagator } from '@opentelemetry/core';
import { NodeSDK } from '@opentelemetry/sdk-node';
import { InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DeadlinePropagator, DeadlineSpanProcessor, getDeadline, withDeadline } from '../src';

// The README's NodeSDK setup, as written there.
const exporter = new InMemorySpanExporter();
const exporting = new SimpleSpanProcessor(exporter);
const sdk = new NodeSDK({
  spanProcessors: [new DeadlineSpanProcessor(), exporting],
  textMapPropagator: new CompositePropagator({
    propagators: [new W3CTraceContextPropagator(), new W3CBaggagePropagator(), new DeadlinePropagator()],
  }),
  instrumentations: [],
});

beforeAll(() => sdk.start());
afterAll(() => sdk.shutdown());

describe('NodeSDK textMapPropagator setup', () => {
  it('keeps W3C trace-context and baggage working next to the deadline headers', async () => {
    const headers: Record<string, string> = {};
    let traceId = '';
    const userBaggage = propagation.createBaggage({ 'user.tier': { value: 'gold' } });
    await context.with(propagation.setBaggage(context.active(), userBaggage), () =>
      withDeadline({ operation: 'edge', timeoutMs: 1_000, parent: null }, async (d) => {
        traceId = trace.getActiveSpan()!.spanContext().traceId;
        propagation.inject(context.active(), headers);
        expect(headers['x-deadline-at-ms']).toBe(String(Math.floor(d.expiresAtMs)));
      }),
    );
    expect(headers.traceparent).toContain(traceId);
    expect(headers.baggage.split(',')).toEqual(expect.arrayContaining(['user.tier=gold', `deadline.at_ms=${headers['x-deadline-at-ms']}`]));
    expect(Number(headers['x-deadline-remaining-ms'])).toBeLessThanOrEqual(1_000);

    const extracted = propagation.extract(context.active(), headers);
    expect(trace.getSpanContext(extracted)?.traceId).toBe(traceId);
    expect(propagation.getBaggage(extracted)?.getEntry('user.tier')?.value).toBe('gold');
    expect(getDeadline(extracted)?.source).toBe('remote');
    // NodeSDK detects resources asynchronously; the export waits for that.
    await exporting.forceFlush();
    expect(exporter.getFinishedSpans()[0].attributes['deadline.outcome']).toBe('completed');
  });
});
