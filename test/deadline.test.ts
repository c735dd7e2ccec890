import { getEventListeners } from 'node:events';
import { describe, expect, it, vi } from 'vitest';
import {
  DeadlineCancelledError,
  DeadlineExceededError,
  InsufficientBudgetError,
  openDeadline,
  type ManagedDeadline,
} from '../src';
import { watchAbort } from './helpers/watch';
import type { DeadlineNode } from '../src/deadline-node';
import { mayStart, refusalAt, refusalFor } from '../instrumentation/call/budget';
import { untilPassed } from './helpers/clock';
import { aborted, sleep } from './helpers/otel';
import { watchTimers } from './helpers/timers';


function disposeAll(...deadlines: ManagedDeadline[]): void {
  for (const d of deadlines) d.dispose();
}

describe('clamping (invariant 1)', () => {
  it('clamps a child that asks for more to the parent cutoff, three levels deep', () => {
    const root = openDeadline({ operation: 'agent.run', timeoutMs: 5_000, parent: null });
    const child = root.child('catalog.search', 30_000);
    const grandchild = child.child('catalog.rank', 60_000);
    const great = grandchild.child('catalog.score', 120_000);
    expect(child.expiresAtMs).toBe(root.expiresAtMs);
    expect(grandchild.expiresAtMs).toBe(root.expiresAtMs);
    expect(great.expiresAtMs).toBe(root.expiresAtMs);
    const rootLeft = root.remainingMs();
    expect(great.remainingMs()).toBeLessThanOrEqual(rootLeft);
    disposeAll(great, grandchild, child, root);
  });

  it('keeps a child own earlier cutoff, and its descendants cannot go past it', () => {
    const root = openDeadline({ operation: 'root', timeoutMs: 5_000, parent: null });
    const child = root.child('short', 100);
    const grandchild = child.child('long', 10_000);
    expect(child.expiresAtMs).toBeLessThan(root.expiresAtMs);
    expect(grandchild.expiresAtMs).toBe(child.expiresAtMs);
    expect(child.remainingMs()).toBeLessThanOrEqual(100);
    disposeAll(grandchild, child, root);
  });

  it('clamps an expiresAtMs child the same way', () => {
    const root = openDeadline({ operation: 'root', timeoutMs: 1_000, parent: null });
    const later = openDeadline({ operation: 'later', expiresAtMs: Date.now() + 60_000, parent: root });
    expect(later.expiresAtMs).toBe(root.expiresAtMs);
    disposeAll(later, root);
  });

  it('keeps the root budget on every descendant and reports usable time after a reserve', () => {
    const root = openDeadline({ operation: 'root', timeoutMs: 2_000, parent: null });
    const child = root.child('c', 500);
    expect(root.budgetMs).toBe(2_000);
    expect(child.budgetMs).toBe(2_000);
    expect(child.usableMs(300)).toBeLessThanOrEqual(200);
    expect(child.usableMs(10_000)).toBe(0);
    expect(root.source).toBe('local');
    disposeAll(child, root);
  });
});

