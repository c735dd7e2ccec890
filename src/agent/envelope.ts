import { context, isSpanContextValid, SpanKind, trace, TraceFlags, type Context } from '@opentelemetry/api';
import { getDeadline, setDeadline } from '../context';
import type { Deadline, ManagedDeadline } from '../deadline';
import { cutoffOf, DeadlineNode } from '../deadline-node';
import { DeadlineCancelledError, DeadlineExceededError, InsufficientBudgetError } from '../errors';
import { checkOperation, checkSignal, endRefusedSpan, refusalFromParent, runInSpan, TRACER_NAME } from '../open';
import { checkDuration, MAX_DEADLINE_MS, minCutoff, monotonicNow } from '../time';

/** What a producer puts in a queued message so the worker can rebuild the deadline; time in the queue counts. */
export interface DeadlineEnvelope {
  /** Format version. */
  v: 1;
  /** The request's cutoff, epoch ms. */
  deadlineAtMs: number;
  /** When the sender built the envelope, epoch ms. */
  sentAtMs: number;
  /** W3C `traceparent` of the sending span, so the worker's span joins the request's trace. */
  traceparent?: string;
}

const MAX_EPOCH_MS = 8.64e15;
const MAX_JSON_LENGTH = 4096;
const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/** The envelope for the deadline active in `ctx`; a TypeError without one (work that outlives the request is `detach`ed). */
export function toDeadlineEnvelope(ctx: Context = context.active()): DeadlineEnvelope {
  const deadline = getDeadline(ctx);
  if (deadline === undefined) {
    throw new TypeError('toDeadlineEnvelope needs an active deadline (use detach() for work that outlives the request)');
  }
  const envelope: DeadlineEnvelope = { v: 1, deadlineAtMs: Math.floor(deadline.expiresAtMs), sentAtMs: Date.now() };
  const spanContext = trace.getSpanContext(ctx);
  if (spanContext !== undefined && isSpanContextValid(spanContext)) {
    const flags = (spanContext.traceFlags & 0xff).toString(16).padStart(2, '0');
    envelope.traceparent = `00-${spanContext.traceId}-${spanContext.spanId}-${flags}`;
  }
  return envelope;
}

function invalid(why: string): TypeError {
  return new TypeError(`invalid deadline envelope: ${why}`);
}

function epochField(record: Record<string, unknown>, name: string): number {
  const value = record[name];
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0 || value > MAX_EPOCH_MS) {
    throw invalid(`${name} must be a finite number of epoch ms, got ${value === null ? 'null' : typeof value}`);
  }
  return value;
}

/** Validates an envelope (object or JSON text) into a clean copy, or throws a TypeError; a bad `traceparent` is dropped. */
export function readDeadlineEnvelope(input: unknown): DeadlineEnvelope {
  let value = input;
  if (typeof value === 'string') {
    if (value.length > MAX_JSON_LENGTH) throw invalid(`JSON text longer than ${MAX_JSON_LENGTH} characters`);
    try {
      value = JSON.parse(value);
    } catch {
      throw invalid('not JSON');
    }
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw invalid(`expected an object, got ${value === null ? 'null' : Array.isArray(value) ? 'an array' : typeof value}`);
  }
  const record = value as Record<string, unknown>;
  if (record.v !== 1) throw invalid(`unsupported version ${JSON.stringify(record.v) ?? 'undefined'}`);
  const envelope: DeadlineEnvelope = {
    v: 1,
    deadlineAtMs: epochField(record, 'deadlineAtMs'),
    sentAtMs: epochField(record, 'sentAtMs'),
  };
  const traceparent = record.traceparent;
  if (typeof traceparent === 'string') {
    const match = TRACEPARENT.exec(traceparent);
    if (match !== null && !/^0+$/.test(match[1]) && !/^0+$/.test(match[2])) envelope.traceparent = traceparent;
  }
  return envelope;
}

export interface AdmitEnvelopeOptions {
  /** The worker's operation name. Default `queue.job`. */
  operation?: string;
  /** Refuse unless at least this much is usable. Default 0 (refuse only expired work). */
  minUsefulMs?: number;
  /** Time the worker keeps back (to ack, to report); counted against `minUsefulMs`. Default 0. */
  reserveMs?: number;
  /** Caps what an envelope can ask for, in ms, for queues fed by less trusted producers. Default, and never more than: MAX_DEADLINE_MS (100 days). */
  maxRemainingMs?: number;
  /** An extra cancellation source, such as the worker shutting down. */
  signal?: AbortSignal;
  /** Clamp under this deadline as well. Default: the one active in OTel context (amqplib's propagated one, say). */
  parent?: Deadline | null;
}

