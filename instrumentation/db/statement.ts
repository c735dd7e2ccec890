import { SpanKind, SpanStatusCode, type Context, type Span, type Tracer } from '@opentelemetry/api';
import { onDeadlineAbort, type Deadline } from '../../src/deadline';
import { abortCodeOf, describeAbortReason, DeadlineExceededError, errorForAbort } from '../../src/errors';
import { ATTR_DEADLINE_ABORT_CODE, ATTR_DEADLINE_ABORT_REASON, ATTR_DEADLINE_OUTCOME, type DeadlineOutcome } from '../../src/attributes';
import { ATTR_DEADLINE_WOULD_ABORT, ATTR_DEADLINE_WOULD_REJECT } from '../names';
import { ATTR_DEADLINE_DB_CANCEL, type DbCancel } from './attributes';
import { isSqlWrite, sqlCommand } from './sql';

const COMPLETED: Readonly<Record<string, string>> = Object.freeze({ [ATTR_DEADLINE_OUTCOME]: 'completed' });

const WOULD_ABORT: Readonly<Record<string, boolean>> = Object.freeze({ [ATTR_DEADLINE_WOULD_ABORT]: true });

/** What a statement span is named and described with, as the OTel driver instrumentations do. */
export interface SpanShape {
  name: string;
  attributes: Record<string, string | number>;
}

/** Who stops the statement when the cutoff (or a cancellation) reaches it. */
export interface CutoffHandler {
  onCutoff(reason: unknown): void;
}

/**
 * The deadline guard of one database statement (or command), from the moment
 * it is handed to the driver until its result or error is delivered.
 *
 * It watches the deadline's abort when armed and stops watching when it
 * settles, never earlier: a statement started inside a deadline scope and
 * awaited after the scope ended is still cut at the cutoff. It writes the
 * outcome on the driver's span (instrumentation-pg, -mysql2, -ioredis) when
 * one was shown to it, or on a CLIENT span of its own.

 */
export class DbStatement {
  readonly deadline: Deadline;
  readonly observe: boolean;
  private readonly baseOperation: string;
  /** undefined: decided from `subject` (its command word), and only when it matters. */
  private readonly write: boolean | undefined;
  /** What the statement runs: its SQL text, or the driver's command object (Redis). */
  protected readonly subject: unknown;
  /**
   * Set by a subclass when a DeadlineSpanProcessor will write `completed` as
   * the statement's span ends on its reply (see statement-in-flight.ts): the
   * guard then writes nothing when the statement completes.
   */
  protected spanEndsCompleted = false;
  settled = false;
  /** The abort reason, once the cutoff (or a cancellation) reached the statement. */
  reason: unknown = undefined;
  private span: Span | undefined = undefined;
  private ownSpan = false;
  private handler: CutoffHandler | undefined = undefined;
  /** Set while armed. */
  private unsubscribe: (() => void) | undefined = undefined;
  private attributes: Record<string, string | boolean> | undefined = undefined;

  /**
   * `write`: a write whose fate the server did not confirm is `unknown`, a
   * read `expired`; undefined to decide it from the SQL text `subject` at a cutoff.
   * `operation` is what the error and the span name the statement by, e.g. `pg.query`.
   */
  constructor(deadline: Deadline, observe: boolean, operation: string, write: boolean | undefined, subject?: unknown) {
    this.deadline = deadline;
    this.observe = observe;
    this.baseOperation = operation;
    this.write = write;
    this.subject = subject;
  }

  /** What the error and the span name the statement by. */
  get operation(): string {
    return this.baseOperation;
  }

  get aborted(): boolean {
    return this.reason !== undefined;
  }

  /** Records on the driver instrumentation's span. */
  adoptSpan(span: Span): void {
    if (this.span !== undefined) return;
    this.span = span;
    if (this.attributes !== undefined) span.setAttributes(this.attributes);
    this.spanAdopted(span);
  }

  /** Called once, with the span the statement records on. */
  protected spanAdopted(_span: Span): void {}

  /** Starts a CLIENT span of our own, for when no driver instrumentation makes one. */
  startOwnSpan(tracer: Tracer, ctx: Context, shape: SpanShape): void {
    if (this.span !== undefined) return;
    this.ownSpan = true;
    this.adoptSpan(tracer.startSpan(shape.name, { kind: SpanKind.CLIENT, attributes: shape.attributes }, ctx));
  }

