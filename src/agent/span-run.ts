import { context, SpanStatusCode, trace, type Context, type Span } from '@opentelemetry/api';

/** A telemetry-safe name for a failure: the error's type, never its message (which may carry user data). */
export function errorType(err: unknown): string {
  return err instanceof Error ? err.name : typeof err;
}

/** Runs `fn` with `span` active on `ctx`, marks a failure, then ends the span and calls `settle`, whatever happened. */
export async function runInSpan<T>(span: Span, ctx: Context, fn: () => Promise<T> | T, settle: () => void): Promise<T> {
  try {
    return await context.with(trace.setSpan(ctx, span), fn);
  } catch (err) {
    span.setStatus({ code: SpanStatusCode.ERROR, message: errorType(err) });
    throw err;
  } finally {
    span.end();
    settle();
  }
}
