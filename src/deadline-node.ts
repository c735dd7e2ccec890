import { getEventListeners } from 'node:events';
import { diag } from '@opentelemetry/api';
import type { Deadline, DeadlineSource, ManagedDeadline } from './deadline';
import { DeadlineExceededError } from './errors';
import { openDeadlineUnder } from './open';
import { checkDuration, monotonicNow, remainingUntil, safeTimerDelay } from './time';

/** How a node is created: opened here, from the wire, from a queue envelope, or by server admission. */
export type NodeInit = Pick<Deadline, 'operation' | 'expiresAtMs' | 'source' | 'budgetMs'> &
  Partial<Pick<Deadline, 'parent' | 'signal' | 'wireSkewMs' | 'queueDwellMs'>> & { cutoffMono: number };

const NOT_ABORTED: unique symbol = Symbol('not aborted');

/**
 * @internal What is told, once, when a deadline aborts (`watchDeadline`): a guard is its own watcher, with no closure
 * per call. Make watchers class instances, not object literals: V8 may move a literal's allocation site to old space
 * ("pretenuring"), and an entry made there keeps the guard it reaches, and all its call's young objects, alive through
 * every scavenge until a full GC. Measured on a Redis GET under a deadline: that made the guard cost about four times
 * as much (docs/databases.md).
 */
export interface AbortWatcher {
  onAbort(reason: unknown): void;
}

/** A watcher that throws must not stop the abort from reaching the rest of the tree. */
function notify(watcher: AbortWatcher, reason: unknown): void {
  try {
    watcher.onAbort(reason);
  } catch (err) {
    // Same as an AbortSignal listener that throws: it stops nothing, but say so.
    diag.debug('otel-deadline: an abort listener threw', err);
  }
}

/** Where a deadline ends on this process's monotonic clock, as seen at `nowMono`. */
export function cutoffOf(deadline: Deadline, nowMono: number): number {
  return deadline instanceof DeadlineNode ? deadline.cutoffMono : nowMono + deadline.remainingMs();
}

/**
 * One node in the deadline tree. Abort state is derived on demand: the clock
 * needs no walk (a child's cutoff is never later than its parent's), and
 * cancellation walks only the "watch points" above (roots, remote deadlines,
 * nodes with a `signal`, nodes under a foreign Deadline), so opening a child is
 * O(1) at any depth. Timers, controllers and listeners are made only when a node
 * is subscribed to or its `signal` read ("armed"); an unarmed node is referenced
 * by nothing above it. `dispose()` ends the scope's claim only: the node stays
 * armed while anything holds it. No AbortSignal.any: on Node 20 it leaks
 * dependants on a long-lived parent (nodejs/node#54614).
 */
export class DeadlineNode implements ManagedDeadline {
  private operationName: string;
  readonly expiresAtMs: number;
  readonly source: DeadlineSource;
  readonly budgetMs: number;
  readonly parent: Deadline | undefined;
  readonly wireSkewMs: number | undefined;
  readonly queueDwellMs: number | undefined;
  /** @internal the cutoff on the monotonic clock */
  readonly cutoffMono: number;

  private readonly extraSignal: AbortSignal | undefined;
  /** A parent that is not one of ours (another copy of this package, or a user implementation). */
  private readonly foreignParent: Deadline | undefined;
  /** The topmost node up the chain with this same cutoff: every node sharing it shares its expiry reason. */
  private readonly cutoffOwner: DeadlineNode;
  /** The nearest watch point at or above this node. */
  private readonly watch: DeadlineNode | undefined;
  /** The nearest watch point strictly above this node: the one an armed node registers with. */
  private readonly watchAbove: DeadlineNode | undefined;
  private reason: unknown = NOT_ABORTED;
  /** When `reason` was recorded, on the monotonic clock: when the abort reached whatever listens here. */
  private abortedAtMono: number | undefined = undefined;
  private controller: AbortController | undefined;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private armed = false;
  private registeredIn: DeadlineNode | undefined;
  private armedChildren: Set<DeadlineNode> | undefined;
  private detachListeners: (() => void) | undefined;
  /** One entry per watcher (a watcher watches a deadline once), each a hold on this node's timer. */
  private abortSubscribers: Set<AbortWatcher> | undefined;
  private isDisposed = false;

