import { context, metrics, propagation, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { CompositePropagator, W3CBaggagePropagator, W3CTraceContextPropagator } from '@opentelemetry/core';
import {
  AggregationTemporality,
  InMemoryMetricExporter,
  MeterProvider,
  PeriodicExportingMetricReader,
} from '@opentelemetry/sdk-metrics';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
  type ReadableSpan,
} from '@opentelemetry/sdk-trace-base';
import { DeadlinePropagator, DeadlineSpanProcessor, type DeadlineSpanProcessorConfig } from '../../src';

export interface TestOtel {
  exporter: InMemorySpanExporter;
  metricExporter: InMemoryMetricExporter;
  reader: PeriodicExportingMetricReader;
  spans(): ReadableSpan[];
  span(name: string): ReadableSpan;
  /** Collects the metric points of `name` as { attributes, value } rows (sums or histogram counts). */
  metricPoints(name: string): Promise<{ attributes: Record<string, unknown>; value: number; sum?: number }[]>;
  shutdown(): Promise<void>;
}

/**
 * Installs the real SDK globally: tracer provider with the deadline processor
 * and an in-memory exporter, a meter provider with an in-memory reader, the
 * async-hooks context manager and the composite propagator.
 */
export function installOtel(processorConfig: DeadlineSpanProcessorConfig = {}): TestOtel {
  const exporter = new InMemorySpanExporter();
  const metricExporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
  const reader = new PeriodicExportingMetricReader({ exporter: metricExporter, exportIntervalMillis: 3_600_000 });
  const meterProvider = new MeterProvider({ readers: [reader] });
  const tracerProvider = new BasicTracerProvider({
    spanProcessors: [new DeadlineSpanProcessor({ meterProvider, ...processorConfig }), new SimpleSpanProcessor(exporter)],
  });
  const contextManager = new AsyncLocalStorageContextManager().enable();
  context.setGlobalContextManager(contextManager);
  trace.setGlobalTracerProvider(tracerProvider);
  metrics.setGlobalMeterProvider(meterProvider);
  propagation.setGlobalPropagator(
    new CompositePropagator({
      propagators: [new W3CTraceContextPropagator(), new W3CBaggagePropagator(), new DeadlinePropagator()],
    }),
  );
  return {
    exporter,
    metricExporter,
    reader,
    spans: () => exporter.getFinishedSpans(),
    span(name) {
      const found = exporter.getFinishedSpans().filter((s) => s.name === name);
      if (found.length !== 1) throw new Error(`expected one span named ${name}, found ${found.length}`);
      return found[0];
    },
    async metricPoints(name) {
      const { resourceMetrics } = await reader.collect();
      const rows: { attributes: Record<string, unknown>; value: number; sum?: number }[] = [];
      for (const scope of resourceMetrics.scopeMetrics) {
        for (const metric of scope.metrics) {
          if (metric.descriptor.name !== name) continue;
          for (const point of metric.dataPoints) {
            const value = point.value as number | { count: number; sum?: number };
            rows.push(
              typeof value === 'number'
                ? { attributes: point.attributes, value }
                : { attributes: point.attributes, value: value.count, sum: value.sum },
            );
          }
        }
      }
      return rows;
    },
    async shutdown() {
      await tracerProvider.shutdown();
      await meterProvider.shutdown();
      contextManager.disable();
      trace.disable();
      metrics.disable();
      propagation.disable();
      context.disable();
    },
  };
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Resolves when `signal` aborts. */
export function aborted(signal: AbortSignal): Promise<unknown> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve(signal.reason);
    signal.addEventListener('abort', () => resolve(signal.reason), { once: true });
  });
}
