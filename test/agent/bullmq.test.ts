import { randomUUID } from 'node:crypto';
import { context, propagation, SpanKind } from '@opentelemetry/api';
import { Queue, Worker, type ConnectionOptions } from 'bullmq';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { DeadlineExceededError, toDeadlineEnvelope, withDeadline, withEnvelope, type Deadline } from '../../src';
import { installOtel, sleep, type TestOtel } from '../helpers/otel';
import { reply, startDependency, type FakeDependency } from './fixtures';

/** BullMQ on the local Redis (127.0.0.1:6379). The envelope is the job's data. */
const connection: ConnectionOptions = { host: '127.0.0.1', port: 6379, maxRetriesPerRequest: null };

let otel: TestOtel;
let tool: FakeDependency;
beforeAll(async () => {
  otel = installOtel();
  tool = await startDependency((_req, res) => reply(res, 200, { rendered: true }));
});
afterAll(async () => {
  await tool?.close();
  await otel.shutdown();
});
beforeEach(() => {
  otel.exporter.reset();
  tool.arrivals.length = 0;
});

interface Lane {
  queue: Queue;
  /** Starts a worker; resolves with what happened to the first job it takes. */
  work(): Promise<{ deadline?: Deadline; error?: unknown }>;
}
const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

function lane(): Lane {
  const name = `otel-deadline-test-${randomUUID()}`;
  const queue = new Queue(name, { connection });
  cleanups.push(async () => {
    await queue.obliterate({ force: true });
    await queue.close();
  });
  return {
    queue,
    work: () =>
      new Promise((resolve) => {
        const worker = new Worker(
          name,
          (job) =>
            withEnvelope(job.data.envelope, { operation: 'report.render', minUsefulMs: 50 }, async (deadline) => {
              const headers: Record<string, string> = {};
              propagation.inject(context.active(), headers);
              await fetch(`${tool.url}/render`, { method: 'POST', headers, signal: deadline.signal });
              return deadline;
            }).then(
              (deadline) => resolve({ deadline }),
              (error: unknown) => {
                resolve({ error });
                throw error;
              },
            ),
          { connection },
        );
        worker.on('error', () => undefined);
        cleanups.push(() => worker.close());
      }),
  };
}

function publish(target: Lane, budgetMs: number): Promise<number> {
  return withDeadline({ operation: 'agent.run', timeoutMs: budgetMs, parent: null }, async (d) => {
    await target.queue.add('report', { envelope: toDeadlineEnvelope() }, { attempts: 1, removeOnFail: true });
    return Math.floor(d.expiresAtMs);
  });
}

describe('queue envelopes on BullMQ (Redis)', () => {
  it('runs a job that still has budget with the original cutoff, not a reset one', async () => {
    const target = lane();
    const cutoff = await publish(target, 3_000);
    const { deadline, error } = await target.work();
    expect(error).toBeUndefined();
    expect(deadline!.expiresAtMs).toBe(cutoff);
    expect(deadline!.source).toBe('remote');
    expect(tool.arrivals).toHaveLength(1);
    expect(Number(tool.arrivals[0].headers['x-deadline-at-ms'])).toBe(cutoff);
  });

  it('refuses a job held in the queue past its cutoff: the tool behind the worker gets zero calls', async () => {
    const target = lane();
    await publish(target, 250);
    await sleep(500); // no worker yet: the job waits in Redis
    const { error } = await target.work();
    expect(error).toBeInstanceOf(DeadlineExceededError);
    expect(tool.arrivals).toHaveLength(0);
    const job = otel.span('report.render');
    expect(job.attributes['deadline.outcome']).toBe('not_started');
    expect(job.attributes['deadline.queue_dwell_ms']).toBeGreaterThanOrEqual(450);
  });

  it('shows the dwell on the consumer span as deadline.queue_dwell_ms, in the request trace', async () => {
    const target = lane();
    await publish(target, 3_000);
    await sleep(400);
    const { error } = await target.work();
    expect(error).toBeUndefined();
    const job = otel.span('report.render');
    expect(job.kind).toBe(SpanKind.CONSUMER);
    expect(job.attributes['deadline.queue_dwell_ms']).toBeGreaterThanOrEqual(350);
    expect(job.attributes['deadline.remaining_ms']).toBeLessThanOrEqual(3_000 - 350);
    expect(job.spanContext().traceId).toBe(otel.span('agent.run').spanContext().traceId);
  });
});
