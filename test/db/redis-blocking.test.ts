import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { blockingTimeoutIndex, clampBlockingTimeout, isBlocking } from '../../instrumentation/db/redis-blocking';

describe('clampBlockingTimeout', () => {
  it.each([
    ['blpop', ['k', '0'], 250, ['k', '0.250']],
    ['blpop', ['k', '0.1'], 250, ['k', '0.1']],
    ['brpop', ['a', 'b', '30'], 1500, ['a', 'b', '1.500']],
    ['blmove', ['s', 'd', 'LEFT', 'RIGHT', '0'], 100, ['s', 'd', 'LEFT', 'RIGHT', '0.100']],
    ['brpoplpush', ['s', 'd', '5'], 100, ['s', 'd', '0.100']],
    ['blmpop', ['0', '1', 'k', 'LEFT'], 100, ['0.100', '1', 'k', 'LEFT']],
    ['blmpop', ['0', '2', 'a', 'b', 'RIGHT', 'COUNT', '3'], 100, ['0.100', '2', 'a', 'b', 'RIGHT', 'COUNT', '3']],
    ['bzpopmin', ['k', '0'], 100, ['k', '0.100']],
    ['bzpopmax', ['k', '0'], 100, ['k', '0.100']],
    ['bzmpop', ['10', '1', 'k', 'MIN'], 100, ['0.100', '1', 'k', 'MIN']],
    ['xread', ['BLOCK', '0', 'STREAMS', 's', '$'], 100, ['BLOCK', '100', 'STREAMS', 's', '$']],
    ['xread', ['COUNT', '1', 'BLOCK', 0, 'STREAMS', 's', '$'], 100, ['COUNT', '1', 'BLOCK', '100', 'STREAMS', 's', '$']],
    ['xread', ['COUNT', '1', 'STREAMS', 's', '$'], 100, ['COUNT', '1', 'STREAMS', 's', '$']],
    ['xreadgroup', ['GROUP', 'g', 'c', 'block', '5000', 'STREAMS', 's', '>'], 100, ['GROUP', 'g', 'c', 'block', '100', 'STREAMS', 's', '>']],
    ['xreadgroup', ['GROUP', 'g', 'c', 'NOACK', 'BLOCK', '0', 'STREAMS', 's', '>'], 100, ['GROUP', 'g', 'c', 'NOACK', 'BLOCK', '100', 'STREAMS', 's', '>']],
    ['wait', ['1', '0'], 100, ['1', '100']],
    ['waitaof', ['1', '0', '0'], 100, ['1', '0', '100']],
    ['blpop', ['k', '0'], 0, ['k', '0.001']],
    ['blpop', ['k', 'soon'], 100, ['k', 'soon']],
    ['get', ['k'], 100, ['k']],
  ])('%s %j with %i ms left -> %j', (name, args, remaining, expected) => {
    const copy = [...args];
    clampBlockingTimeout(name, copy, remaining);
    expect(copy).toEqual(expected);
  });

  // Keys, IDs, group and consumer names spelled like an option are data, never the option (issue 35 §5).
  it.each([
    ['xread', ['COUNT', '10', 'STREAMS', 'orders', 'block', '0', '0']],
    ['xread', ['STREAMS', 'BLOCK', '0']],
    ['xreadgroup', ['GROUP', 'block', 'BLOCK', 'COUNT', '1', 'STREAMS', 'BLOCK', '0']],
    ['xread', ['BLOCK', '0']], // no STREAMS: the server refuses it
    ['xread', ['COUNT', '1', 'BLOCK']], // an option without its operand
    ['xread', ['FOO', 'BLOCK', '0', 'STREAMS', 's', '0']], // an option Redis does not know: a syntax error there
    ['blmove', ['s', 'd', 'LEFT', '0']], // arity off: nothing is the timeout
    ['blmpop', ['0', '3', 'k', 'LEFT']], // numkeys larger than the keys given
    ['wait', ['0']],
  ])('%s %j: no timeout found, nothing rewritten', (name, args) => {
    const copy = [...args];
    expect(clampBlockingTimeout(name, copy, 100)).toBe(false);
    expect(copy).toEqual(args);
  });
});

