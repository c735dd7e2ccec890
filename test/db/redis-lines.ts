/**
 * The ioredis 6 and 5 lines under DeadlineInstrumentation alone, for the
 * Redis test files that need nothing else: the real SDK installed globally,
 * the instrumentation registered before the drivers load, and clients that
 * are disconnected after each test.
 */
import { createRequire } from 'node:module';
import { registerInstrumentations } from '@opentelemetry/instrumentation';
import { afterAll, afterEach } from 'vitest';
import { DeadlineInstrumentation } from '../../src';
import { installOtel, type TestOtel } from '../helpers/otel';

export type RedisClass = typeof import('ioredis').default;
export type RedisClient = InstanceType<RedisClass>;

/** Sets everything up at the importing file's collection time (describe.each needs the classes) and tears it down after it. */
export function redisLines(): {
  otel: TestOtel;
  instrumentation: DeadlineInstrumentation;
  lines: [string, RedisClass][]; admin: () => RedisClient; client: (Redis: RedisClass, options?: object) => RedisClient } {
  const otel = installOtel();
  const instrumentation = new DeadlineInstrumentation();
  registerInstrumentations({ instrumentations: [instrumentation] });
  const requireHere = createRequire(import.meta.url);
  const v6 = requireHere('ioredis') as { default: RedisClass };
  // ioredis 5 is installed under the alias `ioredis5`, which the module hook does not see by that name:
  // it gets the same patch the hook applies to a module named `ioredis`.
  const v5 = requireHere('ioredis5') as { default: RedisClass };
  instrumentation.getModuleDefinitions().find((d) => d.name === 'ioredis')!.patch!(v5 as never, '5');
  const clients: RedisClient[] = [];
  let adminClient: RedisClient | undefined;
  afterEach(() => {
    for (const c of clients.splice(0)) c.disconnect();
    otel.exporter.reset();
  });
  afterAll(async () => {
    adminClient?.disconnect();
    instrumentation.disable();
    await otel.shutdown();
  });
  return {
    otel,
    instrumentation,
    lines: [
      ['ioredis 6', v6.default],
      ['ioredis 5', v5.default],
    ],
    /** A client for counting on the server, outside any deadline, kept for the whole file. */
    admin: () => (adminClient ??= new v6.default({ host: '127.0.0.1', port: 6379 })),
    client: (Redis, options = {}) => {
      const c = new Redis({ host: '127.0.0.1', port: 6379, ...options });
      clients.push(c);
      return c;
    },
  };
}
