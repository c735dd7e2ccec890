import { execFile, execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePorts, jaegerBinary, jaegerVersion } from '../../scripts/jaeger.mjs';
import { SKIP_JAEGER } from './helpers/jaeger';
import { waitFor } from './helpers/prometheus';

// The commands a person types: .ci/ensure-jaeger.sh, `npm run jaeger`
// (node scripts/jaeger.mjs) and `npm run demo` pointed at that Jaeger.
const ROOT = resolve(__dirname, '../..');

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

function run(cmd: string, args: string[], env: NodeJS.ProcessEnv, timeoutMs = 60_000, cwd = ROOT): Promise<Run> {
  return new Promise((done) => {
    execFile(cmd, args, { cwd, env, timeout: timeoutMs, encoding: 'utf8' }, (err, stdout, stderr) => {
      done({ code: err === null ? 0 : typeof err.code === 'number' ? err.code : -1, stdout, stderr });
    });
  });
}

describe('.ci/ensure-jaeger.sh', () => {
  let cache: string;
  beforeAll(() => {
    cache = mkdtempSync(join(tmpdir(), 'ensure-jaeger-'));
  });
  afterAll(() => rmSync(cache, { recursive: true, force: true }));

  it('fails with a clear message, naming docker-compose, when Go is missing', async () => {
    // An empty cache (nothing to reuse) and a PATH with only the tools the script uses before Go.
    const bin = join(cache, 'bin');
    mkdirSync(bin);
    for (const tool of ['dirname', 'tr', 'cat']) symlinkSync(execFileSync('bash', ['-c', `command -v ${tool}`], { encoding: 'utf8' }).trim(), join(bin, tool));
    // And no Go where the script looks when PATH has none.
    const noGoRoot = join(cache, 'no-go');
    const result = await run('/bin/bash', ['.ci/ensure-jaeger.sh'], { PATH: bin, HOME: cache, OTEL_DEADLINE_CACHE: cache, OTEL_DEADLINE_GO_ROOT: noGoRoot });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain(`ensure-jaeger: Go is not installed, so Jaeger ${jaegerVersion()} cannot be built here.`);
    expect(result.stderr).toContain('docker compose up --build');
  });

  it('uses the Go in OTEL_DEADLINE_GO_ROOT (default /usr/local/go) when PATH has none', async () => {
    const bin = join(cache, 'bin-root');
    mkdirSync(bin);
    for (const tool of ['dirname', 'tr', 'cat', 'cut', 'date', 'rm', 'mkdir']) {
      symlinkSync(execFileSync('bash', ['-c', `command -v ${tool}`], { encoding: 'utf8' }).trim(), join(bin, tool));
    }
    // A stand-in Go: it names itself, then fails the download, so nothing is built.
    const goRoot = join(cache, 'go-root');
    mkdirSync(join(goRoot, 'bin'), { recursive: true });
    writeFileSync(join(goRoot, 'bin', 'go'), '#!/bin/bash\nif [ "$1" = version ]; then echo "go version go0.0-standin linux/amd64"; exit 0; fi\necho "stand-in go: no $1" >&2\nexit 1\n', { mode: 0o755 });
    const result = await run('/bin/bash', ['.ci/ensure-jaeger.sh'], { PATH: bin, HOME: cache, OTEL_DEADLINE_CACHE: join(cache, 'root-cache'), OTEL_DEADLINE_GO_ROOT: goRoot });
    expect(result.stdout).toContain(`ensure-jaeger: building Jaeger ${jaegerVersion()} with go0.0-standin`);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain(`ensure-jaeger: cannot download github.com/jaegertracing/jaeger@${jaegerVersion()}`);
  });

  it.skipIf(SKIP_JAEGER)('reuses the build while the pin is unchanged, and prints its path last', async () => {
    const result = await run('bash', ['.ci/ensure-jaeger.sh'], process.env, 30_000);
    expect(result.code).toBe(0);
    expect(result.stdout).toContain(`ensure-jaeger: Jaeger ${jaegerVersion()} already built`);
    expect(result.stdout.trim().split('\n').pop()).toBe(jaegerBinary());
  });
});

describe('npm run jaeger without a build', () => {
  it('says how to build it, or to use docker-compose, and exits 1', async () => {
    const result = await run(process.execPath, ['scripts/jaeger.mjs'], { ...process.env, JAEGER_BIN: '/nonexistent/jaeger' });
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(/^npm run jaeger: Jaeger v[\d.]+ is not built \(\/nonexistent\/jaeger is missing\): run `bash \.ci\/ensure-jaeger\.sh` \(needs Go\), or run Jaeger with `docker compose up` instead$/m);
  });
});

