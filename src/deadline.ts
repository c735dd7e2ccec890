import { getEventListeners } from 'node:events';
import { diag } from '@opentelemetry/api';
import { DeadlineCancelledError, DeadlineExceededError, InsufficientBudgetError } from './errors';
import { LinkedItem, LinkedSet, type Linked } from './linked-set';
import {
  checkBudget,
  checkDuration,
  checkEpoch,
  MAX_DEADLINE_MS,
  epochToMonotonic,
  minCutoff,
  monotonicNow,
  remainingUntil,
  safeTimerDelay,
} from './time';

export type DeadlineSource = 'local' | 'remote';

/** A read-only view of one absolute cutoff and the cancellation that goes with it. */
export interface Deadline {
  readonly operation: string;
  /** The cutoff in epoch milliseconds on this process's wall clock (for the wire and logs). */
  readonly expiresAtMs: number;
  /** `local` when opened in this process, `remote` when built from incoming headers or a queue envelope. */
  readonly source: DeadlineSource;
  /** The root's budget in this process, or what arrived on the wire for a remote root. */
  readonly budgetMs: number;
  /** The deadline this one was clamped under, if any. */
  readonly parent: Deadline | undefined;
  /** How far the absolute and relative wire values disagreed (absolute minus relative), if both arrived. */
  readonly wireSkewMs: number | undefined;
  /** How long the work waited in a queue before a worker admitted it, if it came from an envelope. */
  readonly queueDwellMs: number | undefined;
  /** True once the cutoff has passed on the monotonic clock, whether or not a timer has fired yet. */
  readonly expired: boolean;
  /** True once this deadline has expired or been cancelled, here or by an ancestor. */
  readonly aborted: boolean;
  /** The abort reason (a DeadlineExceededError at the cutoff, or the canceller's own reason). */
  readonly abortReason: unknown;
  /** Aborts at the cutoff, or when an ancestor or the `signal` option aborts. Created on first access. */
  readonly signal: AbortSignal;
  /** Milliseconds left, never negative, from the monotonic clock. */
  remainingMs(): number;
  /** Milliseconds left after keeping `reserveMs` back for the response, never negative. */
  usableMs(reserveMs?: number): number;
  /** Opens a child that ends at the earlier of `now + timeoutMs` and this deadline. */
  child(operation: string, timeoutMs: number): ManagedDeadline;
  /**
   * Throws the abort reason if aborted, or a DeadlineExceededError if the clock has
   * passed the cutoff even though no timer has run yet (a blocked event loop).
   * Call it before every side effect.
   */
  throwIfAborted(): void;
}

/** A deadline this code opened and therefore must dispose when its work settles. */
export interface ManagedDeadline extends Deadline {
  readonly disposed: boolean;
  /** Clears this deadline's timer and listeners. It neither cancels nor completes anything. */
  dispose(): void;
}

export interface DeadlineOptions {
  operation: string;
  /** Budget from now. Give exactly one of `timeoutMs` and `expiresAtMs`. */
  timeoutMs?: number;
  /** Absolute cutoff, epoch ms. Give exactly one of `timeoutMs` and `expiresAtMs`. */
  expiresAtMs?: number;
  /** Defaults to the deadline active in OTel context; `null` opens a root (what an edge does). */
  parent?: Deadline | null;
  /** An extra cancellation source, such as the caller disconnecting. */
  signal?: AbortSignal;
  /** Refuse with InsufficientBudgetError when less than this is usable. */
  minUsefulMs?: number;
  /** Time kept back for serializing the response; counted against `minUsefulMs`. */
  reserveMs?: number;
}

/** Internal: how a node is created. Remote deadlines and envelopes use it too. */
export interface NodeInit {
  operation: string;
  cutoffMono: number;
  expiresAtMs: number;
  source: DeadlineSource;
  budgetMs: number;
  parent?: Deadline;
  signal?: AbortSignal;
  wireSkewMs?: number;
  queueDwellMs?: number;
}

const NOT_ABORTED: unique symbol = Symbol('not aborted');

function noop(): void {}

/**
 * @internal What `DeadlineNode#watchAbort` tells once when the deadline aborts. A
 * guard is its own watcher, so a subscription allocates nothing; each object
 * is one hold.
 */
