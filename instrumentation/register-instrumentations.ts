/**
 * The instrumentations the register entry starts. With
 * `@opentelemetry/auto-instrumentations-node` installed, they are its own
 * (OTEL_NODE_ENABLED_INSTRUMENTATIONS / OTEL_NODE_DISABLED_INSTRUMENTATIONS
 * apply), with the deadline hooks on its http, undici, pg and ioredis instrumentations and
 * DeadlineInstrumentation after them all, so swapping its register entry for
 * this one keeps every span (its resource detectors are used too). Without
 * it: http and undici only.
 */
import type { Instrumentation } from '@opentelemetry/instrumentation';
import type { ResourceDetector } from '@opentelemetry/resources';
import { HttpInstrumentation } from '@opentelemetry/instrumentation-http';
import { UndiciInstrumentation } from '@opentelemetry/instrumentation-undici';
import type { DeadlineInstrumentation } from './DeadlineInstrumentation';

/** What this entry uses of it. */
interface AutoInstrumentations {
  getNodeAutoInstrumentations(configs: Record<string, object>): Instrumentation[];
  /** The resource detectors of OTEL_NODE_RESOURCE_DETECTORS, cloud ones included. */
  getResourceDetectors(): ResourceDetector[];
}

/** The package, or undefined when it is not installed. */
export function loadAutoInstrumentations(load: (name: string) => unknown): AutoInstrumentations | undefined {
  try {
    return load('@opentelemetry/auto-instrumentations-node') as AutoInstrumentations;
  } catch (error) {
    if ((error as { code?: unknown }).code === 'MODULE_NOT_FOUND') return undefined;
    throw error;
  }
}

export function entryInstrumentations(deadline: DeadlineInstrumentation, auto: AutoInstrumentations | undefined): Instrumentation[] {
  if (auto !== undefined) {
    return [
      ...auto.getNodeAutoInstrumentations({
        '@opentelemetry/instrumentation-http': { requestHook: deadline.httpRequestHook },
        '@opentelemetry/instrumentation-undici': { requestHook: deadline.undiciRequestHook },
        '@opentelemetry/instrumentation-pg': { requestHook: deadline.pgRequestHook },
        '@opentelemetry/instrumentation-ioredis': { requestHook: deadline.ioredisRequestHook },
      }),
      deadline,
    ];
  }
  return [
    new HttpInstrumentation({ requestHook: deadline.httpRequestHook }),
    new UndiciInstrumentation({ requestHook: deadline.undiciRequestHook }),
    deadline,
  ];
}
