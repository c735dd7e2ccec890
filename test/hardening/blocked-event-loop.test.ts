/**
 * A blocked event loop delays the abort event: no timer can run while
 * synchronous work holds the thread, so `signal.aborted` is still false when
 * the work resumes after its cutoff. Work that checks `throwIfAborted()` or
 * `remainingMs()` before each side effect reads the clock instead, and
 * refuses. Side effects are counted where they land: on a real local server.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { DeadlineExceededError, openDeadline, withDeadline, type Deadline } from '../../src';
import { DeadlineNode } from '../../src/deadline-node';
import { aborted, installOtel, type TestOtel } from '../helpers/otel';
import { send, startFixture, type Fixture } from './http-fixture';

let otel: TestOtel;
let server: Fixture;
beforeAll(async () => {
  otel = installOtel();
  server = await startFixture();
});
afterAll(async () => {
  await server.close();
  await otel.shutdown();
});
afterEach(() => {
  server.arrivals.length = 0;
  otel.exporter.reset();
});

/**
 * Holds the thread until `ms` after the deadline's cutoff, like a long synchronous parse would.
 * Budgets are 1 s so that the steps before the block finish in time even on a loaded machine.
 */
function blockUntilPastCutoff(deadline: Deadline, ms: number): void {
  const until = (deadline as DeadlineNode).cutoffMono + ms;
  while (performance.now() < until) {
    // busy: nothing else can run, not even the deadline's own timer
  }
}

const paths = () => server.arrivals.map((a) => a.path);

describe('work that resumes after its cutoff on a blocked event loop', () => {
  it('refuses at throwIfAborted() before the next side effect, although the abort event has not fired yet', async () => {
    const deadline = openDeadline({ operation: 'inventory.sync', timeoutMs: 1_000, parent: null });
    const events: string[] = [];
    deadline.signal.addEventListener('abort', () => events.push('abort event'));
    const sideEffect = async (step: number) => {
      deadline.throwIfAborted();
      events.push(`send ${step}`);
      await send(`${server.url}/step/${step}`, { method: 'POST', signal: deadline.signal });
    };

    await sideEffect(1);
    // A signal held from before the stall: reading the deadline's own state would refresh it.
    const heldSignal = deadline.signal;
    blockUntilPastCutoff(deadline, 150);
    // A continuation runs as a microtask, before the timers phase gets a chance.
    await Promise.resolve();
    const staleAborted = heldSignal.aborted;
    events.push('resumed');
    const refusal = await sideEffect(2).then(
      () => undefined,
      (err: unknown) => err,
    );

    // Guarding on signal.aborted alone would have let step 2 through.
    expect(staleAborted).toBe(false);
    expect(refusal).toBeInstanceOf(DeadlineExceededError);
    expect((refusal as DeadlineExceededError).operation).toBe('inventory.sync');
    // The check itself delivered the abort, after the work had resumed.
    expect(events).toEqual(['send 1', 'resumed', 'abort event']);
    expect(paths()).toEqual(['/step/1']);
    deadline.dispose();
  });

  it('refuses on remainingMs() below what the next step needs', async () => {
    const deadline = openDeadline({ operation: 'report.render', timeoutMs: 1_000, parent: null });
    const STEP_NEEDS_MS = 50;
    const sent: number[] = [];
    for (let step = 1; step <= 3; step++) {
      if (deadline.remainingMs() < STEP_NEEDS_MS) break;
      sent.push(step);
      await send(`${server.url}/render/${step}`, { method: 'PUT' });
      if (step === 1) blockUntilPastCutoff(deadline, 100);
    }
    expect(sent).toEqual([1]);
    expect(paths()).toEqual(['/render/1']);
    deadline.dispose();
  });

  it('stops every worker of a fan-out at its next step; the run span still ends, marked expired', async () => {
    const WORKERS = 3;
    // Each worker does step 1, then waits for the others; the last to arrive runs a slow
    // synchronous step that holds the loop past the cutoff before letting everyone go on.
    let arrived = 0;
    let release!: () => void;
    const barrier = new Promise<void>((resolve) => (release = resolve));
    const refusals = await withDeadline({ operation: 'catalog.reindex', timeoutMs: 1_000, parent: null }, (deadline) =>
      Promise.all(
        Array.from({ length: WORKERS }, async (_, worker) => {
          try {
            for (let step = 1; step <= 5; step++) {
              deadline.throwIfAborted();
              await send(`${server.url}/worker/${worker}/step/${step}`, { method: 'POST' });
              if (step === 1 && ++arrived === WORKERS) {
                blockUntilPastCutoff(deadline, 150);
                release();
              }
              // Should the cutoff pass before everyone arrives (a very loaded machine), do not hang.
              if (step === 1) await Promise.race([barrier, aborted(deadline.signal)]);
            }
            return undefined;
          } catch (err) {
            return err;
          }
        }),
      ),
    );

    expect(refusals).toHaveLength(WORKERS);
    expect(refusals.every((err) => err instanceof DeadlineExceededError)).toBe(true);
    expect(paths().sort()).toEqual(['/worker/0/step/1', '/worker/1/step/1', '/worker/2/step/1']);
    const span = otel.span('catalog.reindex');
    expect(span.attributes['deadline.outcome']).toBe('expired');
    expect(span.attributes['deadline.abort.code']).toBe('DEADLINE_EXCEEDED');
  });
});