export interface AbortWatcher extends Linked {
  onDeadlineAbort(reason: unknown): void;
}

/** A `subscribe` listener, as a watcher: one per subscription, so the same listener added twice is two holds. */
class ListenerWatcher extends LinkedItem implements AbortWatcher {
  constructor(readonly onDeadlineAbort: (reason: unknown) => void) {
    super();
  }
}

/** A subscriber that throws must not stop the abort from reaching the rest of the tree. */
function notify(subscriber: AbortWatcher, reason: unknown): void {
  try {
    subscriber.onDeadlineAbort(reason);
  } catch (err) {
    // Same as an AbortSignal listener that throws: it stops nothing, but say so.
    diag.debug('otel-deadline: an abort subscriber threw', err);
  }
}

/**
 * Subscribes to a deadline's abort: through the light path for this
 * package's own deadlines, through the signal for any other implementation.
 * The subscription keeps the deadline enforced (its timer and its link to
 * the ancestors' cancellation) until it is undone, even after the deadline is
 * disposed: unsubscribe when the guarded work settles.
 */
export function onDeadlineAbort(deadline: Deadline, listener: (reason: unknown) => void): () => void {
  if (deadline instanceof DeadlineNode) return deadline.subscribe(listener);
  const signal = deadline.signal;
  if (signal.aborted) {
    listener(signal.reason);
    return noop;
  }
  const onAbort = () => listener(signal.reason);
  signal.addEventListener('abort', onAbort, { once: true });
  return () => signal.removeEventListener('abort', onAbort);
}

/**
 * @internal `onDeadlineAbort` for a watcher object: nothing allocated for
 * this package's own deadlines (returns undefined), a listener on the signal
 * for any other (returns how to remove it). Undo with `unwatchDeadlineAbort`.
 * For callers that have just read the clock, as `watchAbort` says.
 */
export function watchDeadlineAbort(deadline: Deadline, watcher: AbortWatcher): (() => void) | undefined {
  if (deadline instanceof DeadlineNode) {
    deadline.watchAbort(watcher);
    return undefined;
  }
  return onDeadlineAbort(deadline, (reason) => watcher.onDeadlineAbort(reason));
}

/** @internal Undoes `watchDeadlineAbort`; `stop` is what it returned. */
export function unwatchDeadlineAbort(deadline: Deadline, watcher: AbortWatcher, stop: (() => void) | undefined): void {
  if (deadline instanceof DeadlineNode) deadline.unwatchAbort(watcher);
  else stop?.();
}

/**
 * One node in the deadline tree.
 *
 * Abort state is derived on demand from the clock and from the "watch
 * points" above: the nodes whose abort can come from something other than
 * the clock (a root, a deadline that arrived from elsewhere, one with an
 * extra `signal`, one under a foreign Deadline). A child's cutoff is never
 * later than its parent's, so the clock needs no walk at all; cancellation
 * needs a walk over the watch points only, which a child links to when it is
 * opened. Opening a child therefore costs O(1) however deep the tree is, and
 * nothing recurses in proportion to depth.
 *
 * Everything costly is lazy. A node that nobody subscribes to and nobody asks
 * for a signal holds no timer, no controller and no listener, and is not
 * referenced by anything above it, so millions of short children under a
 * long-lived root leave nothing behind.
 *
 * Subscribing or asking for `signal` "arms" the node: it registers with the
 * nearest watch point above (arming that one too), which pushes its abort
 * down with the same reason object, and it gets an unref'd timer at its own
 * cutoff. `dispose()` ends the scope's claim only: the node stays armed while
 * anything still holds it (a subscriber, an armed descendant, a signal with
 * listeners), so a call in flight is still cut at the cutoff after the scope
 * that started it has returned. No AbortSignal.any: on Node 20 it leaks
 * dependants on a long-lived parent (nodejs/node#54614).
 */
export class DeadlineNode extends LinkedItem implements ManagedDeadline {
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
  /** Its links (LinkedItem) are those of the node's place in `registeredIn.armedChildren`. */
  private armedChildren: LinkedSet<DeadlineNode> | undefined;
  private detachListeners: (() => void) | undefined;
  private abortSubscribers: LinkedSet<AbortWatcher> | undefined;
  private isDisposed = false;

