import { randomUUID } from 'node:crypto';
import { createRequire } from 'node:module';
import { context, propagation, SpanKind } from '@opentelemetry/api';
import { AmqplibInstrumentation } from '@opentelemetry/instrumentation-amqplib';
import type { Channel, ChannelModel, ConsumeMessage } from 'amqplib';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { DeadlineExceededError, toDeadlineEnvelope, withDeadline, withEnvelope, type Deadline } from '../../src';
import { installOtel, sleep, type TestOtel } from '../helpers/otel';
import { reply, startDependency, type FakeDependency } from './fixtures';

/**
 * RabbitMQ on 127.0.0.1:5672 through amqplib, with the OTel amqplib
 * instrumentation: it injects the global propagator's headers (ours included)
 * into the message properties and extracts them for the consumer span, while
 * the deadline envelope rides in the body.
 */
let otel: TestOtel;
let instrumentation: AmqplibInstrumentation;
let amqp: typeof import('amqplib');
let connection: ChannelModel;
let tool: FakeDependency;

beforeAll(async () => {
  otel = installOtel();
  instrumentation = new AmqplibInstrumentation();
  instrumentation.enable();
  // Loaded after enable() so the require hook patches it.
  amqp = createRequire(import.meta.url)('amqplib');
  connection = await amqp.connect('amqp://guest:guest@127.0.0.1:5672');
  tool = await startDependency((_req, res) => reply(res, 200, { rendered: true }));
});
afterAll(async () => {
  await connection?.close();
  await tool?.close();
  instrumentation?.disable();
  await otel.shutdown();
});
beforeEach(() => {
  otel.exporter.reset();
  tool.arrivals.length = 0;
});

interface Lane {
  queue: string;
  channel: Channel;
  /** Starts the worker; resolves with what happened to the first job it takes. */
  work(): Promise<{ deadline?: Deadline; error?: unknown }>;
}
const lanes: Lane[] = [];
afterEach(async () => {
  for (const lane of lanes.splice(0)) {
    await lane.channel.deleteQueue(lane.queue);
    await lane.channel.close();
  }
});

/** A queue with a unique name and a worker that admits each job's envelope before calling the fake tool. */
async function lane(): Promise<Lane> {
  const channel = await connection.createChannel();
  const queue = `otel-deadline-test-${randomUUID()}`;
  await channel.assertQueue(queue, { durable: false });
  const created: Lane = {
    queue,
    channel,
    work: () =>
      new Promise((resolve) => {
        void channel.consume(queue, (msg: ConsumeMessage | null) => {
          if (msg === null) return; // the queue was deleted under the consumer
          const { envelope } = JSON.parse(msg.content.toString()) as { envelope: unknown };
          withEnvelope(envelope, { operation: 'report.render', minUsefulMs: 50 }, async (deadline) => {
            const headers: Record<string, string> = {};
            propagation.inject(context.active(), headers);
            await fetch(`${tool.url}/render`, { method: 'POST', headers, signal: deadline.signal });
            return deadline;
          })
            .then((deadline) => resolve({ deadline }), (error: unknown) => resolve({ error }))
            .finally(() => channel.ack(msg));
        });
      }),
  };
  lanes.push(created);
  return created;
}

/** Publishes one job from inside a request with `budgetMs`; returns the request's cutoff. */
function publish(target: Lane, budgetMs: number): Promise<number> {
  return withDeadline({ operation: 'agent.run', timeoutMs: budgetMs, parent: null }, (d) => {
    target.channel.sendToQueue(target.queue, Buffer.from(JSON.stringify({ envelope: toDeadlineEnvelope() })));
    return Math.floor(d.expiresAtMs);
  });
}

describe('queue envelopes on RabbitMQ (amqplib + instrumentation-amqplib)', () => {
  it('runs a job that still has budget with the original cutoff, not a reset one', async () => {
    const target = await lane();
    const cutoff = await publish(target, 3_000);
    const { deadline, error } = await target.work();
    expect(error).toBeUndefined();
    // The worker is clamped under the deadline amqplib's consumer span got from
    // the headers (min of relative and absolute), which can be 1 ms earlier.
    expect(Math.abs(deadline!.expiresAtMs - cutoff)).toBeLessThanOrEqual(1);
    expect(tool.arrivals).toHaveLength(1);
    expect(Math.abs(Number(tool.arrivals[0].headers['x-deadline-at-ms']) - cutoff)).toBeLessThanOrEqual(1);
    expect(Number(tool.arrivals[0].headers['x-deadline-remaining-ms'])).toBeLessThan(3_000);
  });

  it('refuses a job held in the queue past its cutoff: the tool behind the worker gets zero calls', async () => {
    const target = await lane();
    await publish(target, 250);
    await sleep(500); // no consumer yet: the message waits in RabbitMQ
    const { error } = await target.work();
    expect(error).toBeInstanceOf(DeadlineExceededError);
    expect(tool.arrivals).toHaveLength(0);
    const job = otel.span('report.render');
    expect(job.attributes['deadline.outcome']).toBe('not_started');
    expect(job.attributes['deadline.queue_dwell_ms']).toBeGreaterThanOrEqual(450);
  });

  it('shows the dwell on the consumer spans: wire skew on amqplib span, queue_dwell_ms on the job span', async () => {
    const target = await lane();
    await publish(target, 3_000);
    await sleep(400);
    const { error } = await target.work();
    expect(error).toBeUndefined();
    await sleep(20); // the amqplib consumer span ends at ack
    const consumer = otel.spans().find((s) => s.name === `${target.queue} process`);
    expect(consumer?.kind).toBe(SpanKind.CONSUMER);
    // Relative and absolute wire values disagree by the time the message sat in the queue.
    expect(consumer!.attributes['deadline.wire_skew_ms']).toBeLessThanOrEqual(-350);
    expect(consumer!.attributes['deadline.source']).toBe('remote');
    const job = otel.span('report.render');
    expect(job.parentSpanContext?.spanId).toBe(consumer!.spanContext().spanId);
    expect(job.attributes['deadline.queue_dwell_ms']).toBeGreaterThanOrEqual(350);
    expect(job.attributes['deadline.remaining_ms']).toBeLessThanOrEqual(3_000 - 350);
    const producer = otel.spans().find((s) => s.kind === SpanKind.PRODUCER);
    expect(producer?.spanContext().traceId).toBe(job.spanContext().traceId);
  });
});
