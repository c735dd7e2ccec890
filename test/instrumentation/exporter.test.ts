import { context, trace } from '@opentelemetry/api';
import { suppressTracing } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { registerInstrumentations } from '@opentelemetry/instrumentation';
import { BasicTracerProvider, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DeadlineInstrumentation, openDeadline, setDeadline } from '../../src';
import { startOtlpReceiver, type OtlpReceiver } from '../../src/lineage/receiver';
import { passedDeadline, untilPassed } from '../helpers/clock';
import { installOtel, type TestOtel } from '../helpers/otel';
import { startCountingServer, type CountingServer } from './helpers/servers';

let otel: TestOtel;
let instrumentation: DeadlineInstrumentation;
let receiver: OtlpReceiver;
let server: CountingServer;

beforeAll(async () => {
  otel = installOtel();
  instrumentation = new DeadlineInstrumentation();
  registerInstrumentations({ instrumentations: [instrumentation] });
  receiver = await startOtlpReceiver();
  server = await startCountingServer();
});
afterAll(async () => {
  instrumentation.disable();
  await receiver.close();
  await server.close();
  await otel.shutdown();
});

describe('traffic that must never be refused, aborted or delayed', () => {
  it('lets the OTLP exporter send the span of work that ran past its deadline', async () => {
    const provider = new BasicTracerProvider({
      spanProcessors: [new SimpleSpanProcessor(new OTLPTraceExporter({ url: receiver.tracesUrl }))],
    });
    const deadline = openDeadline({ operation: 'root', timeoutMs: 20, parent: null });
    await context.with(setDeadline(context.active(), deadline), async () => {
      const span = provider.getTracer('late-work').startSpan('late');
      await untilPassed(deadline);
      // SimpleSpanProcessor exports right here, in this (expired) deadline's context.
      span.end();
    });
    await provider.forceFlush();
    deadline.dispose();
    expect(receiver.spans().map((s) => s.name)).toContain('late');
    expect(otel.spans().filter((s) => s.attributes['deadline.outcome'] === 'not_started')).toHaveLength(0);
    await provider.shutdown();
  });

  it('passes calls made with tracing suppressed through untouched, even past the cutoff', async () => {
    const deadline = await passedDeadline('root');
    const ctx = suppressTracing(setDeadline(context.active(), deadline));
    const res = await context.with(ctx, () => fetch(`${server.url}/internal`));
    expect(await res.text()).toBe('ok');
    deadline.dispose();
    expect(server.headerCount(0, 'x-deadline-remaining-ms')).toBe(0);
    expect(trace.getSpan(ctx)).toBeUndefined();
  });
});
