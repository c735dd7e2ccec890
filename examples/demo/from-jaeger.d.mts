// Types for from-jaeger.mjs.
import type { LineageTrace } from '../../src/lineage/index';

export declare function traceFromJaeger(
  jaegerUrl: string,
  traceId: string,
  options?: { timeoutMs?: number; settleMs?: number; minSpans?: number },
): Promise<LineageTrace[]>;
