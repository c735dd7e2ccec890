import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli } from './helpers/run-cli';

const RUN = resolve(__dirname, '../../examples/demo/run.mjs');

describe('npm run demo (node examples/demo/run.mjs on the built package)', () => {
  let dir: string;
  let code: number;
  let stdout: string;
  let stderr: string;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'lineage-demo-'));
    ({ code, stdout, stderr } = await new Promise<{ code: number; stdout: string; stderr: string }>((done) => {
      execFile(process.execPath, [RUN], { cwd: dir, timeout: 60_000, encoding: 'utf8' }, (err, out, errOut) => {
        done({ code: err === null ? 0 : typeof err.code === 'number' ? err.code : -1, stdout: out, stderr: errOut });
      });
    }));
  }, 70_000);
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('exits 0 without complaint', () => {
    expect(stderr).toBe('');
    expect(code).toBe(0);
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
    const root = cutoff(line('gateway: POST /ask'));
    expect(root).toBeGreaterThanOrEqual(1_495);
    expect(root).toBeLessThanOrEqual(1_501);
    // `plan` asked for 10 s and `worker: summarize` came through a queue: both keep the request's cutoff.
    for (const clamped of ['agent: plan ', 'tools: POST /plan', 'worker: summarize']) {
      expect(Math.abs(cutoff(line(clamped)) - root), clamped).toBeLessThanOrEqual(1);
    }
    expect(line('agent: search ')).toMatch(/→ 0 ms .*expired {2}DEADLINE_EXCEEDED$/);
    expect(line('tools: POST /search')).toMatch(/expired {2}DEADLINE_EXCEEDED$/);
    expect(line('agent: read ')).toMatch(/INSUFFICIENT_BUDGET$/);
    expect(line('agent: cache.refresh')).toMatch(/^ +└─ .*✗ LATE later_than_parent$/);
    expect(cutoff(line('agent: cache.refresh'))).toBeGreaterThan(root + 3_000);
    expect(stdout).toMatch(/^summary: 1 late child, [1-9]\d* exceeded, [1-9]\d* aborted, 1 refused$/m);
    expect(stdout).toMatch(/^ {2}late: agent: cache\.refresh: later_than_parent \(cutoff \+\d+ ms, parent's \+\d+ ms\)$/m);
  });

  it('writes demo-lineage.html and the OTLP/JSON file, which the CLI gate rejects', async () => {
    expect(readFileSync(join(dir, 'demo-lineage.html'), 'utf8')).toMatch(/class="bar [^"]*late"/);
    const traces = join(dir, 'demo-traces.json');
    expect(existsSync(traces)).toBe(true);
    const gate = await runCli([traces, '--fail-on-violation']);
    expect(gate.code).toBe(1);
    expect(gate.stdout).toContain('agent: cache.refresh');
  });
});
