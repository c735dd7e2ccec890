import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

// docker-compose.yml is validated here, not run: there is no Docker engine in CI.
const ROOT = resolve(__dirname, '../..');
const DEMO_SERVICES = ['gateway', 'agent', 'tools', 'worker'];

function run(cmd: string, args: string[], cwd: string): Promise<{ code: number; out: string; err: string }> {
  return new Promise((done) => {
    execFile(cmd, args, { cwd, timeout: 60_000 }, (error, stdout, stderr) => {
      done({ code: error === null ? 0 : typeof error.code === 'number' ? error.code : -1, out: stdout, err: stderr });
    });
  });
}

/** One service's block of `docker-compose config` output (keys are normalised and sorted there). */
function block(config: string, service: string): string {
  const match = new RegExp(`^ {2}${service}:\\n((?: {4}.*\\n|\\s*- .*\\n)*)`, 'm').exec(config);
  if (match === null) throw new Error(`no service ${service} in the normalised config`);
  return match[1];
}

describe('docker-compose.yml', () => {
  let config: string;

  beforeAll(async () => {
    const { code, out, err } = await run('docker-compose', ['-f', 'docker-compose.yml', 'config'], ROOT);
    expect(code, err).toBe(0);
    config = out;
  }, 60_000);

  it('is valid for docker-compose and has Jaeger, Prometheus and the four demo services', async () => {
    const { out } = await run('docker-compose', ['-f', 'docker-compose.yml', 'config', '--services'], ROOT);
    expect(out.trim().split('\n').sort()).toEqual(['agent', 'gateway', 'jaeger', 'prometheus', 'tools', 'worker']);
  });

  it('runs Jaeger v2 all-in-one with OTLP/HTTP on 4318, the UI on 16686 and span metrics on 8889', () => {
    const jaeger = block(config, 'jaeger');
    expect(jaeger).toMatch(/image: jaegertracing\/jaeger:2\.\d+\.\d+/);
    expect(jaeger).toMatch(/- published: 16686\n\s+target: 16686/);
    expect(jaeger).toMatch(/- published: 4318\n\s+target: 4318/);
    expect(jaeger).toMatch(/- published: 8889\n\s+target: 8889/);
  });

  it("starts Jaeger with the repository's one Jaeger config, listening beyond loopback", () => {
    const jaeger = block(config, 'jaeger');
    expect(jaeger).toContain(`${join(ROOT, 'deploy/jaeger/config.yaml')}:/etc/jaeger/config.yaml:ro`);
    expect(jaeger).toMatch(/command:\n\s+- --config\n\s+- \/etc\/jaeger\/config\.yaml/);
    expect(jaeger).toContain('JAEGER_LISTEN_HOST: 0.0.0.0');
  });

  it('loads our alert rules into Prometheus', () => {
    const prometheus = block(config, 'prometheus');
    expect(prometheus).toContain(`${join(ROOT, 'deploy/prometheus/alerts.yml')}:/etc/prometheus/alerts.yml:ro`);
    expect(prometheus).toContain(`${join(ROOT, 'deploy/prometheus/prometheus.yml')}:/etc/prometheus/prometheus.yml:ro`);
  });

  it('builds each demo service from this repository and starts it with the register entry, exporting to Jaeger', () => {
    expect(existsSync(join(ROOT, 'Dockerfile'))).toBe(true);
    for (const name of DEMO_SERVICES) {
      const service = block(config, name);
      expect(service, name).toContain(`context: ${ROOT}`);
      expect(service, name).toMatch(/command:\n\s+- node\n\s+- --import\n\s+- otel-deadline\/register\n\s+- examples\/demo\/service\.mjs/);
      expect(service, name).toContain(`DEMO_SERVICE: ${name}`);
      expect(service, name).toContain(`OTEL_SERVICE_NAME: ${name}`);
      expect(service, name).toContain('OTEL_EXPORTER_OTLP_ENDPOINT: http://jaeger:4318');
      expect(service, name).toContain('OTEL_EXPORTER_OTLP_PROTOCOL: http/json');
    }
  });
});

describe('deploy/prometheus/prometheus.yml', () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'lineage-promconf-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('is a valid Prometheus config once the rules are where the compose file mounts them', async () => {
    const original = readFileSync(join(ROOT, 'deploy/prometheus/prometheus.yml'), 'utf8');
    expect(original).toContain('- /etc/prometheus/alerts.yml');
    writeFileSync(join(dir, 'prometheus.yml'), original.replace('/etc/prometheus/alerts.yml', join(ROOT, 'deploy/prometheus/alerts.yml')));
    const { code, out, err } = await run('promtool', ['check', 'config', 'prometheus.yml'], dir);
    expect(`${out}${err}`).toContain('SUCCESS: 6 rules found');
    expect(code).toBe(0);
    for (const name of DEMO_SERVICES) expect(original).toContain(`targets: ["${name}:8080"]`);
    // Jaeger's span metrics, on the port deploy/jaeger/config.yaml gives its Prometheus exporter.
    expect(original).toContain('targets: ["jaeger:8889"]');
    expect(readFileSync(join(ROOT, 'deploy/jaeger/config.yaml'), 'utf8')).toContain('${env:JAEGER_SPANMETRICS_PORT:-8889}');
  });
});
