import { describe, expect, it } from 'vitest';
import { configFromEnv, DeadlineEnvError } from '../../instrumentation/env';

describe('configFromEnv', () => {
  it.each([
    [{}, {}],
    [{ OTEL_DEADLINE_MODE: 'observe' }, { mode: 'observe' }],
    [{ OTEL_DEADLINE_MODE: ' Enforce ' }, { mode: 'enforce' }],
    [{ OTEL_DEADLINE_MAX_INCOMING_MS: '30000' }, { maxIncomingMs: 30_000 }],
    [{ OTEL_DEADLINE_MIN_USEFUL_MS: '12.5' }, { minUsefulMs: 12.5 }],
    [{ OTEL_DEADLINE_DEFAULT_TIMEOUT_MS: '0' }, { defaultTimeoutMs: 0 }],
    [{ OTEL_DEADLINE_MIN_USEFUL_MS: '' }, {}],
    [{ OTEL_DEADLINE_GRPC_ENABLED: 'false' }, { grpc: false }],
    [{ OTEL_DEADLINE_GRPC_ENABLED: ' TRUE ' }, { grpc: true }],
    [
      {
        OTEL_DEADLINE_FETCH_ENABLED: 'false',
        OTEL_DEADLINE_UNDICI_ENABLED: 'false',
        OTEL_DEADLINE_HTTP_CLIENT_ENABLED: 'false',
        OTEL_DEADLINE_HTTP_SERVER_ENABLED: 'false',
      },
      { fetch: false, undici: false, httpClient: false, httpServer: false },
    ],
  ])('reads %o', (env, expected) => {
    expect(configFromEnv(env)).toEqual(expected);
  });

  it.each([
    ['OTEL_DEADLINE_MODE', 'strict'],
    ['OTEL_DEADLINE_MAX_INCOMING_MS', '-1'],
    ['OTEL_DEADLINE_MIN_USEFUL_MS', 'abc'],
    ['OTEL_DEADLINE_DEFAULT_TIMEOUT_MS', 'Infinity'],
    ['OTEL_DEADLINE_DEFAULT_TIMEOUT_MS', '1e3'],
    ['OTEL_DEADLINE_MAX_INCOMING_MS', '9'.repeat(40)],
    ['OTEL_DEADLINE_GRPC_ENABLED', 'off'],
    ['OTEL_DEADLINE_HTTP_SERVER_ENABLED', '0'],
  ])('refuses %s=%s with an error naming the variable', (name, value) => {
    expect(() => configFromEnv({ [name]: value })).toThrow(DeadlineEnvError);
    expect(() => configFromEnv({ [name]: value })).toThrow(name);
  });
});
