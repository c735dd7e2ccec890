// A queue and its worker. The message carries a deadline envelope (the
// request's absolute cutoff and the send time), never a duration, so the job
// runs against the request's original cutoff and the wait in the queue counts.
import { context, ROOT_CONTEXT } from '@opentelemetry/api';
import { withEnvelope } from 'otel-deadline';
import { pause } from '../http.mjs';

/** How long a message waits before the worker takes it. */
const QUEUE_DELAY_MS = Number(process.env.DEMO_QUEUE_DELAY_MS ?? 150);
const running = new Set();

function consume(message) {
  // A consumer does not run inside the producer's request: start from an empty context.
  const job = context.with(ROOT_CONTEXT, () =>
    withEnvelope(message.envelope, { operation: 'summarize', minUsefulMs: 50 }, async (deadline) => {
      await pause(100, deadline.signal);
    }),
  );
  running.add(job);
  job.catch(() => undefined).finally(() => running.delete(job));
}

export const routes = {
  '/enqueue': async (message) => {
    setTimeout(() => consume(message), QUEUE_DELAY_MS);
    return { queued: true };
  },
};

/** Lets jobs in flight finish before the process stops. */
export async function drain() {
  await new Promise((resolve) => setTimeout(resolve, QUEUE_DELAY_MS + 20));
  await Promise.allSettled([...running]);
}