/** The job's deadline, and the refusal (if any) to throw instead of starting it. */
function build(input: unknown, options: AdmitEnvelopeOptions) {
  if (typeof options !== 'object' || options === null) throw new TypeError('options must be an object');
  const envelope = readDeadlineEnvelope(input);
  const operation = checkOperation(options.operation ?? 'queue.job');
  const minUsefulMs = options.minUsefulMs === undefined ? 0 : checkDuration('minUsefulMs', options.minUsefulMs);
  const reserveMs = options.reserveMs === undefined ? 0 : checkDuration('reserveMs', options.reserveMs);
  const cap = Math.min(MAX_DEADLINE_MS, options.maxRemainingMs === undefined ? Infinity : checkDuration('maxRemainingMs', options.maxRemainingMs));
  checkSignal(options.signal);
  const parent = options.parent === undefined ? getDeadline() : (options.parent ?? undefined);

  // Wall clock read on both sides of the monotonic read, so a pause between reads errs on the safe side.
  const epochBefore = Date.now();
  const nowMono = monotonicNow();
  const nowEpoch = Date.now();
  let remaining = envelope.deadlineAtMs - nowEpoch;
  let expiresAtMs = envelope.deadlineAtMs;
  if (remaining > cap) {
    remaining = cap;
    expiresAtMs = epochBefore + cap;
  }
  let cutoffMono = nowMono + remaining;
  if (parent !== undefined) {
    const parentCutoff = cutoffOf(parent, nowMono);
    cutoffMono = minCutoff(cutoffMono, parentCutoff);
    if (cutoffMono === parentCutoff) expiresAtMs = parent.expiresAtMs;
  }
  const left = cutoffMono - nowMono;
  const deadline = new DeadlineNode({
    operation,
    cutoffMono,
    expiresAtMs,
    source: 'remote',
    budgetMs: left > 0 ? left : 0,
    parent,
    signal: options.signal,
    queueDwellMs: Math.max(0, Math.round(nowEpoch - envelope.sentAtMs)),
  });

  let refusal: Error | undefined;
  if (parent?.aborted) refusal = refusalFromParent(operation, expiresAtMs, parent.abortReason);
  else if (options.signal?.aborted) refusal = new DeadlineCancelledError(operation, options.signal.reason);
  else if (left <= 0) refusal = new DeadlineExceededError(operation, expiresAtMs);
  else if (left - reserveMs < minUsefulMs) refusal = new InsufficientBudgetError(operation, minUsefulMs + reserveMs, left);
  return { deadline, refusal, envelope };
}

/**
 * The worker's side: the job's deadline (`source: 'remote'`, with `queueDwellMs`), or the refusal
 * thrown when the job expired in the queue or too little is left. Dispose it when the job settles.
 */
export function admitEnvelope(envelope: unknown, options: AdmitEnvelopeOptions = {}): ManagedDeadline {
  const { deadline, refusal } = build(envelope, options);
  if (refusal !== undefined) {
    deadline.dispose();
    throw refusal;
  }
  return deadline;
}

/**
 * `admitEnvelope` plus a CONSUMER span (child of the active span, else of the envelope's
 * `traceparent`); `fn` runs under the job's deadline. A refused job gets a `not_started` span.
 */
export async function withEnvelope<T>(
  envelope: unknown,
  options: AdmitEnvelopeOptions,
  fn: (deadline: Deadline) => Promise<T> | T,
): Promise<T> {
  if (typeof fn !== 'function') throw new TypeError('fn must be a function');
  const { deadline, refusal, envelope: read } = build(envelope, options);
  let base = context.active();
  if (trace.getSpan(base) === undefined) {
    const match = TRACEPARENT.exec(read.traceparent ?? '');
    if (match !== null) {
      base = trace.setSpanContext(base, {
        traceId: match[1],
        spanId: match[2],
        traceFlags: parseInt(match[3], 16) & TraceFlags.SAMPLED,
        isRemote: true,
      });
    }
  }
  const inner = setDeadline(base, deadline);
  const span = trace.getTracer(TRACER_NAME).startSpan(deadline.operation, { kind: SpanKind.CONSUMER }, inner);
  if (refusal !== undefined) {
    endRefusedSpan(span, refusal);
    deadline.dispose();
    throw refusal;
  }
  return runInSpan(span, inner, () => fn(deadline), () => deadline.dispose());
}
