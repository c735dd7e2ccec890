// In-process OpenTelemetry for running the example on its own: the SDK with
// the deadline span processor, an in-memory exporter and the deadline
// propagator next to W3C trace context and baggage.
import { context, propagation, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { CompositePropagator, W3CBaggagePropagator, W3CTraceContextPropagator } from '@opentelemetry/core';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { DeadlinePropagator, DeadlineSpanProcessor } from 'otel-deadline';

export function startTracing() {
  const exporter = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({
    spanProcessors: [new DeadlineSpanProcessor(), new SimpleSpanProcessor(exporter)],
  });
  const contextManager = new AsyncLocalStorageContextManager().enable();
  context.setGlobalContextManager(contextManager);
  trace.setGlobalTracerProvider(provider);
  propagation.setGlobalPropagator(
    new CompositePropagator({
      propagators: [new W3CTraceContextPropagator(), new W3CBaggagePropagator(), new DeadlinePropagator()],
    }),
  );
  return {
    exporter,
    spans: () => exporter.getFinishedSpans(),
    async shutdown() {
      await provider.shutdown();
      contextManager.disable();
      trace.disable();
      propagation.disable();
      context.disable();
    },
  };
}
