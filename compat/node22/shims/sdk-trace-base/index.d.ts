// Test-only stand-in for @opentelemetry/sdk-trace-base on the 3.x line (see package.json).
import { SimpleSpanProcessor as SimpleSpanProcessor3, type SimpleSpanProcessorOptions, type SpanExporter } from '@opentelemetry/sdk-trace';

export * from '@opentelemetry/sdk-trace';
export { TracerProvider as BasicTracerProvider } from '@opentelemetry/sdk-trace';

/** 2.x took the exporter itself; 3.x takes `{ exporter }`. Both are accepted here. */
export declare class SimpleSpanProcessor extends SimpleSpanProcessor3 {
  constructor(exporterOrOptions: SpanExporter | SimpleSpanProcessorOptions);
}
