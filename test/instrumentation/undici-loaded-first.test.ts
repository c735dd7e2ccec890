import { createRequire } from 'node:module';
import { context } from '@opentelemetry/api';
import { registerInstrumentations } from '@opentelemetry/instrumentation';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DeadlineExceededError, DeadlineInstrumentation, setDeadline } from '../../src';
import { passedDeadline } from '../helpers/clock';
import { installOtel, type TestOtel } from '../helpers/otel';
import { startCountingServer, type CountingServer } from './helpers/servers';

/**
 * What looking undici up in require.cache buys (DeadlineInstrumentation's
 * patchLoadedUndici, docs/internals.md): an application that required undici
 * before enabling the instrumentation still has its calls guarded. The module
 * hook only sees later loads, and the diagnostics channels alone cannot refuse
 * a call before it is dispatched.
 */

// Loaded before the instrumentation exists, as an application that sets up tracing late does.
const undici: typeof import('undici') = createRequire(import.meta.url)('undici');
let otel: TestOtel;
let instrumentation: DeadlineInstrumentation;
let server: CountingServer;

beforeAll(async () => {
  otel = installOtel();
  instrumentation = new DeadlineInstrumentation();
  registerInstrumentations({ instrumentations: [instrumentation] });
  server = await startCountingServer();
});
afterAll(async () => {
  instrumentation.disable();
  await server.close();
  await otel.shutdown();
});

describe('undici required before the instrumentation was enabled', () => {
  it('is guarded all the same: a call past its cutoff is refused before anything is sent', async () => {
    const deadline = await passedDeadline('root');
    const result = await context.with(setDeadline(context.active(), deadline), () => undici.request(`${server.url}/late`)).catch((error: unknown) => error);
    deadline.dispose();
    expect(result).toBeInstanceOf(DeadlineExceededError);
    expect(server.connections).toBe(0);
  });
});
