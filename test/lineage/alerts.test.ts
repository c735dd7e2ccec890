import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { resolve } from 'node:path';
import { SpanKind, trace } from '@opentelemetry/api';
import { PrometheusExporter } from '@opentelemetry/exporter-prometheus';
import { MeterProvider } from '@opentelemetry/sdk-metrics';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { installOtel, type TestOtel } from '../helpers/otel';
import { deadlineScenario, SCENARIO_PROCESSOR } from './helpers/scenario';
import { withDeadline } from '../../src/open';

const RULES_DIR = resolve(__dirname, '../../deploy/prometheus');
const ALERTS = resolve(RULES_DIR, 'alerts.yml');

function run(cmd: string, args: string[], cwd: string): Promise<{ code: number; out: string }> {
  return new Promise((done) => {
    execFile(cmd, args, { cwd, timeout: 60_000 }, (err, stdout, stderr) => {
      done({ code: err === null ? 0 : typeof err.code === 'number' ? err.code : -1, out: stdout + stderr });
    });
  });
}

describe('alert rules under promtool', () => {
  it('are valid rules', async () => {
    const { code, out } = await run('promtool', ['check', 'rules', 'alerts.yml'], RULES_DIR);
    expect(out).toContain('SUCCESS: 6 rules found');
    expect(code).toBe(0);
  });

  it('pass their unit tests (alerts.test.yml)', async () => {
    const { code, out } = await run('promtool', ['test', 'rules', 'alerts.test.yml'], RULES_DIR);
    expect(out).toContain('SUCCESS');
    expect(out).not.toContain('FAILED');
    expect(code).toBe(0);
  });
});

describe('the names the rules use are the ones the OTel Prometheus exporter gives our metrics', () => {
  let otel: TestOtel;
  let exporter: PrometheusExporter;
  let meterProvider: MeterProvider;
  let exposition: string;

  beforeAll(async () => {
    exporter = new PrometheusExporter({ host: '127.0.0.1', port: 0, preventServerStart: true });
    meterProvider = new MeterProvider({ readers: [exporter] });
    otel = installOtel({ ...SCENARIO_PROCESSOR, meterProvider });
    await deadlineScenario();
    // A hop: a server span started under a deadline.
    await withDeadline({ operation: 'hop', timeoutMs: 1_000, parent: null }, () => {
      trace.getTracer('test').startSpan('GET /hop', { kind: SpanKind.SERVER }).end();
    });
    // Scraped over HTTP through the exporter's own handler, as Prometheus would.
    const server = createServer((req, res) => exporter.getMetricsRequestHandler(req, res));
    await new Promise<void>((ready) => server.listen(0, '127.0.0.1', ready));
    try {
      const response = await fetch(`http://127.0.0.1:${(server.address() as AddressInfo).port}/metrics`);
      exposition = await response.text();
    } finally {
      await new Promise<void>((done) => server.close(() => done()));
    }
  });
  afterAll(async () => {
    await otel.shutdown();
    await meterProvider.shutdown();
  });

  it('exposes every metric and label value the rules select', () => {
    const rules = readFileSync(ALERTS, 'utf8');
    const used = new Set(rules.match(/\bdeadline_[a-z_]+(?=[{[])/g));
    expect([...used].sort()).toEqual([
      'deadline_aborts_total',
      'deadline_remaining_bucket',
      'deadline_remaining_count',
      'deadline_stop_lag_bucket',
      'deadline_violations_total',
    ]);
    for (const name of used) expect(exposition).toMatch(new RegExp(`^${name}\\{`, 'm'));
    expect(exposition).toMatch(/^deadline_violations_total\{[^}]*deadline_violation="later_than_parent"[^}]*\} 1$/m);
    expect(exposition).toMatch(/^deadline_aborts_total\{[^}]*deadline_abort_code="DEADLINE_EXCEEDED"[^}]*\} 1$/m);
    expect(exposition).toMatch(/^deadline_remaining_bucket\{[^}]*span_kind="server"[^}]*le="100"[^}]*\} 0$/m);
    expect(exposition).toMatch(/^deadline_remaining_count\{[^}]*span_kind="server"[^}]*\} 1$/m);
    expect(exposition).toMatch(/^# UNIT deadline_remaining ms$/m);
    // The scenario's slow-dependency stops at its cutoff: one stop-lag observation, by span kind and abort code.
    expect(exposition).toMatch(/^deadline_stop_lag_count\{[^}]*span_kind="internal"[^}]*deadline_abort_code="DEADLINE_EXCEEDED"[^}]*\} 1$/m);
  });
});
