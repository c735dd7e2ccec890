import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { installOtel, type TestOtel } from '../helpers/otel';
import { deadlineScenario, exportAsOtlpJson, SCENARIO_PROCESSOR } from './helpers/scenario';
import { otlpToJaeger, type OtlpJson } from './helpers/otlp-to-jaeger';
import { runCli, type CliRun } from './helpers/run-cli';

const JAEGER_FIXTURE = resolve(__dirname, '../../../shared/fixtures/jaeger/otlp2jaeger-out.json');

let otel: TestOtel;
let dir: string;
let otlpFile: string;
let jaegerFile: string;
let jaegerAnswer: ReturnType<typeof otlpToJaeger>;
let traceIds: string[];

function expectCleanError(run: CliRun, pattern: RegExp): void {
  expect(run.code).toBe(2);
  expect(run.stdout).toBe('');
  expect(run.stderr).toMatch(pattern);
  expect(run.stderr.trim().split('\n')).toHaveLength(1);
  expect(run.stderr).not.toMatch(/\n\s+at /);
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'lineage-cli-'));
  otel = installOtel(SCENARIO_PROCESSOR);
  // Two requests: two traces in one file.
  await deadlineScenario();
  await deadlineScenario();
  otlpFile = join(dir, 'traces.jsonl');
  const requests = await exportAsOtlpJson(otel.spans(), otlpFile);
  jaegerAnswer = otlpToJaeger(requests as OtlpJson[]);
  traceIds = jaegerAnswer.data.map((t) => t.traceID);
  jaegerFile = join(dir, 'jaeger.json');
  writeFileSync(jaegerFile, JSON.stringify({ ...jaegerAnswer, data: [jaegerAnswer.data[0]] }));
});

afterAll(async () => {
  await otel.shutdown();
  rmSync(dir, { recursive: true, force: true });
});

