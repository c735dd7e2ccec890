import { context, propagation, trace } from '@opentelemetry/api';
import { UndiciInstrumentation } from '@opentelemetry/instrumentation-undici';
import type { ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { detach, getDeadline, runTool, withDeadline, type Deadline } from '../../src';
import { aborted, installOtel, sleep, type TestOtel } from '../helpers/otel';
import { reply, startDependency, type Arrival, type FakeDependency } from './fixtures';

let otel: TestOtel;
let undici: UndiciInstrumentation;
let dependency: FakeDependency;
beforeAll(async () => {
  otel = installOtel();
  // Client spans for fetch, with traceparent and our deadline headers on the wire.
  undici = new UndiciInstrumentation();
  undici.enable();
  dependency = await startDependency((req, res) => {
    // `/slow` answers only when the test says so.
    if (req.url === '/slow') slowReplies.push(() => reply(res, 200, {}));
    else reply(res, 200, {});
  });
});
afterAll(async () => {
  undici.disable();
  await dependency.close();
  await otel.shutdown();
});
beforeEach(() => {
  otel.exporter.reset();
  dependency.arrivals.length = 0;
});
const slowReplies: (() => void)[] = [];

function deferred(): { promise: Promise<void>; release(): void } {
  let release!: () => void;
  const promise = new Promise<void>((resolve) => (release = resolve));
  return { promise, release };
}

async function until(what: string, check: () => boolean, maxMs = 3_000): Promise<void> {
  const started = Date.now();
  while (!check()) {
    if (Date.now() - started > maxMs) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

const FLAGS = ['ended_after_parent', 'started_after_expiry', 'started_after_cancel'];

interface Finding {
  path: string;
  why: string;
}

/**
 * What seed 000 asks of a test: reconcile every arrival at the fake dependency
 * with the exported spans, and report each one whose lineage is not declared.
 * An arrival is declared when its client span exists and every span from it up
 * to its root started while its parent was still running, without a lateness
 * flag from the DeadlineSpanProcessor. A `detach` root is a root of its own,
 * so its work is declared.
 */
function undeclaredArrivals(arrivals: Arrival[], spans: ReadableSpan[]): Finding[] {
  const byId = new Map(spans.map((s) => [s.spanContext().spanId, s]));
  const findings: Finding[] = [];
  for (const arrival of arrivals) {
    const parentId = /^00-[0-9a-f]{32}-([0-9a-f]{16})-/.exec(String(arrival.headers.traceparent ?? ''))?.[1];
    let span = parentId === undefined ? undefined : byId.get(parentId);
    if (span === undefined) {
      findings.push({ path: arrival.path, why: 'no span sent it' });
      continue;
    }
    while (span !== undefined) {
      const flags = String(span.attributes['deadline.violation'] ?? '').split(',');
      const flagged = flags.find((f) => FLAGS.includes(f));
      if (flagged !== undefined) {
        findings.push({ path: arrival.path, why: `${span.name}: ${flagged}` });
        break;
      }
      const parent: ReadableSpan | undefined = span.parentSpanContext === undefined ? undefined : byId.get(span.parentSpanContext.spanId);
      if (parent !== undefined && compare(span.startTime, parent.endTime) > 0) {
        findings.push({ path: arrival.path, why: `${span.name}: started after ${parent.name} ended` });
        break;
      }
      span = parent;
    }
  }
  return findings;
}

function compare(a: [number, number], b: [number, number]): number {
  return a[0] - b[0] || a[1] - b[1];
}

async function post(path: string): Promise<void> {
  const res = await fetch(`${dependency.url}${path}`, { method: 'POST' });
  await res.arrayBuffer();
}

describe("seed 000's fixture: a follow-up released after the root is cancelled", () => {
  it('reports the undeclared arrivals and not the declared detach job', async () => {
    const gate = deferred();
    const caller = new AbortController();
    let job: ReturnType<typeof detach<void>> | undefined;
    let jobDeadline: Deadline | undefined;
    let rootDeadline: Deadline | undefined;

    const ended = await withDeadline({ operation: 'agent.run', timeoutMs: 5_000, parent: null, signal: caller.signal }, async (root) => {
      rootDeadline = root;
      await runTool('inventory.update', async () => {
        await post('/update'); // awaited: inside the tree
        // Undeclared: a follow-up scheduled for later, and a slow call nobody awaits.
        void gate.promise.then(() => post('/follow-up')).catch(() => undefined);
        void post('/slow').catch(() => undefined);
        // Declared: durable work with its own lifecycle.
        job = detach({ operation: 'audit.export', timeoutMs: 10_000 }, async (d) => {
          jobDeadline = getDeadline();
          await gate.promise;
          expect(d.aborted).toBe(false);
          await post('/audit');
        });
      });
      await until('the slow call to arrive', () => dependency.arrivals.some((a) => a.path === '/slow'));
      // The tool appears to have finished; the agent waits for its next step and the caller leaves.
      setTimeout(() => caller.abort(new Error('user went away')), 20);
      await aborted(root.signal);
      root.throwIfAborted();
    }).then(
      () => 'resolved',
      (err: unknown) => err,
    );
    // The root must end with the caller's reason: a run that resolves instead fails here.
    expect(ended).toMatchObject({ message: 'user went away' });
    gate.release(); // ...then the scheduled follow-up goes out
    slowReplies.splice(0).forEach((answer) => answer());
    await job!.done;
    await until('four arrivals', () => dependency.arrivals.length === 4);
    await until('all client spans', () => otel.spans().filter((s) => s.name === 'POST').length === 4);

    // The request's cancellation did not reach the detached job, which ran under its own deadline.
    expect(rootDeadline!.aborted).toBe(true);
    expect(jobDeadline).not.toBe(rootDeadline);
    expect(jobDeadline!.parent).toBeUndefined();

    const findings = undeclaredArrivals(dependency.arrivals, otel.spans());
    expect(findings.map((f) => f.path).sort()).toEqual(['/follow-up', '/slow']);
    // The unawaited slow call is flagged by the processor itself...
    expect(findings.find((f) => f.path === '/slow')!.why).toBe('POST: ended_after_parent');
    // ...and so is the follow-up, which started after its tool had ended, under a cancelled deadline.
    expect(findings.find((f) => f.path === '/follow-up')!.why).toBe('POST: started_after_cancel');
    const followUp = otel.spans().find((s) => s.name === 'POST' && s.attributes['url.full'] === `${dependency.url}/follow-up`);
    expect(followUp?.attributes['deadline.outcome']).toBe('cancelled');
  });
});

describe('detach', () => {
  it('starts a new root span linked to the declaring span, with its own root deadline, and is not flagged', async () => {
    let declaredBy = '';
    let requestCutoff = 0;
    let job: ReturnType<typeof detach<number>> | undefined;
    await withDeadline({ operation: 'agent.run', timeoutMs: 200, parent: null }, (d) => {
      declaredBy = trace.getActiveSpan()!.spanContext().spanId;
      requestCutoff = d.expiresAtMs;
      job = detach({ operation: 'export.csv', timeoutMs: 2_000 }, async (own) => {
        await sleep(300); // outlives the request's whole budget
        const headers: Record<string, string> = {};
        propagation.inject(context.active(), headers);
        return Number(headers['x-deadline-at-ms']) === Math.floor(own.expiresAtMs) ? 1 : 0;
      });
    });
    expect(await job!.done).toBe(1);
    const span = otel.span('export.csv');
    const root = otel.span('agent.run');
    expect(span.parentSpanContext).toBeUndefined();
    expect(span.spanContext().traceId).not.toBe(root.spanContext().traceId);
    expect(span.links.map((l) => l.context.spanId)).toEqual([declaredBy]);
    expect(span.attributes['deadline.detached_from.trace_id']).toBe(root.spanContext().traceId);
    expect(span.attributes['deadline.late']).toBeUndefined();
    expect(span.attributes['deadline.outcome']).toBe('completed');
    expect(job!.expiresAtMs).toBeGreaterThan(requestCutoff);
    expect(span.attributes['deadline.budget_ms']).toBe(2_000);
  });

  it('keeps a failed job from becoming an unhandled rejection, and reports it on done', async () => {
    const job = detach({ operation: 'notify', timeoutMs: 1_000 }, async () => {
      throw new Error('smtp down');
    });
    await expect(job.done).rejects.toThrow('smtp down');
    const never = detach({ operation: 'ignored', timeoutMs: 1_000 }, () => Promise.reject(new Error('nobody listens')));
    await sleep(20);
    expect(never.traceId).toMatch(/^[0-9a-f]{32}$/);
    expect(otel.span('ignored').status.code).toBe(2);
  });

  it('rejects bad options before starting anything', () => {
    expect(() => detach({ operation: '', timeoutMs: 10 }, () => undefined)).toThrow(TypeError);
    expect(() => detach({ operation: 'x', timeoutMs: -1 }, () => undefined)).toThrow(RangeError);
    expect(() => detach({ operation: 'x', timeoutMs: 10 }, undefined as never)).toThrow(TypeError);
  });
});
