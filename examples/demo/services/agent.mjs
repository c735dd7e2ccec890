// The agent: one run under the caller's deadline, five steps.
import { SpanKind, trace } from '@opentelemetry/api';
import { retryWithinDeadline, toDeadlineEnvelope, withDeadline } from 'otel-deadline';
import { call } from '../http.mjs';

const tracer = trace.getTracer('otel-deadline-demo');
const codeOf = (err) => err?.code ?? err?.name ?? 'Error';

export const routes = {
  '/run': async () => {
    const steps = {};
    // 1. Clamped: asks for 10 s, gets what is left of the request's budget.
    await withDeadline({ operation: 'plan', timeoutMs: 10_000 }, () => call('tools', '/plan'));
    steps.plan = 'ok';

    // 2. Queued: the job carries the request's cutoff in an envelope.
    await tracer.startActiveSpan('enqueue summarize', { kind: SpanKind.PRODUCER }, async (span) => {
      try {
        await call('worker', '/enqueue', { envelope: toDeadlineEnvelope() });
      } finally {
        span.end();
      }
    });
    steps.summarize = 'queued';

    // 3. A slow dependency with its own 400 ms cutoff: aborted there, the run goes on.
    steps.search = await withDeadline({ operation: 'search', timeoutMs: 400 }, () => call('tools', '/search')).then(
      () => 'ok',
      codeOf,
    );

    // 4. A read that fails once; the retry would need 600 ms backoff + 400 ms, more than is left.
    steps.read = await retryWithinDeadline(
      ({ attempt, signal, idempotencyKey }) => call('tools', '/flaky', { attempt, idempotencyKey }, { signal }),
      { operation: 'read', attempts: 3, backoffMs: 600, minAttemptMs: 400 },
    ).then(() => 'ok', codeOf);

    // 5. Deliberately late: a fresh 5 s root opened inside a 1.5 s request.
    //    The span processor flags it deadline.late=true (later_than_parent).
    await withDeadline({ operation: 'cache.refresh', timeoutMs: 5_000, parent: null }, () => call('tools', '/warm'));
    steps.cache = 'refreshed late';

    return { answer: 'partial', steps };
  },
};
