// ESM entry of the test-only stand-in: re-exports the CommonJS one, so import and
// require see the same classes (and the same CommonJS build of @opentelemetry/sdk-trace
// that sdk-node 0.301 loads).
import shim from './index.js';

export const {
  AlwaysOffSampler,
  AlwaysOnSampler,
  BasicTracerProvider,
  BatchSpanProcessor,
  ConsoleSpanExporter,
  InMemorySpanExporter,
  NoopSpanProcessor,
  ParentBasedSampler,
  RandomIdGenerator,
  SamplingDecision,
  SimpleSpanProcessor,
  StackContextManager,
  TraceIdRatioBasedSampler,
  TracerProvider,
  createAlwaysRecordSampler,
} = shim;
