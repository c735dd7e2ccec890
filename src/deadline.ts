import { DeadlineNode, type AbortWatcher } from './deadline-node';

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
  /** Throws the abort reason if aborted or past the cutoff (even before a timer ran). Call it before every side effect. */
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

/** The listener on a foreign Deadline's signal, by watcher: each watcher watches one deadline at a time. */
const signalListeners = new WeakMap<AbortWatcher, () => void>();

/**
 * @internal The one way to be told of an abort: `watcher.onAbort(reason)` once when `deadline` aborts (at once if it
 * has), until `unwatchDeadline`. It keeps the deadline enforced, even after dispose: unwatch when the guarded work settles.
 */
export function watchDeadline(deadline: Deadline, watcher: AbortWatcher): void {
  if (deadline instanceof DeadlineNode) return deadline.subscribe(watcher);
  const signal = deadline.signal;
  if (signal.aborted) return watcher.onAbort(signal.reason);
  const listener = () => watcher.onAbort(signal.reason);
  signal.addEventListener('abort', listener, { once: true });
  signalListeners.set(watcher, () => signal.removeEventListener('abort', listener));
}

/** @internal Ends what `watchDeadline` started; nothing for a pair that is not watching. */
export function unwatchDeadline(deadline: Deadline, watcher: AbortWatcher): void {
  if (deadline instanceof DeadlineNode) return deadline.unsubscribe(watcher);
  signalListeners.get(watcher)?.();
  signalListeners.delete(watcher);
}
