import { setTimeout as sleep } from 'node:timers/promises';
import { openDeadline, type Deadline, type ManagedDeadline } from '../../src';

/**
 * Waits until `deadline`'s cutoff has passed on the deadline's own clock.
 * A fixed sleep after a short timeout races the clock (timers can fire early
 * or late against performance.now()); this asks the deadline itself, so the
 * test holds however the milliseconds fall.
 */
export async function untilPassed(deadline: Deadline): Promise<void> {
  while (deadline.remainingMs() > 0) await sleep(Math.ceil(deadline.remainingMs()) + 1);
}

/**
 * A root deadline whose cutoff has certainly passed. `openDeadline` refuses a
 * cutoff already in the past, so this opens one with 1 ms and waits it out
 * (rather than `expiresAtMs: Date.now() + 1`, which throws at the open itself
 * whenever the millisecond turns first).
 */
export async function passedDeadline(operation = 'passed'): Promise<ManagedDeadline> {
  const deadline = openDeadline({ operation, timeoutMs: 1, parent: null });
  await untilPassed(deadline);
  return deadline;
}

/**
 * How long after a cutoff a cut call may take to settle, in tests whose slow
 * path is "never" (the server holds the request or the body until the test
 * releases it, so an uncut call would only end at the 20 s test timeout). The
 * cut itself takes a few ms (`npm run bench:lag` measures it); the bound is
 * wide because a timer on a loaded 2-core CI machine can run hundreds of ms late.
 */
export const CUT_LAG_LIMIT_MS = 1_000;
