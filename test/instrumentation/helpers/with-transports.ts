import { createRequire } from 'node:module';
import { registerInstrumentations } from '@opentelemetry/instrumentation';
import { HttpInstrumentation } from '@opentelemetry/instrumentation-http';
import { UndiciInstrumentation } from '@opentelemetry/instrumentation-undici';
import { DeadlineInstrumentation } from '../../../src';
import { installOtel, type TestOtel } from '../../helpers/otel';
import type { RegistrationOrder } from './coexistence';

export interface TransportSetup {
  otel: TestOtel;
  instrumentation: DeadlineInstrumentation;
  http: typeof import('node:http');
  undici: typeof import('undici');
}

/**
 * The real SDK with instrumentation-http and -undici (with our request hooks)
 * next to DeadlineInstrumentation, registered in `order`, as the register
 * entry runs them: the transports also inject through the global propagator.
 */
export function installWithTransports(order: RegistrationOrder): TransportSetup {
  const otel = installOtel();
  // Instrumentations enable themselves when constructed: ours waits, disabled, when it goes second.
  const instrumentation = new DeadlineInstrumentation({ enabled: order === 'deadline-first' });
  registerInstrumentations({
    instrumentations: [
      new HttpInstrumentation({ requestHook: instrumentation.httpRequestHook }),
      new UndiciInstrumentation({ requestHook: instrumentation.undiciRequestHook }),
    ],
  });
  const load = createRequire(import.meta.url);
  // instrumentation-http patches node:http when it is next required.
  const http = load('node:http') as typeof import('node:http');
  if (order === 'otel-first') registerInstrumentations({ instrumentations: [instrumentation] });
  const undici = load('undici') as typeof import('undici');
  return { otel, instrumentation, http, undici };
}
