/**
 * Redis through ioredis 6 and 5 with DeadlineInstrumentation alone. Refusals
 * are counted on the server (INFO commandstats), blocking commands in CLIENT LIST.
 */
import { randomUUID } from 'node:crypto';
import { trace } from '@opentelemetry/api';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { afterEach, describe, expect, it } from 'vitest';
import { DeadlineCancelledError, DeadlineExceededError, openDeadline } from '../../src';
import type { DeadlineNode } from '../../src/deadline-node';
import { passedDeadline } from '../helpers/clock';
import { eventually, under } from './pg-fixture';
import { BUSY_1S, commandCalls, expectReleasedAfterEnd } from './redis-fixture';
import { openMonitor } from './fixtures/redis-monitor.mjs';
import { redisLines } from './redis-lines';

const { otel, instrumentation, lines, admin, client: newClient } = redisLines();
/** MONITOR connections a test opened, closed after it even when it fails. */
const monitors: { close(): void }[] = [];
afterEach(() => {
  for (const monitor of monitors.splice(0)) monitor.close();
});

const calls = (name: string) => commandCalls(admin(), name);

/**
 * Whether the server holds connection `id` in a blocking command (`b` in its
 * CLIENT LIST flags). Per connection, not the server-wide blocked_clients:
 * other test files run beside this one against the same server, and BullMQ's
 * idle workers, for one, sit in blocking commands.
 */
async function isBlocked(id: unknown): Promise<boolean> {
  const line = (await admin().client('LIST', 'ID', String(id))) as string;
  // A connection that is gone is not blocked either, but that is not what the tests claim: say so.
  if (!line.includes(`id=${String(id)} `)) throw new Error(`connection ${String(id)} is gone: the clamp, not a closed socket, must unblock it`);
  return (/\bflags=(\S+)/.exec(line)?.[1] ?? '').includes('b');
}

