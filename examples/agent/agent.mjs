// The agent loop. Every step spends the one deadline the request arrived with.
import { randomUUID } from 'node:crypto';
import {
  detach,
  getDeadline,
  InsufficientBudgetError,
  retryWithinDeadline,
  runTool,
  toDeadlineEnvelope,
  withAdmission,
} from 'otel-deadline';
import { postJson, postJsonHttp } from './http.mjs';

/**
 * Answers one question:
 * 1. the planner tool, over fetch;
 * 2. a sub-agent, over node:http;
 * 3. an inventory read, retried within the deadline;
 * 4. a report job, queued with the deadline in its envelope;
 * 5. an optional enrichment, skipped when it cannot fit before the reserve;
 * 6. an audit record, declared as background work with `detach`.
 * It keeps `reserveMs` to serialize whatever it has, and says `partial` when
 * a step was skipped.
 */
export async function answer({ question }, { urls, queue, reserveMs, enrichmentMinMs }) {
  const parts = [];
  const skipped = [];

  const plan = await runTool('planner', ({ signal }) => postJson(`${urls.planner}/plan`, { question }, { signal }));
  parts.push(`plan:${plan.steps.length}`);

  const research = await runTool('sub-agent', ({ signal }) => postJsonHttp(`${urls.subAgent}/research`, {}, { signal }));
  parts.push(`findings:${research.findings}`);

  // A read the answer can do without: retried inside the budget, skipped if the budget says no.
  try {
    const stock = await runTool('inventory', () =>
      retryWithinDeadline(
        ({ signal, idempotencyKey }) =>
          postJson(`${urls.inventory}/read`, {}, { signal, headers: { 'idempotency-key': idempotencyKey } }),
        { operation: 'inventory.read', attempts: 3, backoffMs: 100, minAttemptMs: 100, reserveMs },
      ),
    );
    parts.push(`stock:${stock.available}`);
  } catch (err) {
    if (!(err instanceof InsufficientBudgetError)) throw err;
    skipped.push('inventory');
  }

  const jobId = randomUUID();
  await runTool('report.enqueue', () => queue.enqueue({ jobId, envelope: toDeadlineEnvelope() }));

  try {
    const extra = await withAdmission({ operation: 'enrichment', minUsefulMs: enrichmentMinMs, reserveMs }, ({ signal }) =>
      postJson(`${urls.enrichment}/compare`, {}, { signal }),
    );
    parts.push(`comparison:${extra.rows}`);
  } catch (err) {
    if (!(err instanceof InsufficientBudgetError)) throw err;
    skipped.push('enrichment');
  }

  const audit = detach({ operation: 'audit.record', timeoutMs: 5_000 }, () => postJson(`${urls.report}/audit`, { jobId }));

  return {
    status: skipped.length === 0 ? 'complete' : 'partial',
    parts,
    skipped,
    jobId,
    auditTraceId: audit.traceId,
    audit: audit.done,
    leftMs: Math.floor(getDeadline()?.remainingMs() ?? -1),
  };
}