  constructor(init: NodeInit) {
    this.operationName = init.operation;
    this.cutoffMono = init.cutoffMono;
    this.expiresAtMs = init.expiresAtMs;
    this.source = init.source;
    this.budgetMs = init.budgetMs;
    this.parent = init.parent;
    this.extraSignal = init.signal;
    this.wireSkewMs = init.wireSkewMs;
    this.queueDwellMs = init.queueDwellMs;
    const parentNode = init.parent instanceof DeadlineNode ? init.parent : undefined;
    this.foreignParent = parentNode === undefined ? init.parent : undefined;
    this.cutoffOwner = parentNode !== undefined && parentNode.cutoffMono === init.cutoffMono ? parentNode.cutoffOwner : this;
    this.watchAbove = parentNode?.watch;
    const isWatchPoint = parentNode === undefined || init.source === 'remote' || init.signal !== undefined;
    this.watch = isWatchPoint ? this : this.watchAbove;
  }

  get operation(): string {
    return this.operationName;
  }

  get disposed(): boolean {
    return this.isDisposed;
  }

  /** @internal A server takes over, under its own name, the node a global propagator built from its request. */
  adoptAs(operation: string): this {
    this.operationName = operation;
    return this;
  }

  remainingMs(): number {
    return remainingUntil(this.cutoffMono);
  }

  usableMs(reserveMs = 0): number {
    const left = this.remainingMs() - checkDuration('reserveMs', reserveMs);
    return left > 0 ? left : 0;
  }

  get expired(): boolean {
    return monotonicNow() >= this.cutoffMono;
  }

  get aborted(): boolean {
    return this.currentReason() !== NOT_ABORTED;
  }

  get abortReason(): unknown {
    const reason = this.currentReason();
    return reason === NOT_ABORTED ? undefined : reason;
  }

  /** Aborts at the cutoff or when an ancestor or the `signal` option aborts, even after dispose. Created on first access. */
  get signal(): AbortSignal {
    if (this.controller === undefined) this.controller = new AbortController();
    const reason = this.currentReason();
    if (reason !== NOT_ABORTED) {
      if (!this.controller.signal.aborted) this.controller.abort(reason);
    } else {
      // Also after dispose: whoever reads the signal now is about to rely on it.
      this.arm();
      this.startTimer();
    }
    return this.controller.signal;
  }

  /** @internal Tells `watcher` once when this aborts (at once if it has), until `unsubscribe`: see `watchDeadline`. */
  subscribe(watcher: AbortWatcher): void {
    // arm() ends by deriving the abort state. An armed node with its timer set is told of any abort, by push or by
    // that timer, so it reads no clock: a cutoff passed a moment ago reaches the watcher when the timer runs.
    if (!this.armed) this.arm();
    else if (this.timer === undefined) this.currentReason();
    if (this.reason !== NOT_ABORTED) return watcher.onAbort(this.reason);
    this.startTimer();
    (this.abortSubscribers ??= new Set()).add(watcher);
  }

  /** @internal */
  unsubscribe(watcher: AbortWatcher): void {
    if (this.abortSubscribers?.delete(watcher) === true) this.releaseIfIdle();
  }

  /** @internal The ms left, or -1 once aborted (`abortReason` then holds why), with one clock read. */
  leftBeforeAbort(): number {
    if (this.reason === NOT_ABORTED) {
      const cancelled = this.cancellationAbove();
      if (cancelled !== NOT_ABORTED) {
        this.abort(cancelled);
      } else {
        const now = monotonicNow();
        const left = this.cutoffMono - now;
        if (left > 0) return left;
        this.abort(this.cutoffOwner.expiryReason(now), now);
      }
    }
    return -1;
  }