  constructor(init: NodeInit) {
    super();
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

  /**
   * @internal A server instrumentation takes over, under its own operation
   * name, the node a global propagator built from the same request's headers:
   * nobody else holds it yet, and a second node would only cost time.
   */
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

  /**
   * Aborts at the cutoff, or when an ancestor or the `signal` option aborts,
   * whether or not the deadline has been disposed. Created on first access.
   */
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

  /**
   * @internal Calls `listener(reason)` once when this deadline aborts, without
   * creating an AbortSignal (which costs microseconds on Node 20): transports
   * that only need to be told use this on their hot path. If it has already
   * aborted, `listener` runs at once. Returns the unsubscribe function. The
   * subscription holds the deadline armed until it is undone, after dispose too.
   */
  subscribe(listener: (reason: unknown) => void): () => void {
    // arm() ends by deriving the abort state (one clock read); an armed node is derived here instead.
    if (this.armed || this.reason !== NOT_ABORTED) this.currentReason();
    else this.arm();
    if (this.reason !== NOT_ABORTED) {
      listener(this.reason);
      return noop;
    }
    this.startTimer();
    const entry = new ListenerWatcher(listener);
    (this.abortSubscribers ??= new LinkedSet()).add(entry);
    return () => this.unwatchAbort(entry);
  }

  /**
   * @internal `subscribe` for a caller that has just read the clock
   * (`leftBeforeAbort`) in the same synchronous step and holds an object of
   * its own: no clock read, nothing allocated. A cutoff that passes from now
   * on reaches `watcher` through the timer, as it reaches every subscriber.
   * `watcher.onDeadlineAbort` runs at once if the deadline has already
   * aborted. Undo with `unwatchAbort(watcher)`.
   */
  watchAbort(watcher: AbortWatcher): void {
    if (this.reason === NOT_ABORTED && !this.armed) this.arm();
    if (this.reason !== NOT_ABORTED) return watcher.onDeadlineAbort(this.reason);
    // Checked here as well: every guarded call comes through, and the timer is nearly always there already.
    if (this.timer === undefined) this.startTimer();
    (this.abortSubscribers ??= new LinkedSet()).add(watcher);
  }

  /** @internal Ends a `watchAbort` (or a `subscribe`); the deadline is released if nothing else holds it. */
  unwatchAbort(watcher: AbortWatcher): void {
    if (this.abortSubscribers?.delete(watcher) === true) this.releaseIfIdle();
  }

  /**
   * @internal The milliseconds left, or -1 once aborted (by the clock, here or
   * by an ancestor's cancellation; `abortReason` then holds why), with one
   * clock read: what a guard checks before it sends anything.
   */
  leftBeforeAbort(): number {
    let now: number | undefined;
    if (this.reason === NOT_ABORTED && this.cancellationAbove() === NOT_ABORTED) {
      now = monotonicNow();
      const left = this.cutoffMono - now;
      if (left > 0) return left;
    }
    return this.abortBeforeStart(now);
  }

  /**
   * leftBeforeAbort's rare end, out of line: the guards inline
   * leftBeforeAbort into their per-call wrappers, where every byte of it
   * counts against TurboFan's inlining budget.
   */
  private abortBeforeStart(nowMono: number | undefined): number {
    if (this.reason === NOT_ABORTED) {
      const cancelled = this.cancellationAbove();
      this.abort(cancelled !== NOT_ABORTED ? cancelled : this.cutoffOwner.expiryReason(nowMono), nowMono);
    }
    return -1;
  }

  /**
   * @internal The abort reason `abortReason` would give at an instant when
   * `left` ms were left to the cutoff (negative: past it), or undefined if
   * none, without aborting: nothing is recorded and no listener runs. For
   * readers that have just read the clock and must not run other code, such as
   * a span processor inside the SDK's `span.end()`: an abort listener that
   * ends the same span (a driver instrumentation's, through a command guard)
   * would end it a second time from inside end(). An expiry not yet recorded
   * gets a reason like the one it will have.
   */
  peekAbortReasonAt(left: number): unknown {
    if (this.reason !== NOT_ABORTED) return this.reason;
    const cancelled = this.cancellationAbove();
    if (cancelled !== NOT_ABORTED) return cancelled;
    if (left > 0) return undefined;
    const owner = this.cutoffOwner;
    return owner.reason !== NOT_ABORTED ? owner.reason : new DeadlineExceededError(owner.operation, owner.expiresAtMs);
  }

  /**
   * @internal When the abort `peekAbortReasonAt` finds was recorded, on the
   * monotonic clock: here, at the watch point above whose cancellation it is,
   * or at the node whose cutoff this one shares. Undefined when nobody has
   * recorded it yet (no timer ran and nothing asked): no listener has been
   * told. Reads no clock and records nothing; for the span processor's stop lag.
   */
  peekAbortRecordedAtMono(): number | undefined {
    if (this.reason !== NOT_ABORTED) return this.abortedAtMono;
    let found: number | undefined;
    for (let point = this.watch; point !== undefined; point = point.watchAbove) {
      if (point.reason !== NOT_ABORTED) found = point.abortedAtMono;
      else if (point.armed) break;
    }
    return found ?? this.cutoffOwner.abortedAtMono;
  }

  /**
   * @internal Whether something other than the clock has aborted this
   * deadline (a cancellation here or above, or an abort already recorded),
   * without reading the clock and without recording anything: for a check
   * that has just read the clock itself and must report before any abort is
   * pushed out.
   */
  abortedBesidesClock(): boolean {
    return this.reason !== NOT_ABORTED || this.cancellationAbove() !== NOT_ABORTED;
  }

  /** @internal How many `subscribe` listeners are waiting: lets tests prove none is left behind. */
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
   * Ends the opener's claim on this deadline. It neither cancels nor completes
   * anything, and it never turns enforcement off: the clock and the ancestors
   * still decide `aborted`, and whatever still holds the node (a call in
   * flight, an armed descendant, a signal someone listens to) keeps it armed
   * until that lets go. What nobody holds is released now.
   */
  dispose(): void {
    if (this.isDisposed) return;
    this.isDisposed = true;
    this.releaseIfIdle();
  }

  /**
   * @internal Aborts this node and every armed descendant with the same
   * reason. Only watch points (roots, remote deadlines, nodes with a signal)
   * may be aborted from outside: unarmed descendants find a watch point's
   * abort by themselves, not a plain node's.
   */
  abort(reason: unknown, nowMono?: number): void {
    if (this.reason !== NOT_ABORTED) return;
    // When the abort reached this node (and what it pushes to): the span processor measures stop lag from it.
    // The caller's own clock read when it has one, else one read per abort (rare).
    const at = nowMono ?? monotonicNow();
    // Iterative, so a 100k-deep armed chain cannot overflow the stack.
    const pending: DeadlineNode[] = [this];
    for (let node = pending.pop(); node !== undefined; node = pending.pop()) {
      if (node.reason !== NOT_ABORTED) continue;
      node.reason = reason;
      node.abortedAtMono = at;
      const children = node.armedChildren;
      node.armedChildren = undefined;
      if (children !== undefined) {
        for (const child of children.drain()) {
          child.registeredIn = undefined;
          pending.push(child);
        }
      }
      const above = node.disarm();
      // The node it hung under may have been waiting only for it.
      if (node === this && above !== undefined && above.reason === NOT_ABORTED) above.releaseIfIdle();
      node.controller?.abort(reason);
      const subscribers = node.abortSubscribers;
      node.abortSubscribers = undefined;
      if (subscribers !== undefined) for (const subscriber of subscribers.drain()) notify(subscriber, reason);
    }
  }

  /**
   * The abort state, derived in order: a watch point's cancellation (the
   * topmost one, so a shared cancellation yields one reason object
   * everywhere), then the clock. Deriving it marks the node, so it is sticky.
   */
  private currentReason(): unknown {
    if (this.reason !== NOT_ABORTED) return this.reason;
    const cancelled = this.cancellationAbove();
    if (cancelled !== NOT_ABORTED) this.abort(cancelled);
    else {
      const now = monotonicNow();
      if (now >= this.cutoffMono) this.abort(this.cutoffOwner.expiryReason(now), now);
    }
    return this.reason;
  }

  /** The topmost cancellation among the watch points at or above this node. */
  private cancellationAbove(): unknown {
    let found: unknown = NOT_ABORTED;
    for (let point = this.watch; point !== undefined; point = point.watchAbove) {
      const reason = point.ownCancellation();
      if (reason !== NOT_ABORTED) found = reason;
      // An armed watch point is linked up to the top, so any abort above has
      // already been pushed into it: nothing further up needs a look.
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

  /**
   * Links this node, and the unarmed watch points above it, into the push
   * chain, top-down and without recursion, so an abort anywhere above reaches
   * it with the same reason object.
   */
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
        (above.armedChildren ??= new LinkedSet()).add(node);
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
    const foreign = this.foreignParent;
    if (foreign !== undefined) {
      const signal = foreign.signal;
      const onForeignAbort = () => this.abort(signal.reason);
      signal.addEventListener('abort', onForeignAbort, { once: true });
      cleanups.push(() => signal.removeEventListener('abort', onForeignAbort));
    }
    const extra = this.extraSignal;
    if (extra !== undefined) {
      const onExtraAbort = () => this.abort(extra.reason);
      extra.addEventListener('abort', onExtraAbort, { once: true });
      cleanups.push(() => extra.removeEventListener('abort', onExtraAbort));
    }
    if (cleanups.length === 1) this.detachListeners = cleanups[0];
    else if (cleanups.length > 1) this.detachListeners = () => cleanups.forEach((cleanup) => cleanup());
  }

  /**
   * A timer at the cutoff, for a node someone waits on (subscribers, a
   * signal). Watch points armed only to push cancellation down need none:
   * their descendants' cutoffs come first and have timers of their own.
   */
  private startTimer(): void {
    if (this.timer !== undefined || !this.armed || this.reason !== NOT_ABORTED) return;
    const delay = safeTimerDelay(this.remainingMs());
    this.timer = setTimeout(() => this.onTimer(), delay);
    // A pending deadline must never keep the process alive.
    this.timer.unref();
  }

  private onTimer(): void {
    this.timer = undefined;
    // Timers can fire a little early against performance.now(), and delays over
    // 2^31-1 ms are split into steps: re-arm until the cutoff has really passed.
    if (this.remainingMs() > 0) this.startTimer();
    else this.currentReason();
  }

  /** Drops the timer, the source listeners and the registration above; returns the node it was registered with. */
  private disarm(): DeadlineNode | undefined {
    this.armed = false;
    if (this.timer !== undefined) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
    this.detachListeners?.();
    this.detachListeners = undefined;
    const above = this.registeredIn;
    this.registeredIn = undefined;
    above?.armedChildren?.delete(this);
    return above;
  }
}

function checkOperation(operation: unknown): string {
  if (typeof operation !== 'string' || operation.length === 0) {
    throw new TypeError('operation must be a non-empty string');
  }
  return operation;
}

function checkParent(parent: unknown): Deadline | undefined {
  if (parent === undefined || parent === null) return undefined;
  const candidate = parent as Partial<Deadline>;
  if (typeof candidate.expiresAtMs !== 'number' || typeof candidate.remainingMs !== 'function') {
    throw new TypeError('parent must be a Deadline, null or undefined');
  }
  return parent as Deadline;
}

function checkSignal(signal: unknown): AbortSignal | undefined {
  if (signal === undefined) return undefined;
  if (!(signal instanceof AbortSignal)) throw new TypeError('signal must be an AbortSignal');
  return signal;
}

function cutoffOf(parent: Deadline, nowMono: number): number {
  return parent instanceof DeadlineNode ? parent.cutoffMono : nowMono + parent.remainingMs();
}

function refusalFromParent(operation: string, expiresAtMs: number, reason: unknown): Error {
  return reason instanceof DeadlineExceededError
    ? new DeadlineExceededError(operation, expiresAtMs, { cause: reason })
    : new DeadlineCancelledError(operation, reason);
}

/**
 * Validates options and opens a deadline under `parent` (undefined: a root).
 * Refusals are thrown before anything is allocated: an aborted parent or
 * signal, a cutoff already passed, or too little usable time.
 * `keepBeforeParentMs` ends the new deadline at least that long before its
 * parent's cutoff (withAdmission's reserve), computed from the one clock read
 * the rest of the opening uses.
 */
export function openDeadlineUnder(parentInput: Deadline | null | undefined, options: DeadlineOptions, keepBeforeParentMs = 0): DeadlineNode {
  if (typeof options !== 'object' || options === null) throw new TypeError('options must be an object');
  const operation = checkOperation(options.operation);
  const hasTimeout = options.timeoutMs !== undefined;
  const hasExpiry = options.expiresAtMs !== undefined;
  if (hasTimeout === hasExpiry) {
    throw new TypeError(`give exactly one of timeoutMs and expiresAtMs (got ${hasTimeout ? 'both' : 'neither'})`);
  }
  const parent = checkParent(parentInput);
  const signal = checkSignal(options.signal);
  const minUsefulMs = options.minUsefulMs === undefined ? 0 : checkDuration('minUsefulMs', options.minUsefulMs);
  const reserveMs = options.reserveMs === undefined ? 0 : checkDuration('reserveMs', options.reserveMs);

  // The two clocks are read in the order that keeps a pause between the reads on the safe side: for
  // a timeout the wall clock first, so the cutoff sent on the wire (expiresAtMs) is never later than
  // the one enforced here; for an absolute expiresAtMs the monotonic clock first, so the cutoff
  // enforced here is never later than the one asked for.
  const earlyEpoch = hasTimeout ? Date.now() : 0;
  const nowMono = monotonicNow();
  const nowEpoch = hasTimeout ? earlyEpoch : Date.now();
  let ownCutoff: number;
  let ownExpiresAt: number;
  let budgetMs: number;
  if (hasTimeout) {
    budgetMs = checkBudget('timeoutMs', options.timeoutMs);
    ownCutoff = nowMono + budgetMs;
    ownExpiresAt = nowEpoch + budgetMs;
  } else {
    ownExpiresAt = checkEpoch('expiresAtMs', options.expiresAtMs);
    if (ownExpiresAt - nowEpoch > MAX_DEADLINE_MS) {
      throw new RangeError(`expiresAtMs must be at most ${MAX_DEADLINE_MS} ms (100 days) from now, got ${ownExpiresAt - nowEpoch} ms from now`);
    }
    ownCutoff = epochToMonotonic(ownExpiresAt, nowEpoch, nowMono);
    budgetMs = ownExpiresAt - nowEpoch;
  }

  let cutoffMono = ownCutoff;
  let expiresAtMs = ownExpiresAt;
  let keptBack = false;
  if (parent !== undefined) {
    // keepBeforeParentMs: the parent's cutoff less a reserve, on the same clock read as everything else here.
    const parentCutoff = cutoffOf(parent, nowMono) - keepBeforeParentMs;
    cutoffMono = minCutoff(ownCutoff, parentCutoff);
    keptBack = cutoffMono === parentCutoff && keepBeforeParentMs > 0;
    if (cutoffMono === parentCutoff) expiresAtMs = parent.expiresAtMs - keepBeforeParentMs;
    budgetMs = parent.budgetMs;
    if (parent.aborted) throw refusalFromParent(operation, expiresAtMs, parent.abortReason);
  }
  if (signal?.aborted) throw new DeadlineCancelledError(operation, signal.reason);

  const remaining = cutoffMono - nowMono;
  if (keptBack && remaining <= 0 && remaining + keepBeforeParentMs > 0) {
    // The parent is still running: only the reserve kept before it is left.
    throw new InsufficientBudgetError(operation, minUsefulMs + keepBeforeParentMs, remaining + keepBeforeParentMs);
  }
  if (remaining <= 0) throw new DeadlineExceededError(operation, expiresAtMs);
  if (remaining - reserveMs < minUsefulMs) {
    throw new InsufficientBudgetError(operation, minUsefulMs + reserveMs, remaining);
  }

  return new DeadlineNode({
    operation,
    cutoffMono,
    expiresAtMs,
    source: 'local',
    budgetMs: budgetMs > 0 ? budgetMs : 0,
    parent,
    signal,
  });
}