describe('reading files', () => {
  it('prints the span tree and summary of an OTLP/JSON lines file, one trace after the other', async () => {
    const run = await runCli([otlpFile]);
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    expect(run.stdout.match(/^trace [0-9a-f]{32} \(5 spans, root budget 600 ms\)$/gm)).toHaveLength(2);
    for (const id of traceIds) expect(run.stdout).toContain(`trace ${id}`);
    const lines = run.stdout.split('\n');
    const line = (op: string) => lines.find((l) => l.includes(`: ${op} `)) ?? '';
    expect(line('request')).toMatch(/^\S.*: request\s+\+\d+ ms\s+\d+ → \d+ ms\s+\d+ ms\s+completed$/);
    // The clamped child shows its parent's cutoff, not the 60 s it asked for.
    const cutoff = (l: string) => Number(/\+(\d+) ms/.exec(l)?.[1]);
    expect(Math.abs(cutoff(line('clamped')) - cutoff(line('request')))).toBeLessThanOrEqual(1);
    expect(line('clamped')).toMatch(/^├─ /);
    expect(line('slow-dependency')).toMatch(/\d+ → 0 ms\s+\d+ ms\s+expired\s+DEADLINE_EXCEEDED\s+stop lag \d+ ms$/);
    expect(line('retry')).toMatch(/not_started$/);
    expect(line('late-child')).toMatch(/^└─ .*completed\s+✗ LATE later_than_parent$/);
    expect(cutoff(line('late-child'))).toBeGreaterThan(4_000);
    expect(run.stdout.match(/^summary: 1 late child, 1 exceeded, 1 aborted, 1 refused$/gm)).toHaveLength(2);
    expect(run.stdout).toMatch(/^ {2}late: .*late-child: later_than_parent \(cutoff \+\d+ ms, parent's \+\d+ ms\)$/m);
  });

  it('--trace picks one trace', async () => {
    const run = await runCli([otlpFile, '--trace', traceIds[1].toUpperCase()]);
    expect(run.code).toBe(0);
    expect(run.stdout).toContain(`trace ${traceIds[1]}`);
    expect(run.stdout).not.toContain(traceIds[0]);
  });

  it('reads a Jaeger API answer and prints the same tree as from the OTLP file', async () => {
    const [fromJaeger, fromOtlp] = await Promise.all([runCli([jaegerFile]), runCli([otlpFile, '--trace', traceIds[0]])]);
    expect(fromJaeger.code).toBe(0);
    expect(fromJaeger.stdout).toBe(fromOtlp.stdout);
  });

  it("reads Jaeger's own fixture (spans without deadlines)", async () => {
    const run = await runCli([JAEGER_FIXTURE, '--fail-on-violation']);
    expect(run.code).toBe(0);
    expect(run.stdout).toMatch(/telemetrygen: okey-dokey-0 .*\(no deadline\)/);
    expect(run.stdout).toContain('summary: 0 late children, 0 exceeded, 0 aborted, 0 refused');
  });

  it('--fail-on-violation exits 1 when a span was flagged late, after printing the tree', async () => {
    const run = await runCli([jaegerFile, '--fail-on-violation']);
    expect(run.code).toBe(1);
    expect(run.stdout).toContain('✗ LATE later_than_parent');
  });

  it('--html writes a self-contained page', async () => {
    const page = join(dir, 'page.html');
    const run = await runCli([otlpFile, '--html', page]);
    expect(run.code).toBe(0);
    expect(run.stdout).toContain(`timeline written to ${page}`);
    const html = readFileSync(page, 'utf8');
    expect(html.match(/<svg /g)).toHaveLength(2);
    expect(html.match(/class="bar [^"]*late"/g)).toHaveLength(2);
    // Nothing is fetched: no script, no external reference of any kind.
    expect(html).not.toMatch(/<script|<link|<img|src=|href=|url\(|@import/i);
  });
});

describe('reading from a Jaeger query URL', () => {
  let server: Server;
  let base: string;
  const paths: string[] = [];

  beforeAll(async () => {
    server = createServer((req, res) => {
      paths.push(req.url ?? '');
      const id = /^\/api\/traces\/([0-9a-f]+)$/.exec(req.url ?? '')?.[1];
      const trace = jaegerAnswer.data.find((t) => t.traceID === id);
      res.setHeader('content-type', 'application/json');
      if (trace === undefined) {
        res.statusCode = 404;
        res.end(JSON.stringify({ data: null, total: 0, limit: 0, offset: 0, errors: [{ code: 404, msg: 'trace not found' }] }));
        return;
      }
      res.end(JSON.stringify({ ...jaegerAnswer, data: [trace] }));
    });
    await new Promise<void>((ready) => server.listen(0, '127.0.0.1', ready));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(() => new Promise<void>((done) => server.close(() => done())));

  it('GETs /api/traces/{id} and prints that trace', async () => {
    const before = paths.length;
    const run = await runCli([`${base}/`, '--trace', traceIds[1]]);
    expect(run.code).toBe(0);
    expect(paths.slice(before)).toEqual([`/api/traces/${traceIds[1]}`]);
    expect(run.stdout).toContain(`trace ${traceIds[1]}`);
    expect(run.stdout).toContain('✗ LATE later_than_parent');
  });

  it('says so when Jaeger does not know the trace id', async () => {
    expectCleanError(
      await runCli([base, '--trace', 'abcdef0123456789']),
      /^deadline-lineage: trace abcdef0123456789 not found at http:\/\/127\.0\.0\.1:\d+ \(trace not found\)$/m,
    );
  });

  it('needs a trace id with a URL', async () => {
    expectCleanError(await runCli([base]), /^deadline-lineage: a Jaeger URL needs a trace id \(--trace <id>\) or a service to search \(--service <name>\)$/m);
  });

  it('reports an unreachable Jaeger in one line', async () => {
    const closed = createServer();
    await new Promise<void>((ready) => closed.listen(0, '127.0.0.1', ready));
    const port = (closed.address() as AddressInfo).port;
    await new Promise<void>((done) => closed.close(() => done()));
    expectCleanError(
      await runCli([`http://127.0.0.1:${port}`, '--trace', traceIds[0]]),
      new RegExp(`^deadline-lineage: cannot reach Jaeger at http://127\\.0\\.0\\.1:${port}: ECONNREFUSED`, 'm'),
    );
  });
});

describe('bad input never ends in a stack trace', () => {
  it('a missing file', async () => {
    expectCleanError(await runCli([join(dir, 'nope.json')]), /^deadline-lineage: cannot read .*nope\.json: no such file$/m);
  });

  it('bad JSON', async () => {
    const bad = join(dir, 'bad.json');
    writeFileSync(bad, '{"data": [\n  {"traceID": \n');
    expectCleanError(await runCli([bad]), /^deadline-lineage: .*bad\.json is not valid JSON: /m);
  });

  it('a bad line in JSON lines', async () => {
    const bad = join(dir, 'bad.jsonl');
    writeFileSync(bad, `${readFileSync(otlpFile, 'utf8').split('\n')[0]}\n{"resourceSpans": [\n`);
    expectCleanError(await runCli([bad]), /^deadline-lineage: .*bad\.jsonl is not valid JSON: line 2: /m);
  });

  it('JSON of another kind', async () => {
    const other = join(dir, 'other.json');
    writeFileSync(other, '{"hello": "world"}');
    expectCleanError(await runCli([other]), /is neither a Jaeger API answer .* nor OTLP\/JSON/);
  });

  it('an unknown trace id, naming the ones present', async () => {
    expectCleanError(
      await runCli([otlpFile, '--trace', 'feedfacefeedface']),
      new RegExp(`^deadline-lineage: trace feedfacefeedface is not in .*; it holds ${traceIds.join(', ')}$`, 'm'),
    );
  });

  it('an html path that cannot be written', async () => {
    expectCleanError(await runCli([otlpFile, '--html', join(dir, 'no/such/dir/page.html')]), /cannot write .*: ENOENT$/m);
  });

  it('a usage error', async () => {
    const run = await runCli([otlpFile, '--timeout', 'soon']);
    expect(run.code).toBe(2);
    expect(run.stderr).toMatch(/option '--timeout <ms>' argument 'soon' is invalid/);
  });
});
