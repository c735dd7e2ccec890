// OpenTelemetry for one demo service process.
//
// Traces: the SDK with the deadline span processor, exported as OTLP/JSON to
// OTEL_EXPORTER_OTLP_ENDPOINT (the demo's embedded receiver, or Jaeger).
// When the process was started with `node --import otel-deadline/register`
// (DEMO_TELEMETRY=register, as in docker-compose.yml) the register entry has
// already set up tracing and this file only adds metrics.
//
// Metrics: a MeterProvider whose reader is the OTel Prometheus exporter; the
// service serves its text on GET /metrics of its own port.
import { context, metrics, propagation, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { CompositePropagator, W3CBaggagePropagator, W3CTraceContextPropagator } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { PrometheusExporter } from '@opentelemetry/exporter-prometheus';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { MeterProvider } from '@opentelemetry/sdk-metrics';
import { BasicTracerProvider, BatchSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { DeadlinePropagator, DeadlineSpanProcessor } from 'otel-deadline';

const serviceName = process.env.OTEL_SERVICE_NAME ?? process.env.DEMO_SERVICE ?? 'demo';
const resource = resourceFromAttributes({ 'service.name': serviceName });

const prometheus = new PrometheusExporter({ preventServerStart: true });
const meterProvider = new MeterProvider({ resource, readers: [prometheus] });
metrics.setGlobalMeterProvider(meterProvider);

let tracerProvider;
if (process.env.DEMO_TELEMETRY !== 'register') {
  tracerProvider = new BasicTracerProvider({
    resource,
    spanProcessors: [
      // An abort at the cutoff takes a few ms to unwind through fetch and the
      // handlers; on a busy laptop more than the default 10 ms. The demo allows
      // 100 ms before it calls a span ended_after_deadline.
      new DeadlineSpanProcessor({ meterProvider, lateGraceMs: 100 }),
      // A short delay, so the demo can print each hop as it finishes.
      new BatchSpanProcessor(new OTLPTraceExporter(), { scheduledDelayMillis: 50 }),
    ],
  });
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  trace.setGlobalTracerProvider(tracerProvider);
  propagation.setGlobalPropagator(
    new CompositePropagator({
      propagators: [new W3CTraceContextPropagator(), new W3CBaggagePropagator(), new DeadlinePropagator()],
    }),
  );
}

export { serviceName };

/** Serves the Prometheus text exposition (GET /metrics). */
export function metricsHandler(req, res) {
  prometheus.getMetricsRequestHandler(req, res);
}

/** Flushes pending spans and stops the providers. */
export async function shutdownTelemetry() {
  await tracerProvider?.shutdown();
  await meterProvider.shutdown();
}
