import { describe, expect, it } from 'vitest';
import { clampBlockingTimeout, isBlocking, mayBeBlocking } from '../../instrumentation/db/redis-blocking';

describe('clampBlockingTimeout', () => {
  it.each([
    ['blpop', ['k', '0'], 250, ['k', '0.250']],
    ['blpop', ['k', '0.1'], 250, ['k', '0.1']],
    ['brpop', ['a', 'b', '30'], 1500, ['a', 'b', '1.500']],
    ['blmove', ['s', 'd', 'LEFT', 'RIGHT', '0'], 100, ['s', 'd', 'LEFT', 'RIGHT', '0.100']],
    ['brpoplpush', ['s', 'd', '5'], 100, ['s', 'd', '0.100']],
    ['blmpop', ['0', '1', 'k', 'LEFT'], 100, ['0.100', '1', 'k', 'LEFT']],
    ['bzpopmin', ['k', '0'], 100, ['k', '0.100']],
    ['bzpopmax', ['k', '0'], 100, ['k', '0.100']],
    ['bzmpop', ['10', '1', 'k', 'MIN'], 100, ['0.100', '1', 'k', 'MIN']],
    ['xread', ['BLOCK', '0', 'STREAMS', 's', '$'], 100, ['BLOCK', '100', 'STREAMS', 's', '$']],
    ['xread', ['COUNT', '1', 'STREAMS', 's', '$'], 100, ['COUNT', '1', 'STREAMS', 's', '$']],
    ['xreadgroup', ['GROUP', 'g', 'c', 'block', '5000', 'STREAMS', 's', '>'], 100, ['GROUP', 'g', 'c', 'block', '100', 'STREAMS', 's', '>']],
    ['wait', ['1', '0'], 100, ['1', '100']],
    ['blpop', ['k', '0'], 0, ['k', '0.001']],
    ['blpop', ['k', 'soon'], 100, ['k', 'soon']],
    ['get', ['k'], 100, ['k']],
  ])('%s %j with %i ms left -> %j', (name, args, remaining, expected) => {
    const copy = [...args];
    clampBlockingTimeout(name, copy, remaining);
    expect(copy).toEqual(expected);
  });
});

describe('mayBeBlocking', () => {
  const blocking = ['blpop', 'brpop', 'blmove', 'brpoplpush', 'blmpop', 'bzpopmin', 'bzpopmax', 'bzmpop', 'xread', 'xreadgroup', 'wait'];

  it('says true for every blocking command, in any case', () => {
    for (const name of blocking) {
      expect(isBlocking(name)).toBe(true);
      for (const spelled of [name, name.toUpperCase(), name[0]!.toUpperCase() + name.slice(1)]) expect(mayBeBlocking(spelled)).toBe(true);
    }
  });

  it('says false for commands whose first letter starts no blocking command', () => {
    for (const name of ['get', 'GET', 'set', 'hget', 'incr', 'ping', 'mget', 'zadd', 'eval', 'lpush']) expect(mayBeBlocking(name)).toBe(false);
  });

  it('says true (look it up) for anything it cannot tell: not a string, empty, no letter first', () => {
    for (const name of [undefined, null, 42, '', Symbol('x')]) expect(mayBeBlocking(name)).toBe(true);
    // Never false for a name whose lower case is blocking, whatever precedes the letters' range.
    for (let code = 0; code < 0x10000; code++) {
      const name = `${String.fromCharCode(code)}lpop`;
      if (isBlocking(name.toLowerCase())) expect(mayBeBlocking(name)).toBe(true);
    }
  });
});