  /**
   * Calls `handler.onCutoff(reason)` once at the cutoff or on cancellation,
   * unless the statement settles first. Observe mode only records
   * `deadline.would_abort`. The caller has read the clock (budgetLeft) just
   * before, in the same synchronous step.
   */
  arm(handler: CutoffHandler): void {
    if (this.settled) return;
    this.handler = handler;
    const stop = onDeadlineAbort(this.deadline, (reason) => this.onDeadlineAbort(reason));
    // A deadline that had already aborted called us back before returning `stop`.
    if (this.handler === undefined) stop();
    else this.unsubscribe = stop;
  }

  /** The deadline aborted while the statement was armed. */
  private onDeadlineAbort(reason: unknown): void {
    if (this.settled || this.reason !== undefined) return;
    if (this.observe) return this.record(WOULD_ABORT);
    this.reason = reason ?? new DeadlineExceededError(this.operation, this.deadline.expiresAtMs);
    const handler = this.handler;
    this.disarm();
    handler?.onCutoff(this.reason);
  }

  private disarm(): void {
    if (this.handler === undefined) return;
    this.handler = undefined;
    this.unsubscribe?.();
    this.unsubscribe = undefined;
  }

  /** The error the caller gets for the abort, with the driver's error (if any) as `cause`. */
  errorFor(driverError?: unknown): Error {
    return errorForAbort(this.reason, this.operation, this.deadline.expiresAtMs, driverError ?? this.reason);
  }

  /** Nothing was sent: the deadline had passed or too little was left. */
  refuse(error: Error): void {
    this.record({ [ATTR_DEADLINE_OUTCOME]: 'not_started', [ATTR_DEADLINE_ABORT_CODE]: abortCodeOf(error) });
    this.settle(error);
  }

  /** Observe mode: enforce mode would have refused this statement. */
  markWouldReject(): void {
    this.record({ [ATTR_DEADLINE_WOULD_REJECT]: true });
  }

  /**
   * Ends the guard. `cancel` says what the server was told; the outcome follows
   * from it: a confirmed cancel is `expired`/`cancelled`, an unconfirmed write
   * `unknown`, a statement the cutoff reached before it was sent (`sent`
   * false) `expired`.
   */
  settle(error?: unknown, cancel?: DbCancel, sent = true): void {
    if (this.settled) return;
    this.settled = true;
    this.disarm();
    if (this.reason !== undefined) {
      const attrs: Record<string, string | boolean> = {
        [ATTR_DEADLINE_OUTCOME]: this.abortOutcome(cancel, sent),
        [ATTR_DEADLINE_ABORT_CODE]: abortCodeOf(this.reason),
        [ATTR_DEADLINE_ABORT_REASON]: describeAbortReason(this.reason),
      };
      if (cancel !== undefined) attrs[ATTR_DEADLINE_DB_CANCEL] = cancel;
      this.record(attrs);
    } else if (error === undefined && !this.observe) {
      // Finished before its cutoff reached it, even if the clock passed it while the result was on its way.
      this.recordCompleted();
    }
    if (this.ownSpan) this.endOwnSpan(error);
  }

  /** The cutoff reached the statement but it finished anyway: the result stands. */
  settleCompletedAfterCutoff(cancel: DbCancel): void {
    this.reason = undefined;
    this.record({ [ATTR_DEADLINE_DB_CANCEL]: cancel });
    this.settle();
  }

  /** Whether the statement may have changed data: asked only at a cutoff. */
  protected isWrite(): boolean {
    return this.write ?? isSqlWrite(sqlCommand(this.subject));
  }

  private abortOutcome(cancel: DbCancel | undefined, sent: boolean): DeadlineOutcome {
    const cancelled = abortCodeOf(this.reason) === 'CANCELLED';
    if (!sent || cancel === 'confirmed' || !this.isWrite()) return cancelled ? 'cancelled' : 'expired';
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

  /** `deadline.outcome=completed`, unless the span processor writes it as the span ends on its reply. */
  protected recordCompleted(): void {
    if (!this.spanEndsCompleted) this.record(COMPLETED);
  }

  private record(attributes: Record<string, string | boolean>): void {
    // Kept only until a span is shown to us (adoptSpan writes them then).
    if (this.span === undefined) {
      this.attributes = this.attributes === undefined ? attributes : { ...this.attributes, ...attributes };
      return;
    }
    // A driver instrumentation may have ended its span before the guard settled
    // (the span processor then derived the outcome from the deadline): writing
    // to an ended span would only cost the SDK's warning.
    if (this.span.isRecording()) this.span.setAttributes(attributes);
  }
}

