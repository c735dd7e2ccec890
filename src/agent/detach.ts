import { context, trace, type Link } from '@opentelemetry/api';
import { setDeadline } from '../context';
import type { Deadline } from '../deadline';
import { openDeadlineUnder, runInSpan, TRACER_NAME } from '../open';
import { ToolAttributes } from './attributes';

export interface DetachOptions {
  /** Name of the durable job: its root span and its deadline's operation. */
  operation: string;
  /** The job's own budget, counted from now. It does not depend on the request's. */
  timeoutMs: number;
}

/** A handle on durable work that `detach` started. */
export interface DetachedJob<T> {
  /** The job's own trace: a new root, linked to the span that declared it. */
  readonly traceId: string;
  readonly spanId: string;
  /** The job's cutoff, epoch ms. */
  readonly expiresAtMs: number;
  /** Settles with the job; an unobserved rejection is not an unhandled one. */
  readonly done: Promise<T>;
}

/**
 * Starts work that must outlive the request under a new root deadline of `timeoutMs`, out of the
 * request's expiry or cancel, and a new root span linked to the declaring one (so not flagged late).
 */
export function detach<T>(options: DetachOptions, fn: (deadline: Deadline) => Promise<T> | T): DetachedJob<T> {
  if (typeof options !== 'object' || options === null) throw new TypeError('options must be an object');
  if (typeof fn !== 'function') throw new TypeError('fn must be a function');
  const deadline = openDeadlineUnder(null, { operation: options.operation, timeoutMs: options.timeoutMs });

  const declaredIn = context.active();
  const from = trace.getSpanContext(declaredIn);
  const links: Link[] = from === undefined || !trace.isSpanContextValid(from) ? [] : [{ context: from }];
  const attributes = links.length === 0 ? {} : { [ToolAttributes.DETACHED_FROM_TRACE_ID]: from!.traceId };
  // The request's baggage is kept (setDeadline replaces its deadline entry); its span and deadline are not.
  const base = setDeadline(trace.deleteSpan(declaredIn), deadline);
  const span = trace.getTracer(TRACER_NAME).startSpan(options.operation, { root: true, links, attributes }, base);

  const done = runInSpan(span, base, () => fn(deadline), () => deadline.dispose());
  done.catch(() => undefined);
  const { traceId, spanId } = span.spanContext();
  return { traceId, spanId, expiresAtMs: deadline.expiresAtMs, done };
}
