/**
 * The swap: an express + pg + ioredis app started under
 * auto-instrumentations-node's register entry, then under ours, gives the
 * same spans (names, kinds, counts), and under ours the spans of the request
 * carry its deadline. Real child processes, real PostgreSQL and Redis.
 * Runs against the build.
 */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startOtlpReceiver, type OtlpReceiver } from '../../src/lineage/receiver';
import type { LineageSpan } from '../../src/lineage/model';
import { node } from './run-node';

const app = join(__dirname, 'fixtures', 'swap-app.cjs');
let receiver: OtlpReceiver;

beforeAll(async () => {
  receiver = await startOtlpReceiver();
});
afterAll(async () => {
  await receiver.close();
});

async function runUnder(entry: string, service: string): Promise<LineageSpan[]> {
  const run = await node(['--require', entry, app], {
    OTEL_SERVICE_NAME: service,
    OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
    // Every instrumentation auto-instrumentations-node enables by default.
    OTEL_NODE_ENABLED_INSTRUMENTATIONS: '',
    OTEL_METRICS_EXPORTER: 'none',
    OTEL_LOGS_EXPORTER: 'none',
  });
  expect(run.stderr).toBe('');
  expect(run.code).toBe(0);
  expect(JSON.parse(run.stdout.trim())).toEqual({ status: 200, body: '{"id":7,"cached":null}' });
  return receiver.spans().filter((span) => span.service === service);
}

/** `kind name` of each span, sorted: what a trace view lists. */
function shape(spans: LineageSpan[]): string[] {
  return spans.map((span) => `${span.kind} ${span.name}`).sort();
}

describe('swapping auto-instrumentations-node/register for otel-deadline/register', () => {
  it('keeps every span and adds the deadline to the spans of the request', async () => {
    const auto = await runUnder('@opentelemetry/auto-instrumentations-node/register', 'swap-auto');
    const ours = await runUnder('otel-deadline/register', 'swap-deadline');
    expect(shape(ours)).toEqual(shape(auto));
    const names = shape(ours);
    // express names the server span by its route, so server and client read apart.
    expect(names).toContain('server GET /orders/:id');
    expect(names).toContain('client GET');

    // The spans of the request's own work: the server span, its query and its Redis command.
    const server = ours.find((span) => span.kind === 'server')!;
    const work = ours.filter((span) => span.traceId === server.traceId && /^(server GET|client pg\.query|client get$)/.test(`${span.kind} ${span.name}`));
    expect(work.map((span) => `${span.kind} ${span.name}`).sort()).toEqual(['client get', 'client pg.query:SELECT test', 'server GET /orders/:id']);
    for (const span of work) {
      expect(span.attributes['deadline.budget_ms'], `${span.kind} ${span.name}`).toBe(5000);
      expect(span.attributes['deadline.outcome'], `${span.kind} ${span.name}`).toBe('completed');
    }
    // Nothing is flagged late: express's middleware spans end on the response's 'close', in the turn its server span ended in.
    const flagged = ours.filter((span) => span.attributes['deadline.violation'] !== undefined);
    expect(flagged.map((span) => `${span.kind} ${span.name}: ${String(span.attributes['deadline.violation'])}`)).toEqual([]);
    // Under auto-instrumentations-node alone, no span knows of a deadline.
    expect(auto.filter((span) => span.attributes['deadline.at_ms'] !== undefined)).toEqual([]);
  }, 150_000);
});