describe.each(lines)('%s', (_label, Redis) => {
  const client = () => newClient(Redis);

  it('finished commands leave nothing watching the deadline: dispose releases it', async () => {
    const c = client();
    await c.ping();
    const key = `otel-deadline:${randomUUID()}`;
    const deadline = openDeadline({ operation: 'scope', timeoutMs: 10_000, parent: null }) as DeadlineNode;
    await under(deadline, () => Promise.all([c.set(key, 'v'), c.get(key), c.del(key)]));
    expect(deadline.subscriberCount).toBe(0);
    deadline.dispose();
    expect(deadline.isArmed).toBe(false);
    expect(otel.spans().map((s) => `${s.name} ${s.attributes['deadline.outcome']}`)).toEqual(['set completed', 'get completed', 'del completed']);
  });

  it('without a DeadlineSpanProcessor on its span the guard writes completed itself', async () => {
    // The span processor takes a marked span as completed (statement-in-flight); a provider without one does not.
    const exporter = new InMemorySpanExporter();
    const bare = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
    instrumentation.setTracerProvider(bare);
    try {
      const c = client();
      await c.ping();
      const deadline = openDeadline({ operation: 'scope', timeoutMs: 10_000, parent: null });
      await under(deadline, () => c.get(`otel-deadline:${randomUUID()}`));
      deadline.dispose();
      const spans = exporter.getFinishedSpans();
      expect(spans.map((s) => `${s.name} ${s.attributes['deadline.outcome']}`)).toEqual(['get completed']);
      // Nothing else of ours: no processor wrote the start attributes.
      expect(spans[0]!.attributes['deadline.remaining_ms']).toBeUndefined();
    } finally {
      instrumentation.setTracerProvider(trace.getTracerProvider());
      await bare.shutdown();
    }
  });

  it('a command ioredis rejects before it returns (connection closed) releases the deadline at once', async () => {
    await expectReleasedAfterEnd(client());
    expect(otel.spans().map((s) => `${s.name} ${s.status.code}`)).toEqual(['get 2']);
  });

  it('refuses a command under an expired deadline: nothing reaches the server', async () => {
    const c = client();
    await c.ping();
    const before = await calls('incrbyfloat');
    const deadline = await passedDeadline();
    const err = await under(deadline, () => c.incrbyfloat(`otel-deadline:${randomUUID()}`, 1).catch((e: unknown) => e));
    expect(err).toBeInstanceOf(DeadlineExceededError);
    expect(await calls('incrbyfloat')).toBe(before);
    const span = otel.spans().find((s) => s.name === 'incrbyfloat')!;
    expect(span.attributes['deadline.outcome']).toBe('not_started');
  });

  it('BLPOP with timeout 0 is clamped to the budget: the server gives up at the cutoff, no client stays blocked', async () => {
    const c = client();
    const id = await c.client('ID');
    const key = `otel-deadline:${randomUUID()}`;
    const deadline = openDeadline({ operation: 'blpop', timeoutMs: 300, parent: null });
    const started = performance.now();
    const result = await under(deadline, () => c.blpop(key, 0).catch((e: unknown) => e));
    const elapsed = performance.now() - started;
    // Either the server's own nil reply (the clamp) or our rejection at the same cutoff.
    expect(result === null || result instanceof DeadlineExceededError).toBe(true);
    expect(elapsed).toBeLessThan(2_000); // timeout 0 would block forever
    expect(await eventually(() => isBlocked(id), false)).toBe(false);
  });

  it('XREAD BLOCK 0 is clamped too', async () => {
    const c = client();
    const id = await c.client('ID');
    const key = `otel-deadline:${randomUUID()}`;
    const deadline = openDeadline({ operation: 'xread', timeoutMs: 300, parent: null });
    const result = await under(deadline, () => c.xread('BLOCK', 0, 'STREAMS', key, '$').catch((e: unknown) => e));
    expect(result === null || result instanceof DeadlineExceededError).toBe(true);
    expect(await eventually(() => isBlocked(id), false)).toBe(false);
  });

  it('a write in flight at the cutoff rejects with DeadlineExceededError and is unknown', async () => {
    const c = client();
    await c.ping();
    // A script busy for 1 s holds the server, so the SET behind it is still in flight at the 200 ms cutoff.
    const blocker = client();
    await blocker.ping();
    const sleeping = blocker.eval(BUSY_1S, 0);
    const deadline = openDeadline({ operation: 'set', timeoutMs: 200, parent: null });
    const err = await under(deadline, () => c.set(`otel-deadline:${randomUUID()}`, 'v').catch((e: unknown) => e));
    await sleeping;
    expect(err).toBeInstanceOf(DeadlineExceededError);
    const span = otel.spans().find((s) => s.name === 'set')!;
    expect(span.attributes['deadline.outcome']).toBe('unknown');
    expect(await c.ping()).toBe('PONG'); // the late reply was dropped; the connection is in step
  });
  it('does not send a command the cutoff rejected again when its connection comes back', async () => {
    const c = client();
    await c.ping();
    const sets: { key: string; source: string }[] = [];
    const monitor = await openMonitor((args, source) => {
      if (args[0]?.toLowerCase() === 'set') sets.push({ key: args[1], source });
    });
    monitors.push(monitor);
    // A script busy for 1 s holds the server: the SET is still unanswered at its 200 ms cutoff, and at
    // the reconnect below, after which ioredis sends what had no reply again (autoResendUnfulfilledCommands).
    const blocker = client();
    await blocker.ping();
    const sleeping = blocker.eval(BUSY_1S, 0);
    const key = `otel-deadline:${randomUUID()}`;
    const deadline = openDeadline({ operation: 'resend', timeoutMs: 200, parent: null });
    const err = await under(deadline, () => c.set(key, 'v').catch((e: unknown) => e));
    expect(err).toBeInstanceOf(DeadlineExceededError);
    const reconnected = new Promise((resolve) => c.once('ready', resolve));
    c.stream.destroy();
    await reconnected;
    await sleeping;
    // A write on the new connection, after anything ioredis sent again on it: MONITOR lists it after them.
    const marker = `otel-deadline:marker:${randomUUID()}`;
    await c.set(marker, '1');
    const newSource = `${c.stream.localAddress}:${c.stream.localPort}`;
    expect(await eventually(async () => sets.some((set) => set.key === marker), true)).toBe(true);
    monitor.close();
    // The first connection's SET may or may not have run before the server saw that connection close.
    expect(sets.filter((set) => set.key === key && set.source === newSource)).toEqual([]);
    expect(sets.find((set) => set.key === marker)?.source).toBe(newSource);
  });

  it('a parent abort while a command is in flight: DeadlineCancelledError, cancelled for a read, unknown for a write', async () => {
    const c = client();
    const blocker = client();
    await Promise.all([c.ping(), blocker.ping()]);
    // The busy script holds the server for 1 s: both commands are still in flight when the parent aborts.
    const sleeping = blocker.eval(BUSY_1S, 0);
    const controller = new AbortController();
    const deadline = openDeadline({ operation: 'abort', timeoutMs: 10_000, parent: null, signal: controller.signal });
    const key = `otel-deadline:${randomUUID()}`;
    const pending = under(deadline, () => Promise.all([c.get(key).catch((e: unknown) => e), c.incr(key).catch((e: unknown) => e)]));
    controller.abort(new Error('caller went away'));
    const [read, write] = await pending;
    await sleeping;
    deadline.dispose();
    expect(read).toBeInstanceOf(DeadlineCancelledError);
    expect(write).toBeInstanceOf(DeadlineCancelledError);
    const get = otel.spans().find((s) => s.name === 'get')!;
    const incr = otel.spans().find((s) => s.name === 'incr')!;
    expect(get.attributes['deadline.outcome']).toBe('cancelled');
    expect(incr.attributes['deadline.outcome']).toBe('unknown');
    for (const span of [get, incr]) {
      expect(span.attributes['deadline.abort.code']).toBe('CANCELLED');
      expect(span.attributes['deadline.db.cancel']).toBe('not_possible');
    }
    expect(await c.ping()).toBe('PONG'); // the late replies were dropped in order
  });
});
