import { describe, expect, it } from 'vitest';
import { configFromEnv, DeadlineEnvError } from '../../instrumentation/env';
import { compileHostList } from '../../instrumentation/hosts';

/** Host lists for `propagateTo` (issue 12 §6); the transports are in propagate-to-*.test.ts. */

describe('compileHostList', () => {
  const rows: [string[], string, boolean][] = [
    [['api.internal'], 'http://api.internal/x', true],
    [['api.internal'], 'https://API.Internal:8443/x', true],
    [['api.internal'], 'http://api.internal.evil.com/', false],
    [['api.internal'], 'http://evil.com/?api.internal', false],
    [['*.internal'], 'http://a.b.internal/', true],
    [['*.internal'], 'http://internal/', false],
    [['*.internal'], 'http://xinternal/', false],
    [['127.0.0.1:8080'], 'http://127.0.0.1:8080/', true],
    [['127.0.0.1:8080'], 'http://127.0.0.1:8081/', false],
    [['example.com:443'], 'https://example.com/', true],
    [['example.com:80'], 'https://example.com/', false],
    [['[::1]'], 'http://[::1]:3000/', true],
    [['*'], 'http://anything.example/', true],
    [['*:9000'], 'http://anything.example:9001/', false],
    [[], 'http://api.internal/', false],
    [['api.internal'], 'not a url', false],
  ];
  it.each(rows)('%o matches %s: %s', (patterns, url, expected) => {
    expect(compileHostList(patterns)(url)).toBe(expected);
  });

  it.each(['http://api.internal', 'api.internal/path', 'user@host', 'host:0', 'host:99999', '*.', ''])('refuses the pattern %j', (pattern) => {
    expect(() => compileHostList([pattern])).toThrow(TypeError);
  });

  it('reads OTEL_DEADLINE_PROPAGATE_TO, and names it when a pattern is bad', () => {
    expect(configFromEnv({ OTEL_DEADLINE_PROPAGATE_TO: ' api.internal, *.svc.cluster.local ,127.0.0.1:8080' })).toEqual({
      propagateTo: ['api.internal', '*.svc.cluster.local', '127.0.0.1:8080'],
    });
    expect(configFromEnv({ OTEL_DEADLINE_PROPAGATE_TO: ' ' })).toEqual({});
    expect(() => configFromEnv({ OTEL_DEADLINE_PROPAGATE_TO: 'https://api.internal' })).toThrow(DeadlineEnvError);
    expect(() => configFromEnv({ OTEL_DEADLINE_PROPAGATE_TO: 'https://api.internal' })).toThrow('OTEL_DEADLINE_PROPAGATE_TO');
  });
});

