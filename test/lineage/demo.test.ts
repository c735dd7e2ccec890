import { execFile } from 'node:child_process';
import type { ExecFileOptions } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli } from './helpers/run-cli';

const RUN = resolve(__dirname, '../../examples/demo/run.mjs');

function runDemo(options: ExecFileOptions): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((done) => {
    execFile(process.execPath, [RUN], { timeout: 60_000, ...options, encoding: 'utf8' }, (err, out, errOut) => {
      done({ code: err === null ? 0 : typeof err.code === 'number' ? err.code : -1, stdout: String(out), stderr: String(errOut) });
    });
  });
}

interface OtlpSpan {
  traceId: string;
  name: string;
  startTimeUnixNano: string;
  attributes: { key: string; value: { intValue?: string | number; doubleValue?: number; stringValue?: string } }[];
}

/** The trace the demo printed (`trace <id> (...)`). */
function traceIdOf(stdout: string): string {
  return /^trace ([0-9a-f]{32}) /m.exec(stdout)?.[1] ?? '';
}

/** The span called `name` in trace `traceId` of an OTLP/JSON lines file. */
function spanNamed(file: string, traceId: string, name: string): OtlpSpan {
  const spans = readFileSync(file, 'utf8')
    .split('\n')
    .filter((line) => line.trim() !== '')
    .flatMap((line) => (JSON.parse(line) as { resourceSpans: { scopeSpans: { spans: OtlpSpan[] }[] }[] }).resourceSpans)
    .flatMap((resource) => resource.scopeSpans.flatMap((scope) => scope.spans));
  const found = spans.filter((span) => span.traceId === traceId && span.name === name);
  expect(found, `${name} in trace ${traceId}`).toHaveLength(1);
  return found[0];
}

function attributeOf(span: OtlpSpan, key: string): string | number | undefined {
  const value = span.attributes.find((attribute) => attribute.key === key)?.value;
  return value?.intValue ?? value?.doubleValue ?? value?.stringValue;
}

