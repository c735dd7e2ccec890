/**
 * `node --import otel-deadline/register app.mjs` (or `--require`): starts the
 * OpenTelemetry Node SDK with the deadline propagator (next to W3C
 * trace-context and baggage), the deadline span processor and
 * DeadlineInstrumentation, configured by the standard OTEL_* variables and
 * OTEL_DEADLINE_*. The instrumentations are auto-instrumentations-node's when
 * it is installed, else http and undici; DeadlineInstrumentation also covers
 * @grpc/grpc-js.
 */
// First: it stops with one line naming the command when a package loaded below is not installed.
import './register-peers';
import { createRequire, register as registerLoaderHooks } from 'node:module';
import { pathToFileURL } from 'node:url';
import { isMainThread } from 'node:worker_threads';
import { CompositePropagator, W3CBaggagePropagator, W3CTraceContextPropagator } from '@opentelemetry/core';
import { NodeSDK } from '@opentelemetry/sdk-node';
import { DeadlinePropagator } from '../src/propagation/DeadlinePropagator';
import { DeadlineSpanProcessor } from '../src/processor/DeadlineSpanProcessor';
import type { SdkSpanProcessor } from '../src/processor/sdk-types';
import { DeadlineInstrumentation } from './DeadlineInstrumentation';
import { effectiveMaxIncomingMs } from './config';
import { DATABASE_MODULES } from './db/modules';
import { configFromEnv, processorConfigFromEnv, readMs } from './env';
import { countDelivered, droppedSpansLine, EndedSpanCounter } from './export-count';
import { loadFromSdkNode, MissingExporterError, processorFor, traceExportersFromEnv } from './register-exporters';
import { entryInstrumentations, loadAutoInstrumentations } from './register-instrumentations';
import { flushOnExit } from './register-shutdown';
import type { DeadlineInstrumentationConfig } from './types';

const DEFAULT_SHUTDOWN_TIMEOUT_MS = 1_000;

/**
 * ESM imports (`import { request } from 'undici'`) reach the instrumentations
 * only through this loader hook: for our modules alone, or for every module
 * when auto-instrumentations-node's instrumentations are loaded too.
 */
function registerImportHook(everyModule: boolean): void {
  const include = ['undici', 'http', 'https', 'node:http', 'node:https', ...DATABASE_MODULES, '@grpc/grpc-js'];
  registerLoaderHooks('@opentelemetry/instrumentation/hook.mjs', pathToFileURL(__filename), everyModule ? undefined : { data: { include } });
}

function start(config: DeadlineInstrumentationConfig, shutdownTimeoutMs: number): void {
  const load = loadFromSdkNode();
  const warn = (line: string): void => void process.stderr.write(`${line}\n`);
  let chosen;
  try {
    chosen = traceExportersFromEnv(load, warn).map(({ label, exporter }) => countDelivered(label, exporter));
  } catch (error) {
    if (!(error instanceof MissingExporterError)) throw error;
    console.error(error.message);
    process.exit(1);
  }
  const ended = new EndedSpanCounter();
  const spanProcessors: SdkSpanProcessor[] = [new DeadlineSpanProcessor(processorConfigFromEnv(process.env)), ended, ...chosen.map((counted) => processorFor(load, counted))];
  // Resolved from this package's place in node_modules, as the application's own packages are.
  const auto = loadAutoInstrumentations(createRequire(__filename));
  registerImportHook(auto !== undefined);
  const deadline = new DeadlineInstrumentation(config);
  const sdk = new NodeSDK({
    textMapPropagator: new CompositePropagator({
      propagators: [
        new W3CTraceContextPropagator(),
        new W3CBaggagePropagator(),
        new DeadlinePropagator({ maxIncomingMs: effectiveMaxIncomingMs(config.maxIncomingMs, config.defaultTimeoutMs) }),
      ],
    }),
    spanProcessors,
    instrumentations: entryInstrumentations(deadline, auto),
    ...(auto === undefined ? {} : { resourceDetectors: auto.getResourceDetectors() }),
  });
  sdk.start();
  flushOnExit({
    shutdown: () => sdk.shutdown(),
    droppedLine: (why) => droppedSpansLine(ended.ended, chosen, why),
    timeoutMs: shutdownTimeoutMs,
  });
}

// Preloads also run in worker threads, the loader-hooks thread of Node 20
// included: the SDK belongs to the main thread only.
if (isMainThread) {
  // Read first: a bad value stops the process before anything starts.
  const config = configFromEnv(process.env);
  start(config, readMs(process.env, 'OTEL_DEADLINE_SHUTDOWN_TIMEOUT_MS') ?? DEFAULT_SHUTDOWN_TIMEOUT_MS);
}
