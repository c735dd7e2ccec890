// Two real processes for the cross-process lateness check, each exporting
// OTLP/HTTP (JSON) to OTEL_EXPORTER_OTLP_ENDPOINT:
//
//   node cross-process.mjs callee   a "slow-tool" server with plain OpenTelemetry and no
//                                   otel-deadline: it answers after CALLEE_WORK_MS whatever
//                                   its caller does, as a service in another stack would.
//                                   Prints its port; on a "stop" IPC message flushes and exits.
//   node cross-process.mjs caller   a "planner" with otel-deadline: one CLIENT call to
//                                   CALLEE_URL under a CALLER_BUDGET_MS deadline, aborted
//                                   at the cutoff. Flushes, prints the trace id, exits.
//
// Neither process can see the lateness: the callee has no deadline, the caller
// stopped waiting at its cutoff. Only the trace holds both sides.
import { createServer } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { context, propagation, ROOT_CONTEXT, SpanKind, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { CompositePropagator, W3CTraceContextPropagator } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { BasicTracerProvider, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';

const role = process.argv[2];
const exporter = new OTLPTraceExporter();

async function callee() {
  const provider = new BasicTracerProvider({
    resource: resourceFromAttributes({ 'service.name': 'slow-tool' }),
    spanProcessors: [new SimpleSpanProcessor(exporter)],
  });
  const tracer = provider.getTracer('slow-tool');
  const propagator = new W3CTraceContextPropagator();
  const workMs = Number(process.env.CALLEE_WORK_MS);
  const server = createServer((req, res) => {
    const parent = propagator.extract(ROOT_CONTEXT, req.headers, { get: (h, k) => h[k], keys: (h) => Object.keys(h) });
    const span = tracer.startSpan('POST /search', { kind: SpanKind.SERVER }, parent);
    // Keeps working after the caller hung up: nothing here knows about its deadline.
    sleep(workMs).then(() => {
      span.end();
      if (!res.destroyed) res.end('{}');
    });
  });
  await new Promise((ready) => server.listen(0, '127.0.0.1', ready));
  process.send({ type: 'ready', port: server.address().port });
  process.on('message', async (message) => {
    if (message?.type !== 'stop') return;
    server.close();
    await provider.shutdown();
    process.disconnect();
  });
}

async function caller() {
  const { DeadlinePropagator, DeadlineSpanProcessor, withDeadline } = await import('otel-deadline');
  const provider = new BasicTracerProvider({
    resource: resourceFromAttributes({ 'service.name': 'planner' }),
    spanProcessors: [new DeadlineSpanProcessor(), new SimpleSpanProcessor(exporter)],
  });
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  trace.setGlobalTracerProvider(provider);
  propagation.setGlobalPropagator(new CompositePropagator({ propagators: [new W3CTraceContextPropagator(), new DeadlinePropagator()] }));
  const tracer = trace.getTracer('planner');
  let traceId;
  await withDeadline({ operation: 'plan', timeoutMs: Number(process.env.CALLER_BUDGET_MS), parent: null }, async (deadline) =>
    tracer.startActiveSpan('POST slow-tool/search', { kind: SpanKind.CLIENT }, async (span) => {
      traceId = span.spanContext().traceId;
      const headers = {};
      propagation.inject(context.active(), headers);
      await fetch(process.env.CALLEE_URL, { method: 'POST', headers, signal: deadline.signal }).then(
        (res) => res.arrayBuffer(),
        () => undefined, // aborted at the cutoff: the point of the exercise
      );
      span.end();
    }),
  );
  await provider.shutdown();
  process.stdout.write(`${traceId}\n`);
}

if (role === 'callee') await callee();
else if (role === 'caller') await caller();
else {
  console.error('usage: cross-process.mjs callee|caller');
  process.exitCode = 2;
}