  /**
   * @internal The abort reason at an instant `left` ms before the cutoff, or undefined, without
   * aborting: no listener runs. For the span processor inside `span.end()`, where a listener that
   * ends the same span would end it twice.
   */
  peekAbortReasonAt(left: number): unknown {
    if (this.reason !== NOT_ABORTED) return this.reason;
    const cancelled = this.cancellationAbove();
    if (cancelled !== NOT_ABORTED) return cancelled;
    if (left > 0) return undefined;
    const owner = this.cutoffOwner;
    return owner.reason !== NOT_ABORTED ? owner.reason : new DeadlineExceededError(owner.operation, owner.expiresAtMs);
  }

  /** @internal When the abort `peekAbortReasonAt` finds was recorded (monotonic); undefined if not yet. */
  peekAbortRecordedAtMono(): number | undefined {
    if (this.reason !== NOT_ABORTED) return this.abortedAtMono;
    let found: number | undefined;
    for (let point = this.watch; point !== undefined; point = point.watchAbove) {
      if (point.reason !== NOT_ABORTED) found = point.abortedAtMono;
      else if (point.armed) break;
    }
    return found ?? this.cutoffOwner.abortedAtMono;
  }

  /** @internal Whether something other than the clock aborted this, without reading the clock or recording. */
  abortedBesidesClock(): boolean {
    return this.reason !== NOT_ABORTED || this.cancellationAbove() !== NOT_ABORTED;
  }

  /** @internal How many abort listeners are waiting: lets tests prove none is left behind. */
  get subscriberCount(): number {
    return this.abortSubscribers?.size ?? 0;
  }

  /** @internal Whether this node holds a timer or is registered above: lets tests prove what dispose released. */
  get isArmed(): boolean {
    return this.armed;
  }

  child(operation: string, timeoutMs: number): ManagedDeadline {
    return openDeadlineUnder(this, { operation, timeoutMs });
  }

  throwIfAborted(): void {
    const reason = this.currentReason();
    if (reason !== NOT_ABORTED) throw reason;
  }

  /**
   * Ends the opener's claim. It never cancels and never turns enforcement off:
   * whatever still holds the node keeps it armed; what nobody holds is released now.
   */
  dispose(): void {
    if (this.isDisposed) return;
    this.isDisposed = true;
    this.releaseIfIdle();
  }

  /** @internal Aborts this watch point and every armed descendant with the same reason. */
  abort(reason: unknown, nowMono?: number): void {
    if (this.reason !== NOT_ABORTED) return;
    // When the abort reached it, for the span processor's stop lag.
    const at = nowMono ?? monotonicNow();
    // Iterative, so a 100k-deep armed chain cannot overflow the stack.
    const pending: DeadlineNode[] = [this];
    for (let node = pending.pop(); node !== undefined; node = pending.pop()) {
      if (node.reason !== NOT_ABORTED) continue;
      node.reason = reason;
      node.abortedAtMono = at;
      for (const child of node.armedChildren ?? []) {
        child.registeredIn = undefined;
        pending.push(child);
      }
      node.armedChildren = undefined;
      const above = node.disarm();
      // The node it hung under may have been waiting only for it.
      if (node === this && above !== undefined && above.reason === NOT_ABORTED) above.releaseIfIdle();
      node.controller?.abort(reason);
      const subscribers = node.abortSubscribers;
      node.abortSubscribers = undefined;
      if (subscribers !== undefined) for (const watcher of subscribers) notify(watcher, reason);
    }
  }

  /** Derives the abort state (topmost cancellation first, then the clock) and makes it sticky. */
  private currentReason(): unknown {
    this.leftBeforeAbort();
    return this.reason;
  }

  /** The topmost cancellation among the watch points at or above this node. */
  private cancellationAbove(): unknown {
    let found: unknown = NOT_ABORTED;
    for (let point = this.watch; point !== undefined; point = point.watchAbove) {
      const reason = point.ownCancellation();
      if (reason !== NOT_ABORTED) found = reason;
      // An armed watch point already has any abort from above pushed into it.
      else if (point.armed) break;
    }
    return found;
  }

