import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDemo, type RunningDemo } from '../../examples/demo/start.mjs';
import { startPrometheus, waitFor, type TestPrometheus } from './helpers/prometheus';

const ALERTS = resolve(__dirname, '../../deploy/prometheus/alerts.yml');

interface Alert {
  labels: Record<string, string>;
  state: string;
}
interface Target {
  labels: Record<string, string>;
  health: string;
}

describe('the late-child alert, end to end: demo services → OTel Prometheus exporter → real Prometheus', () => {
  let dir: string;
  let demo: RunningDemo | undefined;
  let prometheus: TestPrometheus | undefined;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'lineage-alerts-'));
    demo = await startDemo({ outDir: dir });
    const targets = Object.fromEntries(Object.values(demo.services).map((s) => [s.name, `127.0.0.1:${s.port}`]));
    prometheus = await startPrometheus({ dir, ruleFiles: [ALERTS], targets });
  }, 60_000);

  afterAll(async () => {
    await prometheus?.stop();
    await demo?.stop();
    rmSync(dir, { recursive: true, force: true });
  }, 30_000);

  it('fires DeadlineChildLaterThanParent for the agent after the late child, and not before', async () => {
    const api = prometheus!.api.bind(prometheus);
    // Every service is scraped before the request is sent.
    await waitFor('all four targets up', 30_000, async () => {
      const { activeTargets } = await api<{ activeTargets: Target[] }>('/api/v1/targets');
      return activeTargets.length === 4 && activeTargets.every((t) => t.health === 'up') ? true : undefined;
    });
    // Rules have been evaluated at least once and nothing fires yet.
    await waitFor('a rule evaluation', 15_000, async () => {
      const { groups } = await api<{ groups: { lastEvaluation: string }[] }>('/api/v1/rules');
      return groups.length > 0 && !groups[0].lastEvaluation.startsWith('0001') ? true : undefined;
    });
    const before = await api<{ alerts: Alert[] }>('/api/v1/alerts');
    expect(before.alerts.filter((a) => a.labels.alertname === 'DeadlineChildLaterThanParent')).toEqual([]);

    const answer = await demo!.ask();
    expect(answer.status).toBe(200);
    expect(answer.steps?.cache).toBe('refreshed late');

    const firing = await waitFor('the late-child alert to fire', 30_000, async () => {
      const { alerts } = await api<{ alerts: Alert[] }>('/api/v1/alerts');
      return alerts.find((a) => a.labels.alertname === 'DeadlineChildLaterThanParent' && a.state === 'firing');
    });
    expect(firing.labels).toMatchObject({ job: 'agent', deadline_violation: 'later_than_parent', severity: 'warning' });

    // Only the agent, where the late child was opened, counted the violation.
    const { result } = await api<{ result: { metric: Record<string, string>; value: [number, string] }[] }>(
      `/api/v1/query?query=${encodeURIComponent('deadline_violations_total{deadline_violation="later_than_parent"}')}`,
    );
    expect(result.map((r) => [r.metric.job, r.value[1]])).toEqual([['agent', '1']]);
  }, 90_000);
});
