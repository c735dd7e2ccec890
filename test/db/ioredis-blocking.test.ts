/**
 * Blocking commands near their cutoff (issue 35 §4, §5): no reply that
 * carries an element is dropped, and a key spelled like an option is data.
 * Counted on the server: what every caller received plus what is left in
 * the lists must be every element pushed.
 */
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { openDeadline } from '../../src';
import { under } from './pg-fixture';
import { redisLines } from './redis-lines';

const { otel, lines, admin, client } = redisLines();

/** Runs at once, each on its own connection (a BLPOP holds its connection until it is answered). */
const PARALLEL = 10;
const ROUNDS = 30;
/** The deadline each BLPOP runs under; the element is pushed from 10 ms before it to 110 ms after (Redis answers a timed-out block up to 1000/hz = 100 ms late). */
const BUDGET_MS = 40;
/** A database index no other test file uses, for keys whose exact names matter. */
const DB = 11;

describe.each(lines)('%s', (_label, Redis) => {
  it(`BLPOP 0 near its cutoff: every pushed element reaches its caller or stays in the list (${PARALLEL * ROUNDS} runs)`, async () => {
    const poppers = Array.from({ length: PARALLEL }, () => client(Redis));
    const pusher = client(Redis);
    await Promise.all([...poppers, pusher].map((c) => c.ping()));
    let pushed = 0;
    let received = 0;
    let receivedAfterCutoff = 0;
    let leftInList = 0;
    const errors: unknown[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      await Promise.all(
        poppers.map(async (popper, i) => {
          const key = `otel-deadline:blpop-race:${randomUUID()}`;
          const deadline = openDeadline({ operation: 'blpop-race', timeoutMs: BUDGET_MS, parent: null });
          const popping = under(deadline, () => popper.blpop(key, 0)).then(
            (reply) => ({ reply, afterCutoff: deadline.remainingMs() <= 0 }),
            (error: unknown) => ({ error }),
          );
          // Spread over the window in which the server may have popped for a block it answers late.
          await sleep(BUDGET_MS - 10 + ((round * PARALLEL + i) % 12) * 10);
          await pusher.rpush(key, 'element');
          pushed++;
          const result = await popping;
          if ('error' in result) errors.push(result.error);
          else if (result.reply !== null) {
            received++;
            if (result.afterCutoff) receivedAfterCutoff++;
          }
          const left = await admin().llen(key); // read before adding: `x += await …` would add to a stale x
          leftInList += left;
          await admin().del(key);
        }),
      );
    }
    console.log(`${_label}: ${pushed} pushed, ${received} received (${receivedAfterCutoff} after the cutoff), ${leftInList} left in the list, ${errors.length} rejected`);
    expect(pushed - received - leftInList).toBe(0);
    // A rejection is only ever a refusal, nothing sent (the machine stalled past the 40 ms before the send): never a cut.
    const refused = otel.spans().filter((s) => s.name === 'blpop' && s.attributes['deadline.outcome'] === 'not_started');
    expect(errors.length).toBe(refused.length);
  });

  it('a late reply is completed on its span; a reply with nothing popped is the server\'s nil', async () => {
    const popper = client(Redis);
    await popper.ping();
    const key = `otel-deadline:blpop-late:${randomUUID()}`;
    const deadline = openDeadline({ operation: 'blpop-late', timeoutMs: 50, parent: null });
    const reply = await under(deadline, () => popper.blpop(key, 0));
    expect(reply).toBeNull();
    expect(otel.spans().find((s) => s.name === 'blpop')!.attributes['deadline.outcome']).toBe('completed');
  });

  it('XREAD COUNT 10 STREAMS orders block 0 0: the keys and IDs are not options, the entries are all there', async () => {
    // Streams literally named `orders`, `block` and `BLOCK`, in a database of this test's own (DB), removed after it.
    const c = client(Redis, { db: DB });
    await c.del('orders', 'block', 'BLOCK');
    try {
      // An explicit, small entry ID: a stream ID rewritten to the time left (some thousands) would skip it.
      for (const stream of ['orders', 'block', 'BLOCK']) await c.xadd(stream, '1-1', 'n', '1');
      const deadline = openDeadline({ operation: 'xread', timeoutMs: 5_000, parent: null });
      const entries = async (...args: (string | number)[]) => {
        const reply = (await under(deadline, () => c.xread(...(args as ['STREAMS', string, string])))) as [string, unknown[]][];
        return reply.map(([stream, read]) => [stream, read.length]);
      };
      expect(await entries('COUNT', 10, 'STREAMS', 'orders', 'block', '0', '0')).toEqual([
        ['orders', 1],
        ['block', 1],
      ]);
      expect(await entries('COUNT', 10, 'STREAMS', 'block', 'BLOCK', '0', '0')).toEqual([
        ['block', 1],
        ['BLOCK', 1],
      ]);
      expect(await entries('STREAMS', 'BLOCK', '0')).toEqual([['BLOCK', 1]]);
      // With a real BLOCK option before STREAMS: that one is clamped, the stream named BLOCK is not touched.
      expect(await entries('BLOCK', 0, 'STREAMS', 'BLOCK', '0')).toEqual([['BLOCK', 1]]);
      deadline.dispose();
    } finally {
      await c.del('orders', 'block', 'BLOCK');
    }
  });
});
