/**
 * MULTI / EXEC / WATCH on a client shared by requests (issue 35 §2): a
 * refused EXEC leaves nothing queued, nothing committed and no WATCH behind;
 * DISCARD and UNWATCH are never refused. Counted on the server: key values,
 * and what later commands of other requests answer.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { DeadlineExceededError, openDeadline } from '../../src';
import { passedDeadline, untilPassed } from '../helpers/clock';
import { under } from './pg-fixture';
import { BUSY_1S } from './redis-fixture';
import { redisLines, type RedisClient } from './redis-lines';

const { otel, lines, admin, client } = redisLines();

/** What an unrelated request, with no deadline, sees on the shared client afterwards: its own transaction commits. */
async function laterRequestIsUnharmed(shared: RedisClient, watched: string): Promise<void> {
  const own = `otel-deadline:later:${randomUUID()}`;
  expect(await shared.set(own, '1')).toBe('OK'); // not QUEUED
  expect(await shared.get(own)).toBe('1');
  // Another client changes the key the first request watched: a WATCH left in place would void the next EXEC.
  await admin().set(watched, 'changed elsewhere');
  await shared.multi({ pipeline: false });
  await shared.incr(own);
  expect(await shared.exec()).toEqual([[null, 2]]);
  await admin().del(own);
}

describe.each(lines)('%s', (_label, Redis) => {
  it('EXEC refused at the cutoff discards the MULTI: nothing queued is committed, later commands answer normally', async () => {
    const shared = client(Redis);
    await shared.ping();
    const balance = `otel-deadline:balance:${randomUUID()}`;
    await admin().set(balance, '1000');
    const deadline = openDeadline({ operation: 'debit', timeoutMs: 150, parent: null });
    const refused = await under(deadline, async () => {
      await shared.multi({ pipeline: false });
      expect(await shared.decrby(balance, 100)).toBe('QUEUED');
      await untilPassed(deadline); // the slow step
      return shared.exec().catch((e: unknown) => e);
    });
    expect(refused).toBeInstanceOf(DeadlineExceededError);
    expect(otel.spans().find((s) => s.name === 'exec')!.attributes['deadline.outcome']).toBe('not_started');
    await laterRequestIsUnharmed(shared, balance);
    expect(await admin().get(balance)).toBe('changed elsewhere'); // the DECRBY never ran
    await admin().del(balance);
  });

  it('WATCH … EXEC refused: the watch is released, a later unrelated transaction is not null', async () => {
    const shared = client(Redis);
    await shared.ping();
    const key = `otel-deadline:watched:${randomUUID()}`;
    await admin().set(key, '1');
    const deadline = openDeadline({ operation: 'cas', timeoutMs: 150, parent: null });
    const refused = await under(deadline, async () => {
      await shared.watch(key);
      await shared.multi({ pipeline: false });
      await shared.set(key, '2');
      await untilPassed(deadline);
      return shared.exec().catch((e: unknown) => e);
    });
    expect(refused).toBeInstanceOf(DeadlineExceededError);
    await laterRequestIsUnharmed(shared, key);
    await admin().del(key);
  });

  it('WATCH, then MULTI refused: the EXEC refused after it releases the watch', async () => {
    const shared = client(Redis);
    await shared.ping();
    const key = `otel-deadline:watched:${randomUUID()}`;
    const deadline = openDeadline({ operation: 'cas', timeoutMs: 150, parent: null });
    const errors = await under(deadline, async () => {
      await shared.watch(key);
      await untilPassed(deadline);
      return [await shared.multi({ pipeline: false }).catch((e: unknown) => e), await shared.exec().catch((e: unknown) => e)];
    });
    expect(errors.map((e) => e instanceof DeadlineExceededError)).toEqual([true, true]);
    await laterRequestIsUnharmed(shared, key);
    await admin().del(key);
  });

  it('DISCARD and UNWATCH under a passed deadline are sent, not refused', async () => {
    const shared = client(Redis);
    await shared.ping();
    const key = `otel-deadline:discarded:${randomUUID()}`;
    await shared.watch(key);
    await shared.multi({ pipeline: false });
    await shared.set(key, 'queued');
    const deadline = await passedDeadline();
    expect(await under(deadline, () => shared.discard())).toBe('OK');
    await shared.watch(key);
    expect(await under(deadline, () => shared.unwatch())).toBe('OK');
    await laterRequestIsUnharmed(shared, key);
    expect(await admin().get(key)).toBe('changed elsewhere'); // the queued SET was discarded
    await admin().del(key);
  });

  it.each([
    ['MULTI', (c: RedisClient) => c.multi({ pipeline: false })],
    ['WATCH', (c: RedisClient, key: string) => c.watch(key)],
  ] as const)('%s cut in flight at the cutoff: the state it opened on the server is ended, the caller need not clean up', async (_name, open) => {
    const shared = client(Redis);
    const blocker = client(Redis);
    await Promise.all([shared.ping(), blocker.ping()]);
    const key = `otel-deadline:cut:${randomUUID()}`;
    // The busy script holds the server for 1 s: the MULTI / WATCH is still unanswered at the 150 ms cutoff, and runs after it.
    const sleeping = blocker.eval(BUSY_1S, 0);
    const deadline = openDeadline({ operation: 'open', timeoutMs: 150, parent: null });
    const cut = await under(deadline, () => open(shared, key).catch((e: unknown) => e));
    expect(cut).toBeInstanceOf(DeadlineExceededError);
    await sleeping;
    // The caller gave up without DISCARD or UNWATCH of its own.
    await laterRequestIsUnharmed(shared, key);
    await admin().del(key);
  });
});
