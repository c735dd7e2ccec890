import { SpanKind, SpanStatusCode, type Context, type Span, type Tracer } from '@opentelemetry/api';
import { onDeadlineAbort, type Deadline } from '../../src/deadline';
import { abortCodeOf, describeAbortReason, DeadlineCancelledError, DeadlineExceededError } from '../../src/errors';
import { ATTR_DEADLINE_ABORT_CODE, ATTR_DEADLINE_ABORT_REASON, ATTR_DEADLINE_OUTCOME, type DeadlineOutcome } from '../../src/attributes';
import { ATTR_DEADLINE_WOULD_ABORT, ATTR_DEADLINE_WOULD_REJECT } from '../names';
import { ATTR_DEADLINE_DB_CANCEL, type DbCancel } from './attributes';

const COMPLETED: Readonly<Record<string, string>> = Object.freeze({ [ATTR_DEADLINE_OUTCOME]: 'completed' });

/** What a statement span is named and described with, as the OTel driver instrumentations do. */
export interface SpanShape {
  name: string;
  attributes: Record<string, string | number>;
}

export interface StatementInit {
  deadline: Deadline;
  observe: boolean;
  /**
   * A write whose fate the server did not confirm is `unknown`; a read is
   * `expired`. A function is asked only when that matters (at a cutoff).
   */
  write: boolean | (() => boolean);
  /** What the error and the span name the statement by, e.g. `pg.query`. */
  operation: string;
}

/**
 * The deadline guard of one database statement (or command), from the moment
 * it is handed to the driver until its result or error is delivered.
 *
 * It subscribes to the deadline's abort when armed and unsubscribes when it
 * settles, never earlier: a statement started inside a deadline scope and
 * awaited after the scope ended is still cut at the cutoff. It writes the
 * outcome on the driver's span (instrumentation-pg, -mysql2, -ioredis) when
 * one was shown to it, or on a CLIENT span of its own.
 */
export class DbStatement {
  readonly deadline: Deadline;
  readonly observe: boolean;
  private readonly isWrite: boolean | (() => boolean);
  readonly operation: string;
  settled = false;
  /** The abort reason, once the cutoff (or a cancellation) reached the statement. */
  reason: unknown = undefined;
  private span: Span | undefined;
  private ownSpan = false;
  private unsubscribe: (() => void) | undefined;
  private attributes: Record<string, string | boolean> | undefined;

  constructor(init: StatementInit) {
    this.deadline = init.deadline;
    this.observe = init.observe;
    this.isWrite = init.write;
    this.operation = init.operation;
  }

  get aborted(): boolean {
    return this.reason !== undefined;
  }

  /** Records on the driver instrumentation's span. */
  adoptSpan(span: Span): void {
    if (this.span !== undefined) return;
    this.span = span;
    if (this.attributes !== undefined) span.setAttributes(this.attributes);
  }

  /** Starts a CLIENT span of our own, for when no driver instrumentation makes one. */
  startOwnSpan(tracer: Tracer, ctx: Context, shape: SpanShape): void {
    if (this.span !== undefined) return;
    this.ownSpan = true;
    this.adoptSpan(tracer.startSpan(shape.name, { kind: SpanKind.CLIENT, attributes: shape.attributes }, ctx));
  }

  /**
   * Calls `onCutoff(reason)` once at the cutoff or on cancellation, unless the
   * statement settles first. Observe mode only records `deadline.would_abort`.
   */
  arm(onCutoff: (reason: unknown) => void): void {
    if (this.settled) return;
    const unsubscribe = onDeadlineAbort(this.deadline, (reason) => {
      if (this.settled || this.reason !== undefined) return;
      if (this.observe) return this.record({ [ATTR_DEADLINE_WOULD_ABORT]: true });
      this.reason = reason ?? new DeadlineExceededError(this.operation, this.deadline.expiresAtMs);
      this.unsubscribe?.();
      this.unsubscribe = undefined;
      onCutoff(this.reason);
    });
    if (this.settled || this.reason !== undefined) unsubscribe();
    else this.unsubscribe = unsubscribe;
  }

