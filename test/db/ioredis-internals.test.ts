/**
 * Canary for the one part of ioredis the Redis guard reaches into
 * (docs/internals.md), on ioredis 6 and 5: ioredis settles a command by
 * calling the `resolve` / `reject` found on the Command when its reply comes,
 * which redis-command-guard.ts settleOnReply replaces.
 */
import { describe, expect, it } from 'vitest';
import { redisLines } from './redis-lines';

const { lines, client } = redisLines();

type Command = { resolve(value: unknown): void; reject(err: unknown): void; promise: Promise<unknown> };
type WithCommand = { Command: new (name: string, args: unknown[]) => Command };

describe.each(lines)('%s', (_label, Redis) => {
  it('calls the resolve and reject found on a Command when its reply comes (redis-command-guard.ts settleOnReply)', async () => {
    const c = client(Redis);
    const { Command } = Redis as unknown as WithCommand;
    const key = `otel-deadline:canary:${Math.random()}`;
    const seen: string[] = [];
    const swap = (command: Command) => {
      const { resolve, reject } = command;
      command.resolve = (value) => (seen.push(`resolve ${String(value)}`), resolve.call(command, value));
      command.reject = (err) => (seen.push('reject'), reject.call(command, err));
      return command;
    };
    const set = swap(new Command('set', [key, 'x']));
    await c.sendCommand(set as never);
    const incr = swap(new Command('incr', [key]));
    await expect(c.sendCommand(incr as never)).rejects.toThrow('not an integer');
    await c.del(key);
    expect(seen, 'redis-command-guard.ts settleOnReply: ioredis no longer settles a command through command.resolve / command.reject').toEqual(['resolve OK', 'reject']);
  });
});
