// A small in-process job queue standing in for a broker: messages are JSON
// text, delivered after `delayMs` of dwell. The deadline travels as an
// envelope (absolute cutoff + send time), never as a duration. The tests run
// the same envelope through RabbitMQ and BullMQ (test/agent/*.test.ts).
import { runTool, withEnvelope } from 'otel-deadline';
import { postJson } from './http.mjs';

/**
 * Starts a queue whose worker renders a report by calling `reportUrl`.
 * `results` records what happened to each job: `completed`, or `refused`
 * with the refusal code when the job's budget ran out while it was queued.
 */
export function startReportQueue({ reportUrl, delayMs }) {
  const timers = new Set();
  const inFlight = new Set();
  const results = [];

  async function work(text) {
    const { jobId, envelope } = JSON.parse(text);
    try {
      await withEnvelope(envelope, { operation: 'report.render', minUsefulMs: 50 }, (deadline) =>
        runTool('report.service', () => postJson(`${reportUrl}/render`, { jobId }, { signal: deadline.signal })),
      );
      results.push({ jobId, status: 'completed' });
    } catch (err) {
      results.push({ jobId, status: 'refused', code: err?.code ?? 'ERROR' });
    }
  }

  return {
    results,
    /** Puts one message on the queue. */
    enqueue(message) {
      const text = JSON.stringify(message);
      const timer = setTimeout(() => {
        timers.delete(timer);
        const job = work(text).finally(() => inFlight.delete(job));
        inFlight.add(job);
      }, delayMs);
      timers.add(timer);
    },
    /** Resolves once every queued job has been delivered and settled. */
    async drain() {
      while (timers.size > 0 || inFlight.size > 0) {
        await Promise.all(inFlight);
        if (timers.size > 0) await new Promise((resolve) => setTimeout(resolve, 5));
      }
    },
    close() {
      for (const timer of timers) clearTimeout(timer);
      timers.clear();
    },
  };
}