describe('cancellation flows down (invariant 2)', () => {
  it('reaches an armed descendant with the caller reason object', async () => {
    const caller = new AbortController();
    const reason = new Error('caller disconnected');
    const root = openDeadline({ operation: 'agent.run', timeoutMs: 10_000, parent: null, signal: caller.signal });
    const child = root.child('orders.lookup', 10_000);
    const grandchild = child.child('orders.db', 10_000);
    const seen = aborted(grandchild.signal);
    caller.abort(reason);
    expect(await seen).toBe(reason);
    expect(root.signal.reason).toBe(reason);
    expect(child.signal.reason).toBe(reason);
    expect(grandchild.abortReason).toBe(reason);
    disposeAll(grandchild, child, root);
  });

  it('reaches a descendant that never asked for its signal (lazy state)', () => {
    const caller = new AbortController();
    const root = openDeadline({ operation: 'root', timeoutMs: 10_000, parent: null, signal: caller.signal });
    const child = root.child('c', 10_000);
    const reason = { why: 'not an Error' };
    caller.abort(reason);
    expect(child.aborted).toBe(true);
    expect(child.abortReason).toBe(reason);
    expect(() => child.throwIfAborted()).toThrow();
    expect(child.signal.aborted).toBe(true);
    expect(child.signal.reason).toBe(reason);
    disposeAll(child, root);
  });

  it('aborts every descendant at the root cutoff with one DeadlineExceededError', async () => {
    const root = openDeadline({ operation: 'root', timeoutMs: 40, parent: null });
    const child = root.child('c', 10_000);
    const grandchild = child.child('g', 10_000);
    const reason = await aborted(grandchild.signal);
    expect(reason).toBeInstanceOf(DeadlineExceededError);
    expect((reason as DeadlineExceededError).operation).toBe('root');
    expect((reason as DeadlineExceededError).code).toBe('DEADLINE_EXCEEDED');
    expect(child.signal.reason).toBe(reason);
    expect(root.signal.reason).toBe(reason);
    disposeAll(grandchild, child, root);
  });

  it('still reaches a running grandchild after its own parent was disposed', async () => {
    const caller = new AbortController();
    const root = openDeadline({ operation: 'root', timeoutMs: 10_000, parent: null, signal: caller.signal });
    const child = root.child('c', 10_000);
    const grandchild = child.child('g', 10_000);
    const seen = aborted(grandchild.signal);
    child.dispose();
    caller.abort('gone');
    expect(await seen).toBe('gone');
    disposeAll(grandchild, root);
  });
});

describe('isolation (invariant 3)', () => {
  it('a child own cutoff aborts that child and its descendants, never its parent or a sibling', async () => {
    const root = openDeadline({ operation: 'agent.run', timeoutMs: 5_000, parent: null });
    const shortChild = root.child('profile.read', 25);
    const underShort = shortChild.child('profile.db', 1_000);
    const sibling = root.child('policy.read', 2_000);
    const siblingSignal = sibling.signal;
    const rootSignal = root.signal;
    const reason = await aborted(underShort.signal);
    expect(reason).toBeInstanceOf(DeadlineExceededError);
    expect((reason as DeadlineExceededError).operation).toBe('profile.read');
    expect(shortChild.signal.reason).toBe(reason);
    expect(siblingSignal.aborted).toBe(false);
    expect(rootSignal.aborted).toBe(false);
    expect(sibling.aborted).toBe(false);
    expect(root.aborted).toBe(false);
    disposeAll(underShort, shortChild, sibling, root);
  });

  it('isolates siblings in a fan-out of many short children', async () => {
    const root = openDeadline({ operation: 'fanout', timeoutMs: 5_000, parent: null });
    const children = Array.from({ length: 20 }, (_, i) => root.child(`branch.${i}`, i % 2 === 0 ? 20 : 3_000));
    await Promise.all(children.filter((_, i) => i % 2 === 0).map((c) => aborted(c.signal)));
    children.forEach((c, i) => expect(c.signal.aborted).toBe(i % 2 === 0));
    expect(root.signal.aborted).toBe(false);
    disposeAll(...children, root);
  });
});

