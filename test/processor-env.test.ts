import { describe, expect, it } from 'vitest';
import { configFromEnv, DeadlineEnvError, processorConfigFromEnv } from '../instrumentation/env';

describe('OTEL_DEADLINE_LATE_GRACE_MS (the span processor\'s stop allowance)', () => {
  it.each([
    [{}, {}],
    [{ OTEL_DEADLINE_LATE_GRACE_MS: '' }, {}],
    [{ OTEL_DEADLINE_LATE_GRACE_MS: '250' }, { lateGraceMs: 250 }],
    [{ OTEL_DEADLINE_LATE_GRACE_MS: ' 0 ' }, { lateGraceMs: 0 }],
    [{ OTEL_DEADLINE_LATE_GRACE_MS: '12.5' }, { lateGraceMs: 12.5 }],
  ])('reads %o', (env, expected) => {
    expect(processorConfigFromEnv(env)).toEqual(expected);
    // Not an instrumentation option: configFromEnv only checks it.
    expect(configFromEnv(env)).toEqual({});
  });

  it.each(['-1', 'abc', '1e3', 'Infinity', '9'.repeat(40)])('refuses %s with an error naming the variable, also where the register entry reads first', (value) => {
    const env = { OTEL_DEADLINE_LATE_GRACE_MS: value };
    expect(() => processorConfigFromEnv(env)).toThrow(DeadlineEnvError);
    expect(() => configFromEnv(env)).toThrow('OTEL_DEADLINE_LATE_GRACE_MS');
  });
});
