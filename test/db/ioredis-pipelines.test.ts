/**
 * Pipelines and auto-pipelining under deadlines (issue 35 §1): each command
 * is judged by the deadline of the caller that made it, never by the context
 * its batch is written from, and a batch is never refused or cut for one
 * member. Counted on the server: every command here INCRs a key of its own,
 * so a key's value says whether its command ran.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { DeadlineExceededError, openDeadline } from '../../src';
import { passedDeadline } from '../helpers/clock';
import { under } from './pg-fixture';
import { BUSY_1S, holdLoop } from './redis-fixture';
import { redisLines, type RedisClient } from './redis-lines';

const { otel, lines, admin, client } = redisLines();

const NEIGHBOURS = 200;

/** Fresh keys, removed after the test by `drop`. */
function keys(n: number): string[] {
  const tag = randomUUID();
  return Array.from({ length: n }, (_, i) => `otel-deadline:pipe:${tag}:${i}`);
}

async function values(names: string[]): Promise<(string | null)[]> {
  return admin().mget(...names);
}

describe.each(lines)('%s', (_label, Redis) => {
  const auto = (): RedisClient => client(Redis, { enableAutoPipelining: true });

  it('auto-pipelining: a caller under a passed deadline is refused alone; its neighbours in the batch all run', async () => {
    const c = auto();
    await c.ping();
    const [refusedKey, ...others] = keys(NEIGHBOURS + 1);
    const deadline = await passedDeadline();
    // The refused call comes first: the batch's setImmediate runs in its context.
    const refused = under(deadline, () => c.incr(refusedKey!).catch((e: unknown) => e));
    const replies = await Promise.all(others.map((key) => c.incr(key).catch((e: unknown) => e)));
    expect(await refused).toBeInstanceOf(DeadlineExceededError);
    expect(replies.filter((reply) => reply !== 1)).toEqual([]);
    expect(await values([refusedKey!])).toEqual([null]); // never sent
    expect((await values(others)).filter((v) => v !== '1')).toEqual([]);
    expect(otel.spans().find((s) => s.attributes['deadline.outcome'] === 'not_started')?.name).toBe('incr');
    await admin().del(refusedKey!, ...others);
  });

  it('auto-pipelining: a deadline that passes before the batch is written releases its caller only; the batch goes whole', async () => {
    const c = auto();
    await c.ping();
    const [deadlineKey, ...others] = keys(NEIGHBOURS + 1);
    const deadline = openDeadline({ operation: 'first', timeoutMs: 30, parent: null });
    const first = under(deadline, () => c.incr(deadlineKey!).catch((e: unknown) => e));
    const replies = Promise.all(others.map((key) => c.incr(key).catch((e: unknown) => e)));
    holdLoop(60); // the deadline passes before the batch's setImmediate runs, in the first caller's context
    expect(await first).toBeInstanceOf(DeadlineExceededError);
    expect((await replies).filter((reply) => reply !== 1)).toEqual([]);
    // The released command still went out with its batch: a write the caller cannot know about.
    expect(await values([deadlineKey!])).toEqual(['1']);
    expect((await values(others)).filter((v) => v !== '1')).toEqual([]);
    expect(otel.spans().filter((s) => s.attributes['deadline.outcome'] === 'unknown')).toHaveLength(1);
    await admin().del(deadlineKey!, ...others);
  });

  it('auto-pipelining: a caller batched behind a slow command with no deadline is released at its cutoff, the slow one is untouched', async () => {
    const c = auto();
    await c.ping();
    const [key] = keys(1);
    const settled: string[] = [];
    // One tick, one batch: the busy script (no deadline) first, then a caller with 150 ms.
    const slow = c.eval(BUSY_1S, 0).then((reply) => (settled.push('slow'), reply));
    const deadline = openDeadline({ operation: 'behind', timeoutMs: 150, parent: null });
    const behind = under(deadline, () => c.incr(key!)).catch((e: unknown) => (settled.push('behind'), e));
    expect(await behind).toBeInstanceOf(DeadlineExceededError);
    expect(await slow).toBe(1);
    expect(settled).toEqual(['behind', 'slow']); // released before the batch answered
    expect(await values([key!])).toEqual(['1']); // the INCR itself ran, in its batch
    await admin().del(key!);
  });

  it('a pipeline whose commands come from callers with and without a deadline: only the caller whose deadline passed is rejected', async () => {
    const c = client(Redis);
    await c.ping();
    const [expiredKey, freeKey] = keys(2);
    const pipeline = c.pipeline();
    const deadline = await passedDeadline();
    const answers: unknown[] = [];
    under(deadline, () => pipeline.incr(expiredKey!, (err, reply) => answers.push(err ?? reply)));
    pipeline.incr(freeKey!, (err, reply) => answers.push(err ?? reply));
    // Written from a context with no deadline: the first command is still judged by its own caller's.
    const results = await pipeline.exec();
    expect(answers[0]).toBeInstanceOf(DeadlineExceededError);
    expect(answers[1]).toBe(1);
    expect(results![1]).toEqual([null, 1]);
    expect(await values([expiredKey!, freeKey!])).toEqual(['1', '1']); // the batch went whole
    await admin().del(expiredKey!, freeKey!);
  });
});
