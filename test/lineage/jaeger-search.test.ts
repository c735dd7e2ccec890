import { execFile, fork, type ChildProcess } from 'node:child_process';
import { resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { traceFromJaeger } from '../../examples/demo/from-jaeger.mjs';
import type { RunningJaeger } from '../../scripts/jaeger.mjs';
import { SKIP_JAEGER, startTestJaeger } from './helpers/jaeger';
import { runCli, type CliRun } from './helpers/run-cli';

// Search mode and cross-process lateness against a real Jaeger, with two real
// processes (helpers/cross-process.mjs): "planner" calls "slow-tool" under a
// 300 ms deadline and gives up at the cutoff; slow-tool has plain OpenTelemetry
// and no deadline support, so it works on for its full 2 s. Neither process can
// see the lateness; only the trace in Jaeger holds both sides.

const SCRIPT = resolve(__dirname, 'helpers/cross-process.mjs');
// The callee's work outlasts the caller's budget by 1.7 s: far beyond the
// 250 ms grace, so a loaded machine cannot make the finding come and go.
const CALLER_BUDGET_MS = 300;
const CALLEE_WORK_MS = 2_000;

function runCaller(env: NodeJS.ProcessEnv): Promise<string> {
  return new Promise((done, fail) => {
    execFile(process.execPath, [SCRIPT, 'caller'], { env, timeout: 30_000, encoding: 'utf8' }, (err, stdout, stderr) => {
      if (err !== null) fail(new Error(`caller failed: ${err.message}\n${stderr}`));
      else done(stdout.trim());
    });
  });
}

function expectCleanError(run: CliRun, pattern: RegExp): void {
  expect(run.code).toBe(2);
  expect(run.stdout).toBe('');
  expect(run.stderr).toMatch(pattern);
  expect(run.stderr.trim().split('\n')).toHaveLength(1);
}

describe.skipIf(SKIP_JAEGER)('deadline-lineage <jaeger-url> --service: search and cross-process lateness in a real Jaeger', () => {
  let jaeger: RunningJaeger | undefined;
  let callee: ChildProcess | undefined;
  let query: string;
  const traceIds: string[] = [];

  beforeAll(async () => {
    jaeger = await startTestJaeger();
    query = jaeger.urls.query;
    const env = { ...process.env, OTEL_EXPORTER_OTLP_ENDPOINT: jaeger.urls.otlpHttp, CALLEE_WORK_MS: String(CALLEE_WORK_MS) };
    callee = fork(SCRIPT, ['callee'], { env, stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    const port = await new Promise<number>((ready, fail) => {
      callee!.once('message', (m: { port: number }) => ready(m.port));
      callee!.once('exit', (code) => fail(new Error(`callee exited with ${code}`)));
    });
    const callerEnv = { ...env, CALLEE_URL: `http://127.0.0.1:${port}/search`, CALLER_BUDGET_MS: String(CALLER_BUDGET_MS) };
    // Two requests, one after the other: two traces.
    traceIds.push(await runCaller(callerEnv));
    traceIds.push(await runCaller(callerEnv));
    // Each trace is complete once slow-tool's server span (ended after its 2 s of work) is
    // stored next to planner's two (the deadline's own span and the CLIENT call).
    for (const id of traceIds) await traceFromJaeger(query, id, { minSpans: 3, timeoutMs: 30_000 });
  }, 90_000);

  afterAll(async () => {
    if (callee?.connected) {
      const exited = new Promise((done) => callee!.once('exit', done));
      callee.send({ type: 'stop' });
      await exited;
    }
    await jaeger?.stop();
  }, 30_000);

  it('finds both traces through the outcome tag and marks the callee that outlived its caller', async () => {
    const run = await runCli([query, '--service', 'planner', '--fail-on-violation']);
    expect(run.stderr).toBe('');
    expect(run.code).toBe(1);
    for (const id of traceIds) expect(run.stdout).toContain(`trace ${id} (3 spans, root budget ${CALLER_BUDGET_MS} ms)`);
    const calleeLines = run.stdout.split('\n').filter((l) => l.includes('slow-tool: POST /search'));
    expect(calleeLines.filter((l) => /^ +└─ slow-tool: POST \/search .*\(no deadline\) {2}✗ LATE remote_ended_after_caller$/.test(l))).toHaveLength(2);
    expect(run.stdout.match(/^ {2}late across processes: slow-tool: POST \/search: remote_ended_after_caller, \+\d+ ms after its caller ended \(caller planner: POST slow-tool\/search\)$/gm)).toHaveLength(2);
    expect(run.stdout).toMatch(/^search: 2 of 2 traces with late spans \(service planner, last 1h; searched .*deadline\.outcome=expired \(2\)/m);
  });

  it('--trace shows the same marks for one trace', async () => {
    const run = await runCli([query, '--trace', traceIds[0]]);
    expect(run.code).toBe(0);
    expect(run.stdout).toMatch(/, 1 late across processes$/m);
  });

  it("respects --limit: Jaeger returns at most that many traces per query, and the output says so", async () => {
    const run = await runCli([query, '--service', 'planner', '--limit', '1']);
    expect(run.code).toBe(0);
    const counts = /searched deadline\.late=true \((\d+)\), deadline\.outcome=expired \((\d+)\), deadline\.outcome=cancelled \((\d+)\)/.exec(run.stdout);
    // Two traces match deadline.outcome=expired; Jaeger returned one. (On a loaded machine the
    // planner's own spans may also be flagged late and matched by the first query: at most one too.)
    expect(counts?.slice(1).map(Number)).toEqual([expect.any(Number), 1, 0]);
    expect(Number(counts![1])).toBeLessThanOrEqual(1);
    const shown = run.stdout.match(/^trace [0-9a-f]{32} /gm) ?? [];
    expect(shown.length).toBeGreaterThanOrEqual(1);
    expect(shown.length).toBeLessThanOrEqual(2);
    expect(run.stdout).toMatch(/^ {2}deadline\.outcome=expired returned --limit 1 traces: older ones may be missing \(raise --limit or shorten --lookback\)$/m);
  });

  it('says "nothing found" for a service whose spans carry no deadline, and exits 0', async () => {
    const run = await runCli([query, '--service', 'slow-tool']);
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    expect(run.stdout).toMatch(/^nothing found: no late spans in 0 traces Jaeger at http:\/\/127\.0\.0\.1:\d+ returned \(service slow-tool, last 1h; /m);
  });

  it('an unknown trace id and an unknown service are one line each, exit 2', async () => {
    expectCleanError(await runCli([query, '--trace', 'feedfacefeedface']), /^deadline-lineage: trace feedfacefeedface not found at /m);
    expectCleanError(await runCli([query, '--service', 'billing']), /^deadline-lineage: nothing found: .* has no spans of service "billing"; it knows /m);
  });

  it('Jaeger gone: one line, exit 2', async () => {
    await jaeger!.stop();
    expectCleanError(await runCli([query, '--service', 'planner']), /^deadline-lineage: cannot reach Jaeger at .*: ECONNREFUSED/m);
  });
});
