import { onDeadlineAbort, type Deadline } from '../../src/deadline';

type Listener = (this: unknown, event: unknown) => void;

/** What undici hands an abort listener: it only reads the signal's `reason`, never the event. */
const ABORT_EVENT = Object.freeze({ type: 'abort' });

function noop(): void {}

/**
 * A deadline seen through the few members undici's request, stream and
 * pipeline read from their `signal` option (`aborted`, `reason`,
 * `addEventListener` / `removeEventListener` for 'abort'), without creating an
 * AbortSignal: on Node 20 one signal and its listener cost several
 * microseconds on every call. Listeners are subscribed to the deadline only
 * while undici holds them, so the abort still reaches the request (and the
 * response body being read) at the cutoff, and nothing outlives the call.
 * Only for undici: fetch insists on a real AbortSignal.
 */
export class DeadlineSignalView {
  /** The first listener, which the view itself watches the deadline for. */
  private listener: Listener | undefined;
  private unsubscribe: (() => void) | undefined;
  /** Any further listeners: undici registers one, so this stays undefined. */
  private more: Map<Listener, () => void> | undefined;

  /**
   * `call`, when given, is the call the view stands for: once it has completed
   * (the whole response is in), a later abort of the deadline no longer
   * reaches undici, which would otherwise destroy a body the caller holds whole.
   */
  constructor(
    private readonly deadline: Deadline,
    private readonly call?: { readonly completed: boolean },
  ) {}

  get aborted(): boolean {
    return this.deadline.aborted;
  }

  get reason(): unknown {
    return this.deadline.abortReason;
  }

  addEventListener(type: string, listener: Listener): void {
    if (type !== 'abort' || typeof listener !== 'function') return;
    if (listener === this.listener || this.more?.has(listener)) return;
    // Registered before watching: a deadline that has already aborted notifies at once.
    if (this.listener === undefined) {
      this.listener = listener;
      const stop = onDeadlineAbort(this.deadline, () => this.onDeadlineAbort());
      if (this.listener === listener) this.unsubscribe = stop;
      else stop();
    } else {
      const notify = () => {
        this.forget(listener);
        if (this.call?.completed !== true) listener.call(this, ABORT_EVENT);
      };
      const more = (this.more ??= new Map());
      more.set(listener, noop);
      const unsubscribe = onDeadlineAbort(this.deadline, notify);
      if (more.has(listener)) more.set(listener, unsubscribe);
    }
  }

  removeEventListener(type: string, listener: Listener): void {
    if (type !== 'abort') return;
    if (listener === this.listener) this.unsubscribe?.();
    else this.more?.get(listener)?.();
    this.forget(listener);
  }

  /** The deadline aborted while the first listener was registered. */
  private onDeadlineAbort(): void {
    const listener = this.listener;
    if (listener === undefined) return;
    this.forget(listener);
    if (this.call?.completed !== true) listener.call(this, ABORT_EVENT);
  }

  private forget(listener: Listener): void {
    if (listener === this.listener) {
      this.listener = undefined;
      this.unsubscribe = undefined;
    } else {
      this.more?.delete(listener);
    }
  }
}
