import { createRequire } from 'node:module';
import { getNumberFromEnv } from '@opentelemetry/core';
import type { SdkSpanProcessor } from '../src/processor/sdk-types';

/** A span exporter of either SDK line, kept opaque: only the SDK's processors call it. */
export type SpanExporterLike = object;

type BatchOptions = { exporter: SpanExporterLike } & Record<string, unknown>;
type BatchProcessorClass = new (options: BatchOptions) => SdkSpanProcessor;

/** The OTEL_BSP_* variables, as sdk-trace-base applies them on the 2.x line. */
const BATCH_ENV: [option: string, variable: string][] = [
  ['maxExportBatchSize', 'OTEL_BSP_MAX_EXPORT_BATCH_SIZE'],
  ['maxQueueSize', 'OTEL_BSP_MAX_QUEUE_SIZE'],
  ['scheduledDelayMillis', 'OTEL_BSP_SCHEDULE_DELAY'],
  ['exportTimeoutMillis', 'OTEL_BSP_EXPORT_TIMEOUT'],
];

/**
 * A batch span processor from the very SDK package sdk-node uses:
 * `@opentelemetry/sdk-trace`, which takes `{ exporter }` on both the 2.x line
 * (where sdk-trace-base wraps it) and the 3.x line (where sdk-trace-base is
 * gone). Resolving it next to sdk-node keeps the two from ever being copies.
 */
export function createBatchSpanProcessor(exporter: SpanExporterLike): SdkSpanProcessor {
  const fromSdkNode = createRequire(require.resolve('@opentelemetry/sdk-node'));
  const { BatchSpanProcessor } = fromSdkNode('@opentelemetry/sdk-trace') as { BatchSpanProcessor: BatchProcessorClass };
  const options: BatchOptions = { exporter };
  for (const [option, variable] of BATCH_ENV) {
    const value = getNumberFromEnv(variable);
    if (value !== undefined) options[option] = value;
  }
  return new BatchSpanProcessor(options);
}