describe.skipIf(SKIP_JAEGER)('npm run jaeger, then the demo exporting there', () => {
  let dir: string;
  let jaeger: ChildProcess | undefined;
  let stdout = '';
  let exit: Promise<number | null>;
  const ports: Record<string, number> = {};

  /** Starts `npm run jaeger` on ports picked free; resolves true once it printed its addresses, false if it exited. */
  async function startOnFreePorts(): Promise<{ ready: boolean; stderr: string }> {
    const names = ['OTLP_GRPC', 'OTLP_HTTP', 'QUERY_HTTP', 'QUERY_GRPC', 'SPANMETRICS'];
    const free = await freePorts(names.length);
    names.forEach((name, i) => (ports[name] = free[i]));
    const env = { ...process.env };
    for (const [name, port] of Object.entries(ports)) env[`JAEGER_${name}_PORT`] = String(port);
    stdout = '';
    let stderr = '';
    const child = spawn(process.execPath, ['scripts/jaeger.mjs'], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
    jaeger = child;
    child.stdout!.on('data', (chunk: Buffer) => {
      stdout += chunk.toString();
    });
    child.stderr!.on('data', (chunk: Buffer) => {
      stderr = (stderr + chunk.toString()).slice(-8_000);
    });
    exit = new Promise((done) => child.once('exit', (code) => done(code)));
    const closed = new Promise((done) => child.once('close', done));
    // Jaeger's own readiness wait is bounded at 60 s; this one only adds the printing.
    const ready = await waitFor('npm run jaeger to print its addresses, or to exit', 70_000, async () => {
      if (stdout.includes('Ctrl-C stops Jaeger')) return true;
      return child.exitCode !== null || child.signalCode !== null ? false : undefined;
    });
    // Its stderr may still be on its way after the exit: all of it is in once the pipes close.
    if (!ready) await closed;
    return { ready, stderr };
  }

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'npm-run-jaeger-'));
    // The ports are picked free here and bound by Jaeger a moment later; in between a test running beside
    // this one can be handed one of them. Only that failure is retried, with new ports, at most three times.
    for (let attempt = 1; ; attempt++) {
      const { ready, stderr } = await startOnFreePorts();
      if (ready) return;
      if (attempt === 3 || !/address already in use/.test(stderr)) throw new Error(`npm run jaeger exited before it was ready:\n${stderr}`);
    }
  }, 220_000);

  afterAll(async () => {
    if (jaeger?.exitCode === null) jaeger.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  });

  it('prints the UI, query API, OTLP and span-metrics addresses, and says the UI is a placeholder', () => {
    expect(stdout).toContain(`  UI           http://127.0.0.1:${ports.QUERY_HTTP}/`);
    expect(stdout).toContain("(a build from the Go module has no UI assets: this page is Jaeger's placeholder.");
    expect(stdout).toContain(`  query API    http://127.0.0.1:${ports.QUERY_HTTP}/api/traces/<trace id>`);
    expect(stdout).toContain(`  OTLP/HTTP    http://127.0.0.1:${ports.OTLP_HTTP}   OTLP/gRPC 127.0.0.1:${ports.OTLP_GRPC}`);
    expect(stdout).toContain(`  span metrics http://127.0.0.1:${ports.SPANMETRICS}/metrics`);
  });

  it('the demo sends its spans there when asked, and prints the lineage read back from Jaeger', async () => {
    const command = /^ {2}(DEMO_OTLP_ENDPOINT=\S+) (DEMO_JAEGER_URL=\S+) npm run demo$/m.exec(stdout);
    expect(command).not.toBeNull();
    // A roomier budget: this checks where the spans go, not the 1.5 s timings (demo.test.ts does).
    const env: NodeJS.ProcessEnv = { ...process.env, DEMO_BUDGET_MS: '3000' };
    for (const assignment of command!.slice(1)) {
      const [name, value] = assignment.split('=');
      env[name] = value;
    }
    // In a temporary folder: the demo writes demo-lineage.html where it runs.
    const demo = await run(process.execPath, [join(ROOT, 'examples/demo/run.mjs')], env, 90_000, dir);
    expect(demo.stderr).toBe('');
    expect(demo.code).toBe(0);
    expect(demo.stdout).toContain(`spans go to Jaeger at http://127.0.0.1:${ports.OTLP_HTTP}`);
    expect(demo.stdout).toMatch(/^trace [0-9a-f]{32} \(\d+ spans, root budget 3000 ms\)$/m);
    expect(demo.stdout).toMatch(/agent: cache\.refresh .*✗ LATE later_than_parent$/m);
    expect(demo.stdout).toMatch(new RegExp(`^Read from Jaeger: http://127\\.0\\.0\\.1:${ports.QUERY_HTTP}/api/traces/[0-9a-f]{32}$`, 'm'));
  }, 100_000);

  it('Ctrl-C stops Jaeger and the command exits 0', async () => {
    jaeger!.kill('SIGINT');
    expect(await exit).toBe(0);
  }, 20_000);
});
