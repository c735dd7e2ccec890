// The OpenTelemetry setup of every process in the load chain (the driver and
// each hop), as an application would have it: the real SDK with the deadline
// span processor, the composite propagator, instrumentation-http and -undici
// with DeadlineInstrumentation. Spans are counted as they end, never stored:
// 100,000 requests make over half a million spans.
import { createRequire } from 'node:module';
import { context, metrics, propagation, SpanKind, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { CompositePropagator, W3CBaggagePropagator, W3CTraceContextPropagator } from '@opentelemetry/core';
import { registerInstrumentations } from '@opentelemetry/instrumentation';
import { HttpInstrumentation } from '@opentelemetry/instrumentation-http';
import { UndiciInstrumentation } from '@opentelemetry/instrumentation-undici';
import {
  AggregationTemporality,
  InMemoryMetricExporter,
  MeterProvider,
  PeriodicExportingMetricReader,
} from '@opentelemetry/sdk-metrics';
import { BasicTracerProvider } from '@opentelemetry/sdk-trace-base';
import { DeadlineInstrumentation, DeadlinePropagator, DeadlineSpanProcessor } from '../../../dist/esm/index.mjs';

const KIND = { [SpanKind.INTERNAL]: 'internal', [SpanKind.SERVER]: 'server', [SpanKind.CLIENT]: 'client' };

/**
 * Counts ended spans by `kind name outcome` (the name only for internal spans,
 * whose names are ours), and the violations the deadline processor flagged.
 * Registered after the DeadlineSpanProcessor, so it sees its attributes.
 */
class CountingSpanProcessor {
  /** `server - expired` → count; `internal load.request completed` → count. */
  spans = new Map();
  /** `later_than_parent` → count, from the spans' own deadline.violation attribute. */
  violations = new Map();

  onStart() {}

  onEnd(span) {
    const kind = KIND[span.kind] ?? 'other';
    const name = span.kind === SpanKind.INTERNAL ? span.name : '-';
    const outcome = span.attributes['deadline.outcome'] ?? 'none';
    const key = `${kind} ${name} ${outcome}`;
    this.spans.set(key, (this.spans.get(key) ?? 0) + 1);
    const violation = span.attributes['deadline.violation'];
    if (typeof violation === 'string') {
      for (const v of violation.split(',')) this.violations.set(v, (this.violations.get(v) ?? 0) + 1);
    }
  }

  /** Spans of `kind` (and `name`), by outcome. */
  count(kind, name = '-', outcome) {
    let total = 0;
    for (const [key, n] of this.spans) {
      const [k, nm, out] = key.split(' ');
      if (k === kind && nm === name && (outcome === undefined || outcome.includes(out))) total += n;
    }
    return total;
  }

  forceFlush() {
    return Promise.resolve();
  }

  shutdown() {
    return Promise.resolve();
  }
}

/**
 * Installs the SDK globally and registers the instrumentations; returns the
 * span counter, a reader for the `deadline.violations` metric, and node:http
 * and undici loaded after registration, so that both are instrumented.
 */
export function startTelemetry(deadlineConfig = {}) {
  const counter = new CountingSpanProcessor();
  const metricExporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
  const reader = new PeriodicExportingMetricReader({ exporter: metricExporter, exportIntervalMillis: 3_600_000 });
  const meterProvider = new MeterProvider({ readers: [reader] });
  const tracerProvider = new BasicTracerProvider({
    spanProcessors: [new DeadlineSpanProcessor({ meterProvider }), counter],
  });
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  trace.setGlobalTracerProvider(tracerProvider);
  metrics.setGlobalMeterProvider(meterProvider);
  propagation.setGlobalPropagator(
    new CompositePropagator({
      propagators: [new W3CTraceContextPropagator(), new W3CBaggagePropagator(), new DeadlinePropagator()],
    }),
  );
  const deadline = new DeadlineInstrumentation(deadlineConfig);
  registerInstrumentations({
    instrumentations: [
      new HttpInstrumentation({ requestHook: deadline.httpRequestHook }),
      new UndiciInstrumentation({ requestHook: deadline.undiciRequestHook }),
      deadline,
    ],
  });
  const load = createRequire(import.meta.url);
  return {
    counter,
    http: load('node:http'),
    undici: load('undici'),
    /** The `deadline.violations` counter, summed by violation kind. */
    async violationsMetric() {
      const { resourceMetrics } = await reader.collect();
      const byKind = {};
      for (const scope of resourceMetrics.scopeMetrics) {
        for (const metric of scope.metrics) {
          if (metric.descriptor.name !== 'deadline.violations') continue;
          for (const point of metric.dataPoints) {
            const kind = String(point.attributes['deadline.violation']);
            byKind[kind] = (byKind[kind] ?? 0) + point.value;
          }
        }
      }
      return byKind;
    },
    async shutdown() {
      deadline.disable();
      await tracerProvider.shutdown();
      await meterProvider.shutdown();
    },
  };
}