describe('npm run demo (node examples/demo/run.mjs on the built package)', () => {
  let dir: string;
  let code: number;
  let stdout: string;
  let stderr: string;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'lineage-demo-'));
    ({ code, stdout, stderr } = await runDemo({ cwd: dir }));
  }, 70_000);
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('exits 0 without complaint, with the partial answer', () => {
    expect(stderr).toBe('');
    expect(code).toBe(0);
    expect(stdout).toContain(
      'Answer: partial (plan: ok, summarize: queued, search: DEADLINE_EXCEEDED, read: INSUFFICIENT_BUDGET, cache: refreshed late)',
    );
  });

  it('prints a live line per finished hop, the queued job with its dwell', () => {
    expect(stdout).toMatch(/^ {2}✓ tools: POST \/plan .*completed/m);
    expect(stdout).toMatch(/^ {2}✗ tools: POST \/search .*expired DEADLINE_EXCEEDED/m);
    expect(stdout).toMatch(/^ {2}✓ worker: summarize .*completed .*, \d+ ms queued$/m);
    expect(stdout).toMatch(/^ {2}✗ agent: cache\.refresh .*completed LATE/m);
    expect(stdout).toMatch(/^ {2}✓ gateway: POST \/ask .*completed +remaining 1\d{3} → \d+ ms$/m);
  });

  it('prints the lineage tree: clamped children, the abort at the cutoff, the refused retry, the late child', () => {
    const all = stdout.split('\n');
    const lines = all.slice(all.findIndex((l) => l.startsWith('trace ')));
    const line = (label: string) => lines.find((l) => l.includes(label)) ?? '';
    const cutoff = (l: string) => Number(/ \+(\d+) ms /.exec(l)?.[1]);
    expect(stdout).toMatch(/^trace [0-9a-f]{32} \(19 spans, root budget 1500 ms\)$/m);
    const rootLine = line('gateway: POST /ask');
    const root = cutoff(rootLine);
    // The CUTOFF column counts from the root span's start: the root's own cutoff is its deadline.at_ms less
    // its start time, and REMAINING's first number is its deadline.remaining_ms, both as the span file has
    // them. The two are not compared with each other: they come from two clocks read at different instants
    // (the gateway reads the wall clock, then the monotonic one, when it opens the deadline; the SDK stamps
    // the span's start, then the processor reads the budget), and a pause between two reads on a loaded
    // machine moves one and not the other (6 ms seen in CI). The cutoff is never later than the budget.
    const rootSpan = spanNamed(join(dir, 'demo-traces.json'), traceIdOf(stdout), 'POST /ask');
    const startMs = Number(BigInt(rootSpan.startTimeUnixNano) / 1_000n) / 1000;
    expect(root).toBe(Math.round(Number(attributeOf(rootSpan, 'deadline.at_ms')) - startMs));
    expect(Number(/ (\d+) → \d+ ms /.exec(rootLine)?.[1])).toBe(Number(attributeOf(rootSpan, 'deadline.remaining_ms')));
    expect(root).toBeLessThanOrEqual(1_501);
    // `plan` asked for 10 s and `worker: summarize` came through a queue: both keep the request's
    // cutoff (to the ms or two that whole-ms wire values and epoch rounding allow per hop).
    for (const clamped of ['agent: plan ', 'tools: POST /plan', 'worker: summarize']) {
      expect(Math.abs(cutoff(line(clamped)) - root), clamped).toBeLessThanOrEqual(3);
    }
    // Aborted at their cutoff: each with the stop lag it took to stop.
    expect(line('agent: search ')).toMatch(/→ 0 ms .*expired {2}DEADLINE_EXCEEDED {2}stop lag \d+ ms$/);
    expect(line('tools: POST /search')).toMatch(/expired {2}DEADLINE_EXCEEDED {2}stop lag \d+ ms$/);
    expect(line('agent: read ')).toMatch(/INSUFFICIENT_BUDGET$/);
    expect(line('agent: cache.refresh')).toMatch(/^ +└─ .*✗ LATE later_than_parent$/);
    expect(cutoff(line('agent: cache.refresh'))).toBeGreaterThan(root + 3_000);
    expect(stdout).toMatch(/^summary: 1 late child, [1-9]\d* exceeded, [1-9]\d* aborted, 1 refused$/m);
    expect(stdout).toMatch(/^ {2}late: agent: cache\.refresh: later_than_parent \(cutoff \+\d+ ms, parent's \+\d+ ms\)$/m);
  });

  it('prints what the sample in docs/demo.md shows: the same spans with the same outcomes', () => {
    const docs = readFileSync(resolve(__dirname, '../../docs/demo.md'), 'utf8');
    const sample = /<!-- demo-sample[^>]*-->\n```text\n([\s\S]*?)```/.exec(docs)?.[1] ?? '';
    // A span line: tree drawing, "service: operation", cutoff, remaining, spent, then the outcome column.
    const span = /^[\s│├└─]*(.+?) +[+-]\d+ ms +\d+ → \d+ ms +\d+ ms {2}(.+)$/;
    // The stop lag is a timing, not an outcome: the sample need not match it.
    const outcomes = (text: string) =>
      new Map(
        text
          .split('\n')
          .map((l) => l.replace(/ {2}stop lag \d+ ms/, ''))
          .flatMap((l) => (span.test(l) ? [span.exec(l)!.slice(1, 3) as [string, string]] : [])),
      );
    const shown = outcomes(sample);
    const real = outcomes(stdout);
    expect(shown.size).toBeGreaterThanOrEqual(6);
    for (const [name, outcome] of shown) expect([name, real.get(name)]).toEqual([name, outcome]);
    const summary = (text: string) => /^summary: .*$/m.exec(text)?.[0].replace(/\d+/g, 'N');
    expect(summary(sample)).toBe(summary(stdout));
  });

  it('writes demo-lineage.html and the OTLP/JSON file, which the CLI gate rejects', async () => {
    expect(readFileSync(join(dir, 'demo-lineage.html'), 'utf8')).toMatch(/class="bar [^"]*late"/);
    const traces = join(dir, 'demo-traces.json');
    expect(existsSync(traces)).toBe(true);
    const gate = await runCli([traces, '--fail-on-violation']);
    expect(gate.code).toBe(1);
    expect(gate.stdout).toContain('agent: cache.refresh');
  });

  it('prints a re-run hint with npx deadline-lineage, which runs from the clone', async () => {
    const hint = /^Again from the file: npx deadline-lineage (\S+) --trace ([0-9a-f]{32}) --fail-on-violation$/m.exec(stdout);
    expect(hint, stdout).not.toBeNull();
    // As npm run demo runs it: from the repository's root, where npx finds the package's own bin.
    const rerun = await new Promise<{ code: number; out: string }>((resolvePromise) => {
      execFile('npx', ['--no-install', 'deadline-lineage', join(dir, hint![1]), '--trace', hint![2], '--fail-on-violation'], { cwd: resolve(__dirname, '../..'), timeout: 60_000, encoding: 'utf8' }, (err, out) => {
        resolvePromise({ code: err === null ? 0 : typeof err.code === 'number' ? err.code : -1, out });
      });
    });
    expect(rerun.code, rerun.out).toBe(1);
    expect(rerun.out).toContain(`trace ${hint![2]}`);
  }, 60_000);
});

describe('the demo under `node --import otel-deadline/register` (the docker-compose command line, on loopback)', () => {
  let dir: string;
  let run: { code: number; stdout: string; stderr: string };

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'lineage-demo-register-'));
    // A roomier budget: this run checks the register command line, not the 1.5 s timings.
    run = await runDemo({ cwd: dir, env: { ...process.env, DEMO_TELEMETRY: 'register', DEMO_BUDGET_MS: '3000' } });
  }, 70_000);
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it("runs with the package's own SDK setup and transport instrumentation, and still flags the late child", () => {
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    const all = run.stdout.split('\n');
    const tree = all.slice(all.findIndex((l) => l.startsWith('trace ')));
    for (const service of ['gateway', 'agent', 'tools', 'worker']) {
      expect(tree.some((l) => l.includes(`${service}: `)), service).toBe(true);
    }
    expect(tree.find((l) => l.includes('agent: cache.refresh'))).toMatch(/✗ LATE later_than_parent$/);
    expect(tree.find((l) => l.includes('worker: summarize'))).toMatch(/completed$/);
  });
});
