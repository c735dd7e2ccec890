import { randomUUID } from 'node:crypto';
import { expect } from 'vitest';
import { openDeadline } from '../../src';
import type { DeadlineNode } from '../../src/deadline-node';
import { under } from './pg-fixture';

/** Redis on 127.0.0.1:6379, as .ci/ensure-services.sh starts it. */
type Admin = { info(section: string): Promise<string> };

/** How many times the server ran `name` (INFO commandstats): a refused command never adds one. */
export async function commandCalls(admin: Admin, name: string): Promise<number> {
  const info = await admin.info('commandstats');
  const match = new RegExp(`cmdstat_${name}:calls=(\\d+)`).exec(info);
  return match === null ? 0 : Number(match[1]);
}

/** Holds the event loop for `ms`: a synchronous stretch of the caller's tick, as a CPU-heavy handler makes. */
export function holdLoop(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until);
}

/** A Lua script that holds the server for 1 s, so a command sent behind it is in flight at a 200 ms cutoff. */
export const BUSY_1S =
  "local t = redis.call('TIME'); local s = t[1] * 1000000 + t[2]; repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] - s >= 1000000; return 1";

interface EndingClient {
  status: string;
  ping(): Promise<unknown>;
  disconnect(): void;
  once(event: 'end', listener: () => void): unknown;
  get(key: string): Promise<unknown>;
}

/**
 * Ends `client`'s connection, then sends GET under a fresh 60 s deadline:
 * ioredis rejects that command inside sendCommand, before it returns. Checks
 * that the guard settled with that rejection: it no longer holds the deadline
 * armed (a timer until the cutoff).
 */
export async function expectReleasedAfterEnd(client: EndingClient): Promise<void> {
  await client.ping();
  client.disconnect();
  await new Promise<void>((ended) => (client.status === 'end' ? ended() : client.once('end', ended)));
  const deadline = openDeadline({ operation: 'scope', timeoutMs: 60_000, parent: null }) as DeadlineNode;
  const error = await under(deadline, () => client.get(`otel-deadline:${randomUUID()}`).catch((e: unknown) => e));
  expect((error as Error).message).toBe('Connection is closed.');
  expect(deadline.subscriberCount).toBe(0);
  deadline.dispose();
  expect(deadline.isArmed).toBe(false);
}