  /** The error the caller gets for the abort, with the driver's error (if any) as `cause`. */
  errorFor(driverError?: unknown): Error {
    const reason = this.reason;
    if (abortCodeOf(reason) === 'CANCELLED') return new DeadlineCancelledError(this.operation, driverError ?? reason);
    return new DeadlineExceededError(this.operation, this.deadline.expiresAtMs, { cause: driverError ?? reason });
  }

  /** Nothing was sent: the deadline had passed or too little was left. */
  refuse(error: Error): void {
    this.record({ [ATTR_DEADLINE_OUTCOME]: 'not_started', [ATTR_DEADLINE_ABORT_CODE]: abortCodeOf(error) });
    this.settle({ error });
  }

  /** Observe mode: enforce mode would have refused this statement. */
  markWouldReject(): void {
    this.record({ [ATTR_DEADLINE_WOULD_REJECT]: true });
  }

  /**
   * Ends the guard. `cancel` says what the server was told; the outcome follows
   * from it: a confirmed cancel is `expired`/`cancelled`, an unconfirmed write
   * `unknown`, a statement the cutoff reached before it was sent `expired`.
   */
  settle(result: { error?: unknown; cancel?: DbCancel; sent?: boolean }): void {
    if (this.settled) return;
    this.settled = true;
    this.unsubscribe?.();
    this.unsubscribe = undefined;
    if (this.reason !== undefined) {
      const attrs: Record<string, string | boolean> = {
        [ATTR_DEADLINE_OUTCOME]: this.abortOutcome(result.cancel, result.sent ?? true),
        [ATTR_DEADLINE_ABORT_CODE]: abortCodeOf(this.reason),
        [ATTR_DEADLINE_ABORT_REASON]: describeAbortReason(this.reason),
      };
      if (result.cancel !== undefined) attrs[ATTR_DEADLINE_DB_CANCEL] = result.cancel;
      this.record(attrs);
    } else if (result.error === undefined && !this.observe) {
      // Finished before its cutoff reached it, even if the clock passed it while the result was on its way.
      this.record(COMPLETED);
    }
    if (this.ownSpan) this.endOwnSpan(result.error);
  }

  /** The cutoff reached the statement but it finished anyway: the result stands. */
  settleCompletedAfterCutoff(cancel: DbCancel): void {
    this.reason = undefined;
    this.record({ [ATTR_DEADLINE_DB_CANCEL]: cancel });
    this.settle({});
  }

  private abortOutcome(cancel: DbCancel | undefined, sent: boolean): DeadlineOutcome {
    const cancelled = abortCodeOf(this.reason) === 'CANCELLED';
    const write = typeof this.isWrite === 'function' ? this.isWrite() : this.isWrite;
    if (!sent || cancel === 'confirmed' || !write) return cancelled ? 'cancelled' : 'expired';
    return 'unknown';
  }

  private endOwnSpan(error: unknown): void {
    const span = this.span!;
    if (error !== undefined) {
      const code = (error as { code?: unknown } | null)?.code;
      span.setStatus({ code: SpanStatusCode.ERROR, message: typeof code === 'string' ? code : (error as Error)?.name });
    }
    span.end();
  }

  private record(attributes: Record<string, string | boolean>): void {
    // Kept only until a span is shown to us (adoptSpan writes them then).
    if (this.span === undefined) {
      this.attributes = this.attributes === undefined ? attributes : { ...this.attributes, ...attributes };
      return;
    }
    // An instrumentation-ioredis wrapped on top of us ends its span before the
    // reply reaches us; writing to it then only costs the SDK's warning (the
    // span processor has already derived `completed` for it).
    if (this.span.isRecording()) this.span.setAttributes(attributes);
  }
}

