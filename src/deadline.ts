import { DeadlineCancelledError, DeadlineExceededError, InsufficientBudgetError } from './errors';
import {
  checkDuration,
  checkEpoch,
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

/** A subscriber that throws must not stop the abort from reaching the rest of the tree. */
function notify(subscriber: (reason: unknown) => void, reason: unknown): void {
  try {
    subscriber(reason);
  } catch {
    // Same as an AbortSignal listener that throws: reported nowhere, stops nothing.
  }
}

/**
 * Subscribes to a deadline's abort: through the light path for this
 * package's own deadlines, through the signal for any other implementation.
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
 * One node in the deadline tree.
 *
 * Everything costly is lazy. A node that nobody asks for a signal holds no
 * timer, no controller and no listener, and is not referenced by its parent,
 * so millions of short children under a long-lived root leave nothing behind.
 * Abort state is computed on demand from the parent chain, the extra signal
 * and the clock.
 *
 * Asking for `signal` "arms" the node: it gets an unref'd timer at its own
 * cutoff and registers in its nearest live ancestor's child set, so that an
 * ancestor's abort reaches it with the same reason object. Disposal undoes
 * exactly that. No AbortSignal.any: on Node 20 it leaks dependants on a
 * long-lived parent (nodejs/node#54614).
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

  private readonly parentNode: DeadlineNode | undefined;
  private readonly extraSignal: AbortSignal | undefined;
  private reason: unknown = NOT_ABORTED;
  private controller: AbortController | undefined;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private armed = false;
  private registeredIn: DeadlineNode | undefined;
  private armedChildren: Set<DeadlineNode> | undefined;
  private detachListeners: (() => void) | undefined;
  private abortSubscribers: Set<(reason: unknown) => void> | undefined;
  private isDisposed = false;

  constructor(init: NodeInit) {
    this.operationName = init.operation;
    this.cutoffMono = init.cutoffMono;
    this.expiresAtMs = init.expiresAtMs;
    this.source = init.source;
    this.budgetMs = init.budgetMs;
    this.parent = init.parent;
    this.parentNode = init.parent instanceof DeadlineNode ? init.parent : undefined;
    this.extraSignal = init.signal;
    this.wireSkewMs = init.wireSkewMs;
    this.queueDwellMs = init.queueDwellMs;
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

  get signal(): AbortSignal {
    if (this.controller === undefined) {
      this.controller = new AbortController();
      const reason = this.currentReason();
      if (reason !== NOT_ABORTED) this.controller.abort(reason);
      else if (!this.isDisposed) this.arm();
    }
    return this.controller.signal;
  }

  /**
   * @internal Calls `listener(reason)` once when this deadline aborts, without
   * creating an AbortSignal (which costs microseconds on Node 20): transports
   * that only need to be told use this on their hot path. If it has already
   * aborted, `listener` runs at once. Returns the unsubscribe function; the
   * subscription also ends when the deadline is disposed.
   */
  subscribe(listener: (reason: unknown) => void): () => void {
    const reason = this.currentReason();
    if (reason !== NOT_ABORTED) {
      listener(reason);
      return noop;
    }
    if (this.isDisposed) return noop;
    this.arm();
    (this.abortSubscribers ??= new Set()).add(listener);
    return () => this.abortSubscribers?.delete(listener);
  }

  /** @internal How many `subscribe` listeners are waiting: lets tests prove none is left behind. */
  get subscriberCount(): number {
    return this.abortSubscribers?.size ?? 0;
  }

  child(operation: string, timeoutMs: number): ManagedDeadline {
    return openDeadlineUnder(this, { operation, timeoutMs });
  }

  throwIfAborted(): void {
    const reason = this.currentReason();
    if (reason !== NOT_ABORTED) throw reason;
  }

  dispose(): void {
    if (this.isDisposed) return;
    // Record a cancellation that happened before disposal even if nobody armed us.
    if (this.reason === NOT_ABORTED && this.extraSignal?.aborted) this.reason = this.extraSignal.reason;
    this.isDisposed = true;
    this.disarm();
    this.abortSubscribers = undefined;
    // Armed descendants still running move up to our nearest live ancestor, so
    // that ancestor's cancellation still reaches them.
    const heir = this.registeredIn;
    this.registeredIn?.armedChildren?.delete(this);
    this.registeredIn = undefined;
    if (this.armedChildren !== undefined) {
      for (const orphan of this.armedChildren) {
        orphan.registeredIn = heir;
        heir?.armedChildren?.add(orphan);
      }
      this.armedChildren = undefined;
    }
  }

  /** @internal Aborts this node and every armed descendant with the same reason. */
  abort(reason: unknown): void {
    if (this.reason !== NOT_ABORTED) return;
    this.reason = reason;
    this.disarm();
    this.registeredIn?.armedChildren?.delete(this);
    this.registeredIn = undefined;
    if (!this.isDisposed) {
      this.controller?.abort(reason);
      const subscribers = this.abortSubscribers;
      this.abortSubscribers = undefined;
      if (subscribers !== undefined) for (const subscriber of subscribers) notify(subscriber, reason);
    }
    const children = this.armedChildren;
    this.armedChildren = undefined;
    if (children !== undefined) {
      for (const child of children) {
        child.registeredIn = undefined;
        child.abort(reason);
      }
    }
  }

  /**
   * The abort state, derived in order: an ancestor's reason first (so a shared
   * cutoff yields the topmost node's reason object everywhere), then the extra
   * signal, then the clock. Deriving it marks the node, so it is sticky.
   */
  private currentReason(): unknown {
    if (this.reason !== NOT_ABORTED) return this.reason;
    let inherited: unknown = NOT_ABORTED;
    if (this.parentNode !== undefined) inherited = this.parentNode.currentReason();
    else if (this.parent?.signal.aborted) inherited = this.parent.signal.reason;
    // A disposed node passes its ancestors' state through but adds nothing of its own.
    if (this.isDisposed) return inherited;
    if (inherited !== NOT_ABORTED) {
      this.abort(inherited);
    } else if (this.extraSignal?.aborted) {
      this.abort(this.extraSignal.reason);
    } else if (monotonicNow() >= this.cutoffMono) {
      this.abort(new DeadlineExceededError(this.operation, this.expiresAtMs));
    }
    return this.reason;
  }

  /** Makes sure an abort from any source will reach this node's controller. */
  private arm(): void {
    if (this.armed || this.isDisposed || this.reason !== NOT_ABORTED) return;
    this.armed = true;
    const cleanups: (() => void)[] = [];

    let ancestor = this.parentNode;
    while (ancestor !== undefined && ancestor.isDisposed) ancestor = ancestor.parentNode;
    if (ancestor !== undefined) {
      ancestor.arm();
      if (ancestor.reason !== NOT_ABORTED) return this.abort(ancestor.reason);
      ancestor.armedChildren ??= new Set();
      ancestor.armedChildren.add(this);
      this.registeredIn = ancestor;
    } else if (this.parent !== undefined && this.parentNode === undefined) {
      // A deadline from another copy of this package, or a user implementation.
      const foreign = this.parent.signal;
      const onForeignAbort = () => this.abort(foreign.reason);
      foreign.addEventListener('abort', onForeignAbort, { once: true });
      cleanups.push(() => foreign.removeEventListener('abort', onForeignAbort));
    }

    const extra = this.extraSignal;
    if (extra !== undefined) {
      const onExtraAbort = () => this.abort(extra.reason);
      extra.addEventListener('abort', onExtraAbort, { once: true });
      cleanups.push(() => extra.removeEventListener('abort', onExtraAbort));
    }
    if (cleanups.length > 0) this.detachListeners = () => cleanups.forEach((cleanup) => cleanup());

    this.scheduleTimer();
    // Sources may have fired between the derivation in `signal` and now.
    this.currentReason();
  }

  private scheduleTimer(): void {
    const delay = safeTimerDelay(this.remainingMs());
    this.timer = setTimeout(() => this.onTimer(), delay);
    // A pending deadline must never keep the process alive.
    this.timer.unref();
  }

  private onTimer(): void {
    this.timer = undefined;
    // Timers can fire a little early against performance.now(), and delays over
    // 2^31-1 ms are split into steps: re-arm until the cutoff has really passed.
    if (this.remainingMs() > 0) this.scheduleTimer();
    else this.currentReason();
  }

  private disarm(): void {
    if (this.timer !== undefined) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
    this.detachListeners?.();
    this.detachListeners = undefined;
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
 */
export function openDeadlineUnder(parentInput: Deadline | null | undefined, options: DeadlineOptions): DeadlineNode {
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

  const nowMono = monotonicNow();
  const nowEpoch = Date.now();
  let ownCutoff: number;
  let ownExpiresAt: number;
  let budgetMs: number;
  if (hasTimeout) {
    budgetMs = checkDuration('timeoutMs', options.timeoutMs);
    ownCutoff = nowMono + budgetMs;
    ownExpiresAt = nowEpoch + budgetMs;
  } else {
    ownExpiresAt = checkEpoch('expiresAtMs', options.expiresAtMs);
    ownCutoff = epochToMonotonic(ownExpiresAt, nowEpoch, nowMono);
    budgetMs = ownExpiresAt - nowEpoch;
  }

  let cutoffMono = ownCutoff;
  let expiresAtMs = ownExpiresAt;
  if (parent !== undefined) {
    const parentCutoff = cutoffOf(parent, nowMono);
    cutoffMono = minCutoff(ownCutoff, parentCutoff);
    if (cutoffMono === parentCutoff) expiresAtMs = parent.expiresAtMs;
    budgetMs = parent.budgetMs;
    if (parent.aborted) throw refusalFromParent(operation, expiresAtMs, parent.abortReason);
  }
  if (signal?.aborted) throw new DeadlineCancelledError(operation, signal.reason);

  const remaining = cutoffMono - nowMono;
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
