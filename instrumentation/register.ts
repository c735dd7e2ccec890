/**
 * `node --import otel-deadline/register app.mjs` (or `--require` for CommonJS):
 * starts the OpenTelemetry Node SDK with the deadline propagator (next to W3C
 * trace-context and baggage), the deadline span processor, the deadline, http
 * and undici instrumentations, and the OTLP/HTTP trace exporter configured by
 * the standard OTEL_* variables. DeadlineInstrumentation also covers @grpc/grpc-js
 * (without instrumentation-grpc: its spans are then our own). Deadline options
 * come from OTEL_DEADLINE_*.
 */
// First: it stops with one line naming the command when a package loaded below is not installed.
import './register-peers';
import { register as registerLoaderHooks } from 'node:module';
import { pathToFileURL } from 'node:url';
import { isMainThread } from 'node:worker_threads';
import { CompositePropagator, W3CBaggagePropagator, W3CTraceContextPropagator } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { HttpInstrumentation } from '@opentelemetry/instrumentation-http';
import { UndiciInstrumentation } from '@opentelemetry/instrumentation-undici';
import { NodeSDK } from '@opentelemetry/sdk-node';
import { DeadlinePropagator } from '../src/propagation/DeadlinePropagator';
import { DeadlineSpanProcessor } from '../src/processor/DeadlineSpanProcessor';
import { createBatchSpanProcessor } from './batch-processor';
import { DeadlineInstrumentation } from './DeadlineInstrumentation';
import { effectiveMaxIncomingMs } from './config';
import { DATABASE_MODULES } from './db/modules';
import { configFromEnv, processorConfigFromEnv } from './env';
import type { DeadlineInstrumentationConfig } from './types';

/** ESM imports (`import { request } from 'undici'`) reach the instrumentations only through this loader hook. */
function registerImportHook(): void {
  if (typeof registerLoaderHooks !== 'function') return;
  registerLoaderHooks('@opentelemetry/instrumentation/hook.mjs', pathToFileURL(__filename), {
    data: { include: ['undici', 'http', 'https', 'node:http', 'node:https', ...DATABASE_MODULES, '@grpc/grpc-js'] },
  });
}

function createSdk(config: DeadlineInstrumentationConfig): NodeSDK {
  const deadline = new DeadlineInstrumentation(config);
  return new NodeSDK({
    textMapPropagator: new CompositePropagator({
      propagators: [
        new W3CTraceContextPropagator(),
        new W3CBaggagePropagator(),
        new DeadlinePropagator({ maxIncomingMs: effectiveMaxIncomingMs(config.maxIncomingMs, config.defaultTimeoutMs) }),
      ],
    }),
    spanProcessors: [new DeadlineSpanProcessor(processorConfigFromEnv(process.env)), createBatchSpanProcessor(new OTLPTraceExporter())],
    instrumentations: [
      new HttpInstrumentation({ requestHook: deadline.httpRequestHook }),
      new UndiciInstrumentation({ requestHook: deadline.undiciRequestHook }),
      deadline,
    ],
  });
}

/** Exports what is buffered when the process ends on its own or on a signal. */
function shutdownOnExit(sdk: NodeSDK): void {
  let stopping: Promise<void> | undefined;
  const shutdown = (): Promise<void> => (stopping ??= sdk.shutdown().catch(() => {}));
  process.once('beforeExit', () => void shutdown());
  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    process.once(signal, () => {
      void shutdown().finally(() => {
        // Re-raise only if the application has no handler of its own to exit with.
        if (process.listenerCount(signal) === 0) process.kill(process.pid, signal);
      });
    });
  }
}

// Preloads also run in worker threads, the loader-hooks thread of Node 20
// included: the SDK belongs to the main thread only.
if (isMainThread) {
  // Read first: a bad value stops the process before anything starts.
  const config = configFromEnv(process.env);
  registerImportHook();
  const sdk = createSdk(config);
  sdk.start();
  shutdownOnExit(sdk);
}
