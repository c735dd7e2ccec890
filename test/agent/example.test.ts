import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

/**
 * Runs examples/agent/run.mjs as a user would (a child process importing the
 * built package) and checks what it reports, spans included.
 */
const root = fileURLToPath(new URL('../../', import.meta.url));
const run = promisify(execFile);

interface SpanSummary {
  name: string;
  kind: string;
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  links: string[];
  attributes: Record<string, unknown>;
  events: { name: string; attributes: Record<string, unknown> }[];
}
interface Run {
  budgetMs: number;
  answer: { status: string; parts: string[]; skipped: string[]; leftMs: number; auditTraceId: string };
  jobs: { status: string; code?: string }[];
  arrivals: Record<string, number>;
  spans: SpanSummary[];
}

async function example(...args: string[]): Promise<Run[]> {
  const { stdout } = await run(process.execPath, ['examples/agent/run.mjs', '--json', ...args], { cwd: root, timeout: 30_000 });
  return (JSON.parse(stdout) as { runs: Run[] }).runs;
}

function only(spans: SpanSummary[], name: string): SpanSummary {
  const found = spans.filter((s) => s.name === name);
  expect(found, name).toHaveLength(1);
  return found[0];
}

describe('examples/agent', () => {
  it('answers in full with room to spare: every step runs, inside one trace and one cutoff', async () => {
    const [roomy] = await example('--budget', '3000');
    expect(roomy.answer.status).toBe('complete');
    expect(roomy.answer.parts).toEqual(['plan:3', 'findings:3', 'stock:4', 'comparison:2']);
    expect(roomy.jobs).toEqual([{ jobId: expect.any(String), status: 'completed' }]);
    expect(roomy.arrivals).toEqual({ agent: 1, planner: 1, 'sub-agent': 1, inventory: 2, enrichment: 1, report: 2 });

    const request = only(roomy.spans, 'user.request');
    const cutoff = request.attributes['deadline.at_ms'] as number;
    const audit = only(roomy.spans, 'audit.record');
    for (const span of roomy.spans) {
      expect(span.attributes['deadline.late'], span.name).toBeUndefined();
      if (span === audit || span.parentSpanId === audit.spanId) continue;
      expect(span.traceId, span.name).toBe(request.traceId);
      // No hop ever gets a later cutoff than the user's (the retry scope ends its reserve earlier).
      expect(span.attributes['deadline.at_ms'] as number, span.name).toBeLessThanOrEqual(cutoff);
    }
    // The retried read: two attempts, one retry decision, then success.
    const retry = only(roomy.spans, 'inventory.read');
    expect(retry.events.map((e) => e.attributes['deadline.retry.decision'])).toEqual(['retry', 'succeeded']);
    // The tool events of the planner call.
    expect(only(roomy.spans, 'planner').events.map((e) => e.name)).toEqual(['tool.queued', 'tool.started', 'tool.completed']);
    // The queued job ran with the request's cutoff and recorded its dwell.
    const job = only(roomy.spans, 'report.render');
    expect(job.kind).toBe('consumer');
    expect(job.attributes['deadline.at_ms']).toBe(cutoff);
    expect(job.attributes['deadline.queue_dwell_ms'] as number).toBeGreaterThanOrEqual(90);
    // The audit is declared background work: its own root, linked to where it was declared.
    expect(audit.parentSpanId).toBeUndefined();
    expect(audit.traceId).toBe(roomy.answer.auditTraceId);
    expect(audit.links).toHaveLength(1);
    expect(audit.attributes['deadline.budget_ms']).toBe(5_000);
  });

  it('on a tight budget skips the optional enrichment, keeps its reserve and returns a partial answer', async () => {
    // A budget a cold child process meets even on a loaded machine, and an enrichment that can never fit in it.
    const [tight] = await example('--budget', '2000', '--enrichment-min', '2000');
    expect(tight.answer.status).toBe('partial');
    // On a loaded machine the retried read may not fit either; the enrichment never does.
    expect(tight.answer.skipped).toContain('enrichment');
    expect(tight.arrivals.enrichment).toBe(0);
    expect(tight.answer.leftMs).toBeGreaterThan(200);
    expect(only(tight.spans, 'enrichment').attributes['deadline.outcome']).toBe('not_started');
    expect(tight.jobs.map((j) => j.status)).toEqual(['completed']);
  });

  it('refuses the report job that waited in the queue past the cutoff: the report service never sees it', async () => {
    const [late] = await example('--budget', '1500', '--queue-delay', '2500');
    expect(late.jobs).toEqual([{ jobId: expect.any(String), status: 'refused', code: 'DEADLINE_EXCEEDED' }]);
    expect(late.arrivals.report).toBe(1); // the audit only
    const job = only(late.spans, 'report.render');
    expect(job.attributes['deadline.outcome']).toBe('not_started');
    expect(job.attributes['deadline.queue_dwell_ms'] as number).toBeGreaterThanOrEqual(2_400);
    expect(late.spans.some((s) => s.name === 'report /render')).toBe(false);
  });

  it('rejects a bad budget with a clear message and exit code 2', async () => {
    const failure = await run(process.execPath, ['examples/agent/run.mjs', '--budget', 'soon'], { cwd: root }).catch((e: unknown) => e);
    expect(failure).toMatchObject({ code: 2, stderr: expect.stringContaining('--budget, --queue-delay and --enrichment-min take a positive number') });
  });
});
