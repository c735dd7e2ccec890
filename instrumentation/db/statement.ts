import { SpanKind, SpanStatusCode, type Context, type Span, type Tracer } from '@opentelemetry/api';
import type { Deadline } from '../../src/deadline';
import { abortCodeOf, DeadlineExceededError, errorForAbort } from '../../src/errors';
import { ATTR_DEADLINE_OUTCOME } from '../../src/attributes';
import { markStatementInFlight } from '../../src/processor/statement-in-flight';
import { CallGuard } from '../call/guard';
import { isSqlWrite, sqlCommand } from './sql';

/**
 * What the server was told about a statement the cutoff reached in flight (span attribute `deadline.db.cancel`):
 * `confirmed` (PostgreSQL 57014, MariaDB/MySQL 1317); `unconfirmed` (a cancel was sent, the statement ended some
 * other way or not in time); `not_told` (no cancel could be delivered, it may still run); `not_possible` (Redis has
 * no cancel; blocking commands had their timeout clamped); `too_late` (it finished first; its result was returned).
 */
export const ATTR_DEADLINE_DB_CANCEL = 'deadline.db.cancel';
export type DbCancel = 'confirmed' | 'unconfirmed' | 'not_told' | 'not_possible' | 'too_late';

/** What a statement span is named and described with, as the OTel driver instrumentations do. */
export interface SpanShape {
  name: string;
  attributes: Record<string, string | number>;
}

export interface CutoffHandler {
  onCutoff(reason: unknown): void;
}

/** The guard of one statement (or command) from its hand-off to the driver until its answer is delivered; it writes on the driver instrumentation's span, or on a CLIENT span of its own. */
export class DbStatement extends CallGuard {
  settled = false;
  /** Set once the cutoff (or a cancellation) reached the statement. */
  reason: unknown = undefined;
  /** Set when a DeadlineSpanProcessor writes `completed` as the span ends on its reply (statement-in-flight.ts). */
  private spanEndsCompleted = false;
  private ownSpan = false;
  private handler: CutoffHandler | undefined;

  /** `subject` is the SQL text or the driver's command; `write` undefined: decided from the SQL text at a cutoff. */
  constructor(
    deadline: Deadline,
    observe: boolean,
    private readonly baseOperation: string,
    private readonly write: boolean | undefined,
    protected readonly subject?: unknown,
  ) {
    super(deadline, observe);
  }

  get operation(): string {
    return this.baseOperation;
  }

  get aborted(): boolean {
    return this.reason !== undefined;
  }

  /** Records on the driver instrumentation's span (the first one shown). */
  adoptSpan(span: Span): void {
    if (this.span !== undefined) return;
    this.addSpan(span);
    // The driver instrumentations end a statement's span on its reply (ioredis before the guard settles).
    if (!this.observe) this.spanEndsCompleted = markStatementInFlight(span);
  }

  startOwnSpan(tracer: Tracer, ctx: Context, shape: SpanShape): void {
    if (this.span !== undefined) return;
    this.ownSpan = true;
    this.adoptSpan(tracer.startSpan(shape.name, { kind: SpanKind.CLIENT, attributes: shape.attributes }, ctx));
  }

  /** Calls `handler.onCutoff(reason)` once at the cutoff or on cancellation, unless the statement settles first. */
  armFor(handler: CutoffHandler): void {
    if (this.settled) return;
    this.handler = handler;
    this.arm();
  }

  protected cut(reason: unknown): void {
    if (this.reason !== undefined) return;
    this.reason = reason ?? new DeadlineExceededError(this.operation, this.deadline.expiresAtMs);
    this.handler!.onCutoff(this.reason);
  }

  /** The caller's error for the abort, the driver's error (if any) as `cause`. */
  errorFor(driverError?: unknown): Error {
    return errorForAbort(this.reason, this.operation, this.deadline.expiresAtMs, driverError ?? this.reason);
  }

  /** Nothing was sent: the deadline had passed or too little was left. */
  refuse(error: Error): void {
    this.recordNotStarted(abortCodeOf(error));
    this.settle(error);
  }

  /** Ends the guard, which lets go of its handler (the driver's query). An aborted write is `unknown` unless its cancel was confirmed or it was not `sent`. */
  settle(error?: unknown, cancel?: DbCancel, sent = true): void {
    if (this.settled) return;
    this.settled = true;
    this.disarm();
    this.handler = undefined;
    if (this.reason !== undefined) {
      this.recordAbort(this.reason, sent && cancel !== 'confirmed' && this.isWrite());
      if (cancel !== undefined) this.record({ [ATTR_DEADLINE_DB_CANCEL]: cancel });
    } else if (error === undefined && !this.observe && !this.spanEndsCompleted) {
      // Finished before its cutoff reached it, even if the clock passed it while the result was on its way.
      this.record({ [ATTR_DEADLINE_OUTCOME]: 'completed' });
    }
    if (this.ownSpan) endOwnSpan(this.span!, error);
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
}

function endOwnSpan(span: Span, error: unknown): void {
  const code = (error as { code?: unknown } | null)?.code;
  if (error !== undefined) span.setStatus({ code: SpanStatusCode.ERROR, message: typeof code === 'string' ? code : (error as Error)?.name });
  span.end();
}
