import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDemo, type DemoAnswer } from '../../examples/demo/start.mjs';
import { traceFromJaeger } from '../../examples/demo/from-jaeger.mjs';
import type { RunningJaeger } from '../../scripts/jaeger.mjs';
import { startOtlpReceiver, type OtlpReceiver } from '../../src/lineage/receiver';
import type { LineageSpan } from '../../src/lineage/model';
import { SKIP_JAEGER, startTestJaeger } from './helpers/jaeger';
import { startPrometheus, waitFor, type TestPrometheus } from './helpers/prometheus';
import { runCli } from './helpers/run-cli';

// The demo's four services, real processes, export OTLP/HTTP to a real Jaeger
// (built by .ci/ensure-jaeger.sh, deploy/jaeger/config.yaml on free ports).
// Jaeger also forwards what it receives to an embedded receiver, which writes
// the demo's OTLP/JSON file: the same spans, before Jaeger's conversion.
// A real Prometheus scrapes only Jaeger's span-metrics endpoint, never the services.

const ALERTS = resolve(__dirname, '../../deploy/prometheus/alerts.yml');

/** How Jaeger's query API types each deadline attribute (int64 for whole numbers, bool for flags). */
const JAEGER_TYPES: Record<string, string> = {
  'deadline.at_ms': 'int64',
  'deadline.remaining_ms': 'int64',
  'deadline.remaining_at_end_ms': 'int64',
  'deadline.budget_ms': 'int64',
  'deadline.wire_skew_ms': 'int64',
  'deadline.queue_dwell_ms': 'int64',
  'deadline.stop_lag_ms': 'int64',
  'deadline.exceeded': 'bool',
  'deadline.late': 'bool',
  'deadline.source': 'string',
  'deadline.operation': 'string',
  'deadline.outcome': 'string',
  'deadline.abort.code': 'string',
  'deadline.abort.reason': 'string',
  'deadline.violation': 'string',
};

interface JaegerTag {
  key: string;
  type: string;
  value: unknown;
}
interface JaegerSpan {
  spanID: string;
  operationName: string;
  tags: JaegerTag[];
}
interface Alert {
  labels: Record<string, string>;
  state: string;
}
interface Target {
  labels: Record<string, string>;
  scrapeUrl: string;
  health: string;
}