  /** A watch point's own cancellation: already recorded, from its signal, or from a foreign parent. */
  private ownCancellation(): unknown {
    if (this.reason !== NOT_ABORTED) return this.reason;
    if (this.extraSignal?.aborted === true) return this.extraSignal.reason;
    if (this.foreignParent?.aborted === true) return this.foreignParent.abortReason;
    return NOT_ABORTED;
  }

  /** The cutoff owner's expiry reason, created once: every node sharing the cutoff throws the same object. */
  private expiryReason(nowMono?: number): unknown {
    if (this.reason === NOT_ABORTED) this.abort(new DeadlineExceededError(this.operation, this.expiresAtMs), nowMono);
    return this.reason;
  }

  /** True while something other than the opener relies on this node being armed. */
  private isHeld(): boolean {
    if ((this.abortSubscribers?.size ?? 0) > 0 || (this.armedChildren?.size ?? 0) > 0) return true;
    const signal = this.controller?.signal;
    return signal !== undefined && !signal.aborted && getEventListeners(signal, 'abort').length > 0;
  }

  /** Disarms a disposed node nobody holds, then its watch point above if that was its last hold. */
  private releaseIfIdle(): void {
    if (!this.isDisposed || !this.armed || this.isHeld()) return;
    // A loop, not recursion: the chain of watch points above may be deep.
    let above = this.disarm();
    while (above !== undefined && above.isDisposed && above.armed && !above.isHeld()) above = above.disarm();
  }

  /** Links this node and the unarmed watch points above it into the push chain, top-down, without recursion. */
  private arm(): void {
    if (this.armed || this.reason !== NOT_ABORTED) return;
    const chain: DeadlineNode[] = [this];
    let registrar = this.watchAbove;
    while (registrar !== undefined && !registrar.armed && registrar.reason === NOT_ABORTED) {
      chain.push(registrar);
      registrar = registrar.watchAbove;
    }
    for (let i = chain.length - 1; i >= 0; i--) {
      const node = chain[i];
      const above = i === chain.length - 1 ? registrar : chain[i + 1];
      if (above !== undefined && above.reason !== NOT_ABORTED) {
        node.abort(above.reason);
        continue;
      }
      node.armed = true;
      if (above !== undefined) {
        (above.armedChildren ??= new Set()).add(node);
        node.registeredIn = above;
      }
      node.listenToSources();
      // A source may have fired before its listener was added; aborting here, top-down, pushes it into the rest.
      const fired = node.ownCancellation();
      if (fired !== NOT_ABORTED) node.abort(fired);
    }
    this.currentReason();
  }

  private listenToSources(): void {
    const cleanups: (() => void)[] = [];
    for (const signal of [this.foreignParent?.signal, this.extraSignal]) {
      if (signal === undefined) continue;
      const onAbort = () => this.abort(signal.reason);
      signal.addEventListener('abort', onAbort, { once: true });
      cleanups.push(() => signal.removeEventListener('abort', onAbort));
    }
    if (cleanups.length === 1) this.detachListeners = cleanups[0];
    else if (cleanups.length > 1) this.detachListeners = () => cleanups.forEach((cleanup) => cleanup());
  }

  /** A timer at the cutoff for a node someone waits on; push-only watch points need none. */
  private startTimer(): void {
    if (this.timer !== undefined || !this.armed || this.reason !== NOT_ABORTED) return;
    const delay = safeTimerDelay(this.remainingMs());
    this.timer = setTimeout(() => this.onTimer(), delay);
    // A pending deadline must never keep the process alive.
    this.timer.unref();
  }

  private onTimer(): void {
    this.timer = undefined;
    // Timers fire a little early, and long delays are split into steps.
    if (this.remainingMs() > 0) this.startTimer();
    else this.currentReason();
  }

  /** Drops the timer, the source listeners and the registration above; returns the node it was registered with. */
  private disarm(): DeadlineNode | undefined {
    this.armed = false;
    clearTimeout(this.timer);
    this.timer = undefined;
    this.detachListeners?.();
    this.detachListeners = undefined;
    const above = this.registeredIn;
    this.registeredIn = undefined;
    above?.armedChildren?.delete(this);
    return above;
  }
}