describe('refusal before work starts (invariant 4)', () => {
  it('throws DeadlineExceededError when the parent has expired', async () => {
    const root = openDeadline({ operation: 'root', timeoutMs: 5, parent: null });
    await untilPassed(root);
    expect(() => root.child('late', 1_000)).toThrow(DeadlineExceededError);
    try {
      root.child('late', 1_000);
    } catch (err) {
      expect((err as DeadlineExceededError).operation).toBe('late');
      expect((err as DeadlineExceededError).expiresAtMs).toBe(root.expiresAtMs);
    }
    root.dispose();
  });

  it('throws DeadlineCancelledError with the cause when the parent was cancelled', () => {
    const caller = new AbortController();
    const root = openDeadline({ operation: 'root', timeoutMs: 5_000, parent: null, signal: caller.signal });
    caller.abort('bye');
    const err = (() => {
      try {
        root.child('c', 100);
      } catch (e) {
        return e;
      }
    })() as DeadlineCancelledError;
    expect(err).toBeInstanceOf(DeadlineCancelledError);
    expect(err.code).toBe('CANCELLED');
    expect(err.cause).toBe('bye');
    root.dispose();
  });

  it('throws InsufficientBudgetError when minUsefulMs (plus reserve) does not fit', () => {
    // The monotonic clock stands still for the three opens: which of them is refused must not depend
    // on how long the machine takes between them (a 150 ms pause after the root's open used to make
    // `fits` throw, and one of 200 ms turned the refusal into DeadlineExceededError).
    const clock = vi.spyOn(performance, 'now').mockReturnValue(performance.now());
    try {
      const root = openDeadline({ operation: 'root', timeoutMs: 200, parent: null });
      let err: unknown;
      try {
        openDeadline({ operation: 'enrich', timeoutMs: 1_000, parent: root, minUsefulMs: 150, reserveMs: 100 });
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(InsufficientBudgetError);
      const budget = err as InsufficientBudgetError;
      expect(budget.code).toBe('INSUFFICIENT_BUDGET');
      expect(budget.operation).toBe('enrich');
      expect(budget.neededMs).toBe(250);
      // What was left at the refusal: all of the root's 200 ms, since no time passed; (t + 200) - t in
      // floating point is 200 only to within the rounding of t (about 1e-13 here), hence toBeCloseTo.
      expect(budget.remainingMs).toBeCloseTo(200, 9);
      const fits = openDeadline({ operation: 'fits', timeoutMs: 1_000, parent: root, minUsefulMs: 50 });
      disposeAll(fits, root);
    } finally {
      clock.mockRestore();
    }
  });

  it('throws DeadlineExceededError for an already-passed absolute cutoff, or a zero budget', () => {
    expect(() => openDeadline({ operation: 'x', expiresAtMs: Date.now() - 1_000, parent: null })).toThrow(
      DeadlineExceededError,
    );
    expect(() => openDeadline({ operation: 'x', timeoutMs: 0, parent: null })).toThrow(DeadlineExceededError);
  });

  it('throws DeadlineCancelledError when the extra signal is already aborted', () => {
    const signal = AbortSignal.abort('already');
    expect(() => openDeadline({ operation: 'x', timeoutMs: 10, parent: null, signal })).toThrow(DeadlineCancelledError);
  });
});

describe('bad arguments (invariant 5)', () => {
  const now = Date.now();
  const cases: [string, unknown, RegExp, typeof TypeError | typeof RangeError][] = [
    ['NaN timeout', { operation: 'op', timeoutMs: NaN }, /timeoutMs must not be NaN/, RangeError],
    ['negative timeout', { operation: 'op', timeoutMs: -1 }, /timeoutMs must not be negative/, RangeError],
    ['infinite timeout', { operation: 'op', timeoutMs: Infinity }, /timeoutMs must be finite/, RangeError],
    ['string timeout', { operation: 'op', timeoutMs: '5' }, /timeoutMs must be a number/, TypeError],
    ['NaN expiry', { operation: 'op', expiresAtMs: NaN }, /expiresAtMs must not be NaN/, RangeError],
    ['negative expiry', { operation: 'op', expiresAtMs: -5 }, /expiresAtMs must not be negative/, RangeError],
    ['infinite expiry', { operation: 'op', expiresAtMs: -Infinity }, /expiresAtMs must be finite/, RangeError],
    ['both', { operation: 'op', timeoutMs: 5, expiresAtMs: now }, /exactly one of timeoutMs and expiresAtMs \(got both\)/, TypeError],
    ['neither', { operation: 'op' }, /exactly one of timeoutMs and expiresAtMs \(got neither\)/, TypeError],
    ['no operation', { timeoutMs: 5 }, /operation must be a non-empty string/, TypeError],
    ['empty operation', { operation: '', timeoutMs: 5 }, /operation/, TypeError],
    ['NaN minUsefulMs', { operation: 'op', timeoutMs: 5, minUsefulMs: NaN }, /minUsefulMs must not be NaN/, RangeError],
    ['negative reserve', { operation: 'op', timeoutMs: 5, reserveMs: -1 }, /reserveMs must not be negative/, RangeError],
    ['bad signal', { operation: 'op', timeoutMs: 5, signal: {} }, /signal must be an AbortSignal/, TypeError],
    ['bad parent', { operation: 'op', timeoutMs: 5, parent: { expiresAtMs: 'x' } }, /parent must be a Deadline/, TypeError],
  ];
  it.each(cases)('%s', (_name, options, message, type) => {
    expect(() => openDeadline({ parent: null, ...(options as object) } as never)).toThrow(type);
    expect(() => openDeadline({ parent: null, ...(options as object) } as never)).toThrow(message);
  });

  it('rejects a non-object', () => {
    expect(() => openDeadline(undefined as never)).toThrow(TypeError);
  });

  it('rejects a bad child timeout', () => {
    const root = openDeadline({ operation: 'root', timeoutMs: 1_000, parent: null });
    expect(() => root.child('c', NaN)).toThrow(/timeoutMs must not be NaN/);
    expect(() => root.usableMs(-1)).toThrow(RangeError);
    root.dispose();
  });
});

describe('timers and listeners', () => {
  it('creates no timer until the signal is asked for, and clears it on dispose when nobody listens', () => {
    const timers = watchTimers();
    try {
      const root = openDeadline({ operation: 'root', timeoutMs: 60_000, parent: null });
      const child = root.child('c', 30_000);
      expect(timers.live()).toBe(0);
      void child.signal;
      // The child's own; the root it registers with needs none (the child's cutoff comes first).
      expect(timers.live()).toBe(1);
      child.dispose();
      expect(timers.live()).toBe(0);
      root.dispose();
      expect(timers.live()).toBe(0);
    } finally {
      timers.restore();
    }
  });

  it('removes its listener from the extra signal on dispose', () => {
    const caller = new AbortController();
    const root = openDeadline({ operation: 'root', timeoutMs: 60_000, parent: null, signal: caller.signal });
    expect(getEventListeners(caller.signal, 'abort')).toHaveLength(0);
    void root.signal;
    expect(getEventListeners(caller.signal, 'abort')).toHaveLength(1);
    root.dispose();
    expect(getEventListeners(caller.signal, 'abort')).toHaveLength(0);
  });

  it('leaves the parent holding nothing for disposed children', () => {
    const root = openDeadline({ operation: 'root', timeoutMs: 60_000, parent: null });
    void root.signal;
    for (let i = 0; i < 1_000; i++) {
      const child = root.child('c', 1_000);
      void child.signal;
      child.dispose();
    }
    expect((root as unknown as { armedChildren?: Set<unknown> }).armedChildren?.size ?? 0).toBe(0);
    root.dispose();
  });

  it('does not fire early for delays above 2^31-1 ms', async () => {
    const far = openDeadline({ operation: 'far', timeoutMs: 2 ** 31 + 5_000, parent: null });
    const signal = far.signal;
    await sleep(30);
    expect(signal.aborted).toBe(false);
    expect(far.remainingMs()).toBeGreaterThan(2 ** 31);
    far.dispose();
  });

  it('keeps an aborted signal aborted and never fires a disposed one', async () => {
    const d = openDeadline({ operation: 'd', timeoutMs: 20, parent: null });
    const signal = d.signal;
    d.dispose();
    await sleep(40);
    expect(signal.aborted).toBe(false);
    expect(d.expired).toBe(true);
  });

  it('sees the cutoff on the clock even when the event loop is blocked', () => {
    const d = openDeadline({ operation: 'd', timeoutMs: 20, parent: null });
    const signal = d.signal;
    const until = performance.now() + 30;
    while (performance.now() < until) {
      // block the loop: no timer can run
    }
    expect(d.expired).toBe(true);
    expect(d.remainingMs()).toBe(0);
    expect(() => d.throwIfAborted()).toThrow(DeadlineExceededError);
    // Checking the clock aborted the signal synchronously, without waiting for the timer.
    expect(signal.aborted).toBe(true);
    d.dispose();
  });
});

describe('watchDeadline (the one way to be told of an abort)', () => {
  it('tells a subscriber once, with the ancestor reason, without creating an AbortController', () => {
    const RealController = globalThis.AbortController;
    let created = 0;
    globalThis.AbortController = class extends RealController {
      constructor() {
        super();
        created++;
      }
    };
    try {
      const root = openDeadline({ operation: 'root', timeoutMs: 10_000, parent: null });
      const child = root.child('call', 10_000);
      const seen: unknown[] = [];
      watchAbort(child, (reason) => seen.push(reason));
      const stop = watchAbort(child, () => seen.push('unsubscribed one'));
      stop();
      (root as unknown as { abort(reason: unknown): void }).abort('gone');
      expect(seen).toEqual(['gone']);
      expect(created).toBe(0);
      disposeAll(child, root);
    } finally {
      globalThis.AbortController = RealController;
    }
  });

  it('fires at the cutoff, and at once for a deadline already aborted', async () => {
    const d = openDeadline({ operation: 'short', timeoutMs: 20, parent: null });
    const reason = await new Promise((resolve) => watchAbort(d, resolve));
    expect(reason).toBeInstanceOf(DeadlineExceededError);
    let late: unknown;
    watchAbort(d, (r) => (late = r));
    expect(late).toBe(reason);
    d.dispose();
  });

  it('keeps going when one subscriber throws, and outlives dispose until the cutoff', async () => {
    const caller = new AbortController();
    const d = openDeadline({ operation: 'd', timeoutMs: 10_000, parent: null, signal: caller.signal });
    const seen: string[] = [];
    watchAbort(d, () => {
      throw new Error('bad subscriber');
    });
    watchAbort(d, () => seen.push('second'));
    caller.abort('x');
    expect(seen).toEqual(['second']);
    const other = openDeadline({ operation: 'o', timeoutMs: 20, parent: null });
    const fired = new Promise<unknown>((resolve) => watchAbort(other, resolve));
    other.dispose();
    // The subscription is a call still in flight: disposing the scope must not switch its cutoff off.
    const reason = await fired;
    expect(reason).toBeInstanceOf(DeadlineExceededError);
    expect(other.aborted).toBe(true);
  });

  it('works through the signal for a deadline from another implementation', () => {
    const controller = new AbortController();
    const foreign = { signal: controller.signal } as unknown as Parameters<typeof watchAbort>[0];
    const seen: unknown[] = [];
    watchAbort(foreign, (r) => seen.push(r));
    const unwatch = watchAbort(foreign, () => seen.push('unwatched'));
    unwatch();
    controller.abort('foreign');
    expect(seen).toEqual(['foreign']);
  });
});

describe('subscriptions and leftBeforeAbort (what the guards use on every call)', () => {
  it('keeps a disposed deadline armed while subscribed, and releases it at the last unsubscribe', () => {
    const d = openDeadline({ operation: 'scope', timeoutMs: 10_000, parent: null }) as DeadlineNode;
    const listener = () => {};
    expect(d.leftBeforeAbort()).toBeGreaterThan(0);
    // The same listener twice is two holds.
    const first = watchAbort(d, listener);
    const second = watchAbort(d, listener);
    expect(d.subscriberCount).toBe(2);
    d.dispose();
    first();
    expect(d.isArmed).toBe(true);
    second();
    expect(d.subscriberCount).toBe(0);
    expect(d.isArmed).toBe(false);
  });

  it('leftBeforeAbort reads the clock once and sees a cutoff no timer has reported yet', () => {
    const long = openDeadline({ operation: 'long', timeoutMs: 10_000, parent: null }) as DeadlineNode;
    const d = openDeadline({ operation: 'blocked', timeoutMs: 1, parent: null }) as DeadlineNode;
    // The event loop stays blocked past the cutoff: no timer can run.
    while (d.remainingMs() > 0);
    const reads = vi.spyOn(performance, 'now');
    try {
      expect(long.leftBeforeAbort()).toBeGreaterThan(0);
      expect(reads).toHaveBeenCalledTimes(1);
      reads.mockClear();
      expect(d.leftBeforeAbort()).toBe(-1);
      expect(reads).toHaveBeenCalledTimes(1);
      expect(d.abortReason).toBeInstanceOf(DeadlineExceededError);
    } finally {
      reads.mockRestore();
      disposeAll(long, d);
    }
  });

  it('a watcher of an armed deadline reads no clock, and hears of a cutoff passed a moment ago from its timer', async () => {
    const d = openDeadline({ operation: 'blocked', timeoutMs: 5, parent: null }) as DeadlineNode;
    const seen: unknown[] = [];
    // The first watcher arms the deadline and sets its timer at the cutoff.
    watchAbort(d, (reason) => seen.push(reason));
    // The event loop stays blocked past the cutoff: the timer cannot have run.
    while (d.remainingMs() > 0);
    const reads = vi.spyOn(performance, 'now');
    let second: Promise<unknown>;
    try {
      second = new Promise((resolve) => watchAbort(d, resolve));
      expect(reads).not.toHaveBeenCalled();
    } finally {
      reads.mockRestore();
    }
    expect(seen).toEqual([]);
    // The timer tells both watchers, in the order they came, with one error.
    const reason = await second;
    expect(reason).toBeInstanceOf(DeadlineExceededError);
    expect(seen).toEqual([reason]);
    // An unarmed deadline past its cutoff tells a new watcher at once.
    const late = openDeadline({ operation: 'late', timeoutMs: 1, parent: null });
    while (late.remainingMs() > 0);
    const told: unknown[] = [];
    watchAbort(late, (reason) => told.push(reason));
    expect(told[0]).toBeInstanceOf(DeadlineExceededError);
    disposeAll(d, late);
  });

  it('mayStart says yes exactly when refusalAt has no refusal', () => {
    const d = openDeadline({ operation: 'call', timeoutMs: 10_000, parent: null });
    for (const left of [-1, 0, 0.5, 5, 50, Number.NaN]) {
      for (const minUsefulMs of [0, 5, 100]) expect(mayStart(left, minUsefulMs)).toBe(refusalAt(d, left, 'op', minUsefulMs) === undefined);
    }
    d.dispose();
  });

  it('refusalFor reads the clock once', () => {
    const d = openDeadline({ operation: 'call', timeoutMs: 10_000, parent: null });
    const reads = vi.spyOn(performance, 'now');
    try {
      expect(refusalFor(d, 'pg.query', 0)).toBeUndefined();
      expect(reads).toHaveBeenCalledTimes(1);
      reads.mockClear();
      expect(refusalFor(d, 'pg.query', 20_000)).toBeInstanceOf(InsufficientBudgetError);
      expect(reads).toHaveBeenCalledTimes(1);
    } finally {
      reads.mockRestore();
      d.dispose();
    }
  });
});

describe('the clock a deadline reads', () => {
  // The package reads the global `performance` on every clock read: fake timers installed before
  // a deadline is opened govern it.
  it('follows fake timers that replace the global performance, installed before the deadline opens', () => {
    const realPerformance = globalThis.performance;
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'Date', 'performance'] });
    let d: ManagedDeadline | undefined;
    try {
      expect(globalThis.performance).not.toBe(realPerformance);
      d = openDeadline({ operation: 'faked', timeoutMs: 1_000, parent: null });
      const signal = d.signal;
      // Fake time stands still: exactly the budget is left, whatever the real clock did meanwhile.
      expect(d.remainingMs()).toBe(1_000);
      vi.advanceTimersByTime(400);
      expect(d.remainingMs()).toBe(600);
      expect(signal.aborted).toBe(false);
      vi.advanceTimersByTime(600);
      expect(d.remainingMs()).toBe(0);
      expect(signal.aborted).toBe(true);
      expect(signal.reason).toBeInstanceOf(DeadlineExceededError);
    } finally {
      d?.dispose();
      vi.useRealTimers();
    }
  });

  it('reads the real clock again for deadlines opened after the fake timers are gone', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'Date', 'performance'] });
    try {
      openDeadline({ operation: 'faked', timeoutMs: 1_000, parent: null }).dispose();
    } finally {
      vi.useRealTimers();
    }
    const real = openDeadline({ operation: 'real', timeoutMs: 1_000, parent: null });
    try {
      const before = real.remainingMs();
      await sleep(20);
      // Real time passed: fake time would have left the remainder where it was.
      expect(real.remainingMs()).toBeLessThan(before);
    } finally {
      real.dispose();
    }
  });

  it('a spy on performance.now sees the reads of a deadline opened before the spy', () => {
    const d = openDeadline({ operation: 'spied', timeoutMs: 10_000, parent: null });
    const reads = vi.spyOn(performance, 'now').mockReturnValue(performance.now() + 20_000);
    try {
      expect(d.remainingMs()).toBe(0);
      expect(reads).toHaveBeenCalled();
    } finally {
      reads.mockRestore();
      d.dispose();
    }
  });
});