describe.skipIf(SKIP_JAEGER).each(['self', 'register'] as const)('the demo exporting to a real Jaeger (DEMO_TELEMETRY=%s)', (telemetry) => {
  let dir: string;
  let file: string;
  let receiver: OtlpReceiver | undefined;
  let jaeger: RunningJaeger | undefined;
  let prometheus: TestPrometheus | undefined;
  let answer: DemoAnswer;
  let jaegerSpans: JaegerSpan[];
  let fileSpans: LineageSpan[];
  let alertsBefore: Alert[];

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), `lineage-jaeger-${telemetry}-`));
    file = join(dir, 'demo-traces.json');
    receiver = await startOtlpReceiver({ file });
    jaeger = await startTestJaeger(receiver.url);
    prometheus = await startPrometheus({
      dir,
      ruleFiles: [ALERTS],
      targets: { jaeger: new URL(jaeger.urls.spanMetrics).host },
    });
    // Prometheus has scraped Jaeger and evaluated the rules before the request, so the
    // check below that nothing fires yet means something.
    await waitFor('the span-metrics target up and a rule evaluation', 30_000, async () => {
      const { activeTargets } = await prometheus!.api<{ activeTargets: Target[] }>('/api/v1/targets');
      const { groups } = await prometheus!.api<{ groups: { lastEvaluation: string }[] }>('/api/v1/rules');
      const evaluated = groups.length > 0 && !groups[0].lastEvaluation.startsWith('0001');
      return activeTargets.length === 1 && activeTargets[0].health === 'up' && evaluated ? true : undefined;
    });
    ({ alerts: alertsBefore } = await prometheus.api<{ alerts: Alert[] }>('/api/v1/alerts'));
    const demo = await startDemo({
      outDir: dir,
      otlpEndpoint: jaeger.urls.otlpHttp,
      telemetry,
      // These checks are about what reaches Jaeger, not the demo's 1.5 s timings (demo.test.ts
      // covers those): 3 s keeps a heavily loaded machine from turning the answer into a 504.
      // The late child is late whatever the budget: it opens a fresh 5 s deadline.
      budgetMs: 3_000,
    });
    try {
      answer = await demo.ask();
    } finally {
      await demo.stop();
    }
    // The services have flushed; Jaeger batches for 200 ms. Bounded at 20 s for a loaded machine.
    const [trace] = await traceFromJaeger(jaeger.urls.query, answer.traceId, { minSpans: 10 });
    const fileTrace = () => receiver!.spans().filter((s) => s.traceId === answer.traceId);
    await waitFor('the forwarded OTLP file to hold the whole trace', 20_000, async () =>
      fileTrace().length >= trace.spans.length ? true : undefined,
    );
    fileSpans = fileTrace();
    const raw = (await fetch(`${jaeger.urls.query}/api/traces/${answer.traceId}`).then((r) => r.json())) as {
      data: { spans: JaegerSpan[] }[];
    };
    jaegerSpans = raw.data[0].spans;
  }, 120_000);

  afterAll(async () => {
    await prometheus?.stop();
    await jaeger?.stop();
    await receiver?.close();
    rmSync(dir, { recursive: true, force: true });
  }, 30_000);

  it('stores the whole trace: all four services, the same spans as the OTLP file', () => {
    expect(fileSpans.some((s) => s.name === 'cache.refresh' && s.attributes['deadline.late'] === true)).toBe(true);
    expect(jaegerSpans.map((s) => s.spanID).sort()).toEqual(fileSpans.map((s) => s.spanId).sort());
    const services = new Set(fileSpans.map((s) => s.service));
    expect([...services].sort()).toEqual(['agent', 'gateway', 'tools', 'worker']);
  });

  it('types every deadline attribute as Jaeger types them, with the values the services exported', () => {
    const exported = new Map(fileSpans.map((s) => [s.spanId, s.attributes]));
    const keysSeen = new Set<string>();
    for (const span of jaegerSpans) {
      const attributes = exported.get(span.spanID)!;
      const deadlineTags = span.tags.filter((t) => t.key.startsWith('deadline.'));
      // Every deadline attribute the service exported is a tag, and no other.
      expect(deadlineTags.map((t) => t.key).sort(), span.operationName).toEqual(
        Object.keys(attributes).filter((k) => k.startsWith('deadline.')).sort(),
      );
      for (const tag of deadlineTags) {
        keysSeen.add(tag.key);
        expect(`${tag.key}: ${tag.type}`).toBe(`${tag.key}: ${JAEGER_TYPES[tag.key]}`);
        expect(tag.value, `${span.operationName} ${tag.key}`).toEqual(attributes[tag.key]);
      }
    }
    // The demo exercises every attribute but the wire skew, which only clock disagreement sets.
    const expected = Object.keys(JAEGER_TYPES).filter((k) => k !== 'deadline.wire_skew_ms');
    for (const key of expected) expect(keysSeen, key).toContain(key);
    const late = jaegerSpans.find((s) => s.operationName === 'cache.refresh')!;
    expect(late.tags.find((t) => t.key === 'deadline.late')).toEqual({ key: 'deadline.late', type: 'bool', value: true });
  });

  it('deadline-lineage <jaeger-url> --trace ID prints the same tree as from the OTLP file', async () => {
    const [fromJaeger, fromFile] = await Promise.all([
      runCli([jaeger!.urls.query, '--trace', answer.traceId]),
      runCli([file, '--trace', answer.traceId]),
    ]);
    expect(fromJaeger.stderr).toBe('');
    expect(fromJaeger.code).toBe(0);
    expect(fromJaeger.stdout).toMatch(/✗ LATE later_than_parent/);
    expect(fromJaeger.stdout).toBe(fromFile.stdout);
  });

  it('search mode finds the trace through the tag search and marks the late child', async () => {
    const page = join(dir, 'search.html');
    const run = await runCli([jaeger!.urls.query, '--service', 'agent', '--lookback', '1h', '--html', page, '--fail-on-violation']);
    expect(run.stderr).toBe('');
    expect(run.code).toBe(1);
    expect(run.stdout).toContain(`trace ${answer.traceId} (`);
    expect(run.stdout).toMatch(/^ +└─ agent: cache\.refresh .*✗ LATE later_than_parent$/m);
    expect(run.stdout).toMatch(
      /^search: 1 of 1 trace with late spans \(service agent, last 1h; searched deadline\.late=true \(1\), deadline\.outcome=expired \(1\), deadline\.outcome=cancelled \([01]\)\)$/m,
    );
    expect(readFileSync(page, 'utf8')).toMatch(/class="bar [^"]*late"/);
  });

  it('Prometheus, scraping only Jaeger, fires DeadlineLateSpanInTraces for the late child', async () => {
    const api = prometheus!.api.bind(prometheus);
    expect(alertsBefore).toEqual([]);
    // Bounded: 1 s span-metrics flush + 1 s scrape + 1 s evaluation, with room for a loaded machine.
    const firing = await waitFor('the span-metrics alert to fire for the late child', 45_000, async () => {
      const { alerts } = await api<{ alerts: Alert[] }>('/api/v1/alerts');
      return alerts.find(
        (a) => a.labels.alertname === 'DeadlineLateSpanInTraces' && a.state === 'firing' && a.labels.span_name === 'cache.refresh',
      );
    });
    expect(firing.labels).toMatchObject({ service_name: 'agent', deadline_violation: 'later_than_parent', severity: 'warning' });
    // Every alert names a span the services flagged late. On a loaded machine that can be more
    // than the late child (a span ending past its cutoff by more than the processor's grace).
    const late = new Set(
      fileSpans.filter((s) => s.attributes['deadline.late'] === true).map((s) => `${s.service} ${s.name} ${s.attributes['deadline.violation']}`),
    );
    const { alerts } = await api<{ alerts: Alert[] }>('/api/v1/alerts');
    for (const alert of alerts.filter((a) => a.labels.alertname === 'DeadlineLateSpanInTraces')) {
      expect(late).toContain(`${alert.labels.service_name} ${alert.labels.span_name} ${alert.labels.deadline_violation}`);
    }
    // The only target is Jaeger: no service's own /metrics took part.
    const { activeTargets } = await api<{ activeTargets: Target[] }>('/api/v1/targets');
    expect(activeTargets.map((t) => t.scrapeUrl)).toEqual([jaeger!.urls.spanMetrics]);
  }, 60_000);
});