describe('the grammar touches the timeout only (property)', () => {
  /** Keys, IDs and names: anything, and often a word that spells an option. */
  const data = fc.oneof(fc.constantFrom('block', 'BLOCK', 'Block', 'COUNT', 'STREAMS', 'streams', 'GROUP', 'NOACK', '0', '$', '>', 'LEFT', 'MIN'), fc.string({ maxLength: 8 }));
  const timeout = fc.constantFrom('0', '5', '30', '0.5', '100000', 0, 7);
  const keys = fc.array(data, { minLength: 1, maxLength: 4 });

  /** A well-formed command built by hand, with the index its timeout was put at: the oracle the parser is checked against. */
  const commands = fc.oneof(
    fc.tuple(fc.constantFrom('blpop', 'brpop', 'bzpopmin', 'bzpopmax'), keys, timeout).map(([name, ks, t]) => ({ name, args: [...ks, t], at: ks.length })),
    fc.tuple(data, data, fc.constantFrom('LEFT', 'RIGHT'), fc.constantFrom('LEFT', 'RIGHT'), timeout).map(([s, d, a, b, t]) => ({ name: 'blmove', args: [s, d, a, b, t], at: 4 })),
    fc.tuple(fc.constantFrom('blmpop', 'bzmpop'), timeout, keys, fc.constantFrom('LEFT', 'RIGHT', 'MIN', 'MAX'), fc.option(fc.nat(9))).map(([name, t, ks, where, count]) => ({
      name,
      args: [t, String(ks.length), ...ks, where, ...(count === null ? [] : ['COUNT', String(count)])],
      at: 0,
    })),
    fc
      .tuple(fc.boolean(), fc.option(fc.nat(9)), fc.option(timeout), fc.boolean(), data, data, keys)
      .map(([group, count, block, noack, g, c, ks]) => {
        const options: unknown[][] = [];
        if (group) options.push(['GROUP', g, c]);
        if (count !== null) options.push(['COUNT', String(count)]);
        if (block !== null) options.push(['BLOCK', block]);
        if (group && noack) options.push(['NOACK']);
        const args = [...options.flat(), 'STREAMS', ...ks, ...ks.map(() => '0')];
        const blockAt = options.findIndex((o) => o[0] === 'BLOCK');
        const at = blockAt < 0 ? -1 : options.slice(0, blockAt).reduce((n, o) => n + o.length, 0) + 1;
        return { name: group ? 'xreadgroup' : 'xread', args, at };
      }),
  );

  it('finds the timeout where it was put, and leaves every other argument as it was', () => {
    fc.assert(
      fc.property(commands, fc.integer({ min: 0, max: 60_000 }), ({ name, args, at }, left) => {
        expect(blockingTimeoutIndex(name, args)).toBe(at);
        const copy = [...args];
        clampBlockingTimeout(name, copy, left);
        copy.forEach((arg, i) => {
          if (i !== at) expect(arg).toBe(args[i]);
        });
      }),
      { numRuns: 2_000 },
    );
  });
});

describe('isBlocking', () => {
  it('knows every blocking command whose timeout is clamped, and no other', () => {
    for (const name of ['blpop', 'brpop', 'blmove', 'brpoplpush', 'blmpop', 'bzpopmin', 'bzpopmax', 'bzmpop', 'xread', 'xreadgroup', 'wait', 'waitaof']) expect(isBlocking(name)).toBe(true);
    for (const name of ['get', 'set', 'hget', 'incr', 'ping', 'mget', 'zadd', 'eval', 'lpush', 'lpop']) expect(isBlocking(name)).toBe(false);
  });
});

