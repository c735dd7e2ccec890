import { getEventListeners } from 'node:events';
import { describe, expect, it } from 'vitest';
import { DeadlineCancelledError, DeadlineExceededError, openDeadline, type ManagedDeadline } from '../src';
import { watchAbort } from './helpers/watch';
import { DeadlineNode } from '../src/deadline-node';
import { aborted, sleep } from './helpers/otel';
import { watchTimers } from './helpers/timers';

/** Waits until `deadline`'s cutoff has passed on its own clock, however late the timers run. */
async function pastCutoff(deadline: ManagedDeadline): Promise<void> {
  while (deadline.remainingMs() > 0) await sleep(deadline.remainingMs() + 1);
}

describe('dispose releases resources, never enforcement', () => {
  it('throwIfAborted, aborted and expired follow the clock after dispose', async () => {
    const d = openDeadline({ operation: 'd', timeoutMs: 30, parent: null });
    d.dispose();
    await pastCutoff(d);
    expect(d.expired).toBe(true);
    expect(d.aborted).toBe(true);
    expect(() => d.throwIfAborted()).toThrow(DeadlineExceededError);
  });

  it('a signal first read after dispose aborts at the cutoff', async () => {
    const d = openDeadline({ operation: 'd', timeoutMs: 30, parent: null });
    d.dispose();
    const reason = await aborted(d.signal);
    expect(reason).toBeInstanceOf(DeadlineExceededError);
    expect(d.abortReason).toBe(reason);
  });

  it('a disposed child still follows its ancestors: cancelling the root reaches its signal and its state', async () => {
    const caller = new AbortController();
    const root = openDeadline({ operation: 'root', timeoutMs: 60_000, parent: null, signal: caller.signal });
    const armedEarly = root.child('early', 30_000);
    const early = aborted(armedEarly.signal);
    armedEarly.dispose();
    const lazy = root.child('lazy', 30_000);
    lazy.dispose();
    caller.abort('caller went away');
    expect(await early).toBe('caller went away');
    expect(lazy.aborted).toBe(true);
    expect(lazy.abortReason).toBe('caller went away');
    expect(lazy.signal.aborted).toBe(true);
    root.dispose();
  });

  it('a subscription (a call in flight) holds the timer and the link to the root until it is undone', () => {
    const timers = watchTimers();
    const caller = new AbortController();
    try {
      const root = openDeadline({ operation: 'root', timeoutMs: 60_000, parent: null, signal: caller.signal });
      const child = root.child('call', 30_000) as DeadlineNode;
      const unsubscribe = watchAbort(child, () => {});
      child.dispose();
      root.dispose();
      // Held: the child's cutoff timer and the root's listener on the caller's signal both stay.
      expect(timers.live()).toBe(1);
      expect(getEventListeners(caller.signal, 'abort')).toHaveLength(1);
      expect(child.isArmed).toBe(true);
      unsubscribe();
      expect(timers.live()).toBe(0);
      expect(getEventListeners(caller.signal, 'abort')).toHaveLength(0);
      expect(child.isArmed).toBe(false);
      expect((root as DeadlineNode).isArmed).toBe(false);
    } finally {
      timers.restore();
    }
  });

  it('a call in flight under a disposed scope is cancelled by its caller', () => {
    const caller = new AbortController();
    const root = openDeadline({ operation: 'root', timeoutMs: 60_000, parent: null, signal: caller.signal });
    const scope = root.child('scope', 30_000);
    const seen: unknown[] = [];
    const unsubscribe = watchAbort(scope, (reason) => seen.push(reason));
    scope.dispose();
    root.dispose();
    caller.abort(new DeadlineCancelledError('root', 'client disconnected'));
    expect(seen).toHaveLength(1);
    expect(seen[0]).toBeInstanceOf(DeadlineCancelledError);
    unsubscribe();
  });

  it('a signal someone listens to keeps its timer after dispose; one nobody listens to is released', async () => {
    const timers = watchTimers();
    try {
      const listened = openDeadline({ operation: 'listened', timeoutMs: 30, parent: null });
      const fired = aborted(listened.signal);
      const idle = openDeadline({ operation: 'idle', timeoutMs: 60_000, parent: null });
      void idle.signal;
      expect(timers.live()).toBe(2);
      listened.dispose();
      idle.dispose();
      expect(timers.live()).toBe(1);
      expect(await fired).toBeInstanceOf(DeadlineExceededError);
      expect(timers.live()).toBe(0);
    } finally {
      timers.restore();
    }
  });

  it('leaves nothing registered on a long-lived root after many subscribed-and-settled children', () => {
    const root = openDeadline({ operation: 'root', timeoutMs: 60_000, parent: null }) as DeadlineNode;
    void root.signal;
    for (let i = 0; i < 1_000; i++) {
      const child = root.child('c', 30_000);
      const unsubscribe = watchAbort(child, () => {});
      child.dispose();
      unsubscribe();
    }
    expect((root as unknown as { armedChildren?: Set<unknown> }).armedChildren?.size ?? 0).toBe(0);
    root.dispose();
  });
});

// Each test makes up to 100,000 AbortControllers and timers: seconds of work on a loaded 2-core
// machine. The timeout guards against a hang; speed is the core bench's job, not this test's.
describe('deep trees', { timeout: 60_000 }, () => {
  const DEPTH = 100_000;

  function chain(root: ManagedDeadline, armEach: boolean): ManagedDeadline[] {
    const nodes = [root];
    for (let i = 1; i < DEPTH; i++) {
      const next = nodes[i - 1].child(`n${i}`, 60_000);
      if (armEach) void next.signal;
      nodes.push(next);
    }
    return nodes;
  }

  it('a 100,000-deep chain opens, answers at the leaf and cancels to the leaf without a stack overflow', () => {
    const caller = new AbortController();
    const root = openDeadline({ operation: 'root', timeoutMs: 120_000, parent: null, signal: caller.signal });
    const nodes = chain(root, false);
    const leaf = nodes[DEPTH - 1];
    expect(leaf.aborted).toBe(false);
    const leafSignal = leaf.signal;
    expect(leafSignal.aborted).toBe(false);
    caller.abort('stop');
    expect(leafSignal.aborted).toBe(true);
    expect(leafSignal.reason).toBe('stop');
    expect(nodes[DEPTH >> 1].abortReason).toBe('stop');
    for (const node of nodes) node.dispose();
  });

  it('a 100,000-deep chain with every node armed cancels every node from the root', () => {
    const caller = new AbortController();
    const root = openDeadline({ operation: 'root', timeoutMs: 120_000, parent: null, signal: caller.signal });
    const nodes = chain(root, true);
    caller.abort('stop');
    expect(nodes.every((node) => node.signal.aborted && node.signal.reason === 'stop')).toBe(true);
    for (const node of nodes) node.dispose();
  });

  it('a 100,000-deep chain of nodes with their own signals arms from the leaf without a stack overflow', () => {
    const controllers: AbortController[] = [];
    let node: ManagedDeadline = openDeadline({ operation: 'root', timeoutMs: 120_000, parent: null });
    const nodes = [node];
    for (let i = 1; i < DEPTH; i++) {
      const controller = new AbortController();
      controllers.push(controller);
      node = openDeadline({ operation: `n${i}`, timeoutMs: 60_000, parent: node, signal: controller.signal });
      void node.signal;
      nodes.push(node);
    }
    controllers[0].abort('top');
    expect(node.signal.reason).toBe('top');
    for (const each of nodes) each.dispose();
  });
});
