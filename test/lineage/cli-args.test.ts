import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseCliArgs, parseDuration, UsageError } from '../../src/lineage/args';
import { runCli, type CliRun } from './helpers/run-cli';

// The command line is read with node:util's parseArgs; these cases pin what
// users see for each kind of mistake, through the built CLI as a child process.

function expectUsageError(run: CliRun, pattern: RegExp): void {
  expect(run.code).toBe(2);
  expect(run.stdout).toBe('');
  expect(run.stderr).toMatch(pattern);
  expect(run.stderr).toMatch(/^\(run deadline-lineage --help for usage\)$/m);
  expect(run.stderr).not.toMatch(/\n\s+at /);
}

function expectCleanError(run: CliRun, pattern: RegExp): void {
  expect(run.code).toBe(2);
  expect(run.stdout).toBe('');
  expect(run.stderr).toMatch(pattern);
  expect(run.stderr.trim().split('\n')).toHaveLength(1);
}

describe('the command line', () => {
  it('--help prints usage, every option and the exit codes, and exits 0', async () => {
    for (const flag of ['--help', '-h']) {
      const run = await runCli([flag]);
      expect(run.code).toBe(0);
      expect(run.stderr).toBe('');
      expect(run.stdout).toMatch(/^Usage: deadline-lineage \[options\] <source>$/m);
      for (const option of ['--trace <id>', '--service <name>', '--lookback <time>', '--limit <n>', '--html <file>', '--fail-on-violation', '--timeout <ms>']) {
        expect(run.stdout).toContain(option);
      }
      expect(run.stdout).toContain('Exit codes: 0 done, 1 violation found (with --fail-on-violation), 2 bad input.');
    }
  });

  it('rejects a missing source, an extra argument, an unknown option and a missing value', async () => {
    expectUsageError(await runCli([]), /^error: missing required argument 'source'$/m);
    expectUsageError(await runCli(['a.json', 'b.json']), /^error: too many arguments: expected 1 source but got 2$/m);
    expectUsageError(await runCli(['a.json', '--colour']), /^error: unknown option '--colour'$/m);
    expectUsageError(await runCli(['a.json', '--trace']), /^error: option '-t, --trace <value>' argument missing$/m);
  });

  it('rejects bad numbers and durations, naming the option', async () => {
    expectUsageError(await runCli(['a.json', '--timeout', '0']), /^error: option '--timeout <ms>' argument '0' is invalid/m);
    expectUsageError(await runCli(['http://x', '--service', 's', '--limit', '2.5']), /^error: option '--limit <n>' argument '2\.5' is invalid/m);
    expectUsageError(await runCli(['http://x', '--service', 's', '--lookback', 'an hour']), /^error: option '--lookback <time>' argument 'an hour' is invalid/m);
    expectUsageError(await runCli(['a.json', '--grace', 'soon']), /^error: option '--grace <ms>' argument 'soon' is invalid/m);
    expectUsageError(await runCli(['a.json', '--grace', '1.5']), /^error: option '--grace <ms>' argument '1\.5' is invalid/m);
  });

  it('refuses --service on a file, and --trace together with --service', async () => {
    expectUsageError(await runCli(['traces.json', '--service', 'agent']), /^error: --service searches a Jaeger query URL, not a file$/m);
    expectUsageError(
      await runCli(['http://127.0.0.1:1', '--service', 'agent', '--trace', 'ab']),
      /^error: give either --trace \(one trace\) or --service \(a search\), not both$/m,
    );
  });

  it('parses durations as Jaeger UI spells them', () => {
    expect(parseDuration('90s')).toBe(90_000);
    expect(parseDuration('30m')).toBe(1_800_000);
    expect(parseDuration('2d')).toBe(172_800_000);
    expect(parseDuration('1h ')).toBe(3_600_000);
    for (const bad of ['', '1', 'h', '0h', '-1h', '1.5h', '1w']) expect(parseDuration(bad), bad).toBeUndefined();
    expect(() => parseCliArgs(['x', '--lookback', '0m'])).toThrow(UsageError);
  });

  it('reads --grace in whole ms, zero allowed', () => {
    for (const [value, ms] of [['0', 0], ['1000', 1_000]] as const) {
      const parsed = parseCliArgs(['a.json', '--grace', value]);
      expect('options' in parsed && parsed.options.graceMs).toBe(ms);
    }
  });

  it('gives search defaults: 1 h back, 20 traces, 10 s timeout', () => {
    const parsed = parseCliArgs(['http://j:16686', '-s', 'agent']);
    expect(parsed).toEqual({
      help: false,
      options: {
        source: 'http://j:16686',
        service: 'agent',
        trace: undefined,
        html: undefined,
        failOnViolation: false,
        timeoutMs: 10_000,
        lookbackMs: 3_600_000,
        limit: 20,
        graceMs: 250,
      },
    });
  });
});

describe('search mode against something that is not a working Jaeger', () => {
  let server: Server;
  let base: string;
  const paths: string[] = [];

  beforeAll(async () => {
    server = createServer((req, res) => {
      paths.push(req.url ?? '');
      if (req.url === '/api/services') {
        res.setHeader('content-type', 'application/json');
        res.end(JSON.stringify({ data: ['gateway', 'agent'], total: 2 }));
        return;
      }
      // Any search: a storage failure, as Jaeger reports it.
      res.statusCode = 500;
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ data: null, errors: [{ code: 500, msg: 'storage unavailable' }] }));
    });
    await new Promise<void>((ready) => server.listen(0, '127.0.0.1', ready));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(() => new Promise<void>((done) => server.close(() => done())));

  it('a URL that does not parse', async () => {
    expectCleanError(await runCli(['http://', '--service', 'agent']), /^deadline-lineage: http:\/\/ is not a valid URL$/m);
  });

  it('Jaeger down', async () => {
    const closed = createServer();
    await new Promise<void>((ready) => closed.listen(0, '127.0.0.1', ready));
    const port = (closed.address() as AddressInfo).port;
    await new Promise<void>((done) => closed.close(() => done()));
    expectCleanError(
      await runCli([`http://127.0.0.1:${port}`, '--service', 'agent']),
      new RegExp(`^deadline-lineage: cannot reach Jaeger at http://127\\.0\\.0\\.1:${port}: ECONNREFUSED`, 'm'),
    );
  });

  it('a service Jaeger does not know, listing the ones it does', async () => {
    expectCleanError(
      await runCli([base, '--service', 'billing']),
      /^deadline-lineage: nothing found: Jaeger at http:\/\/127\.0\.0\.1:\d+ has no spans of service "billing"; it knows gateway, agent$/m,
    );
  });

  it("Jaeger's own error, in one line", async () => {
    const before = paths.length;
    expectCleanError(
      await runCli([`${base}/`, '--service', 'agent', '--lookback', '30m', '--limit', '5']),
      /^deadline-lineage: Jaeger at http:\/\/127\.0\.0\.1:\d+ refused the search for deadline\.late=true: HTTP 500: storage unavailable$/m,
    );
    const search = new URL(paths[before + 1], base);
    expect(search.pathname).toBe('/api/traces');
    expect(search.searchParams.get('service')).toBe('agent');
    expect(search.searchParams.get('tags')).toBe('{"deadline.late":"true"}');
    expect(search.searchParams.get('limit')).toBe('5');
    const window = Number(search.searchParams.get('end')) - Number(search.searchParams.get('start'));
    expect(window).toBe(30 * 60 * 1_000_000);
  });

  it('a server that is not Jaeger', async () => {
    const other = createServer((_req, res) => res.end('<html>hello</html>'));
    await new Promise<void>((ready) => other.listen(0, '127.0.0.1', ready));
    const url = `http://127.0.0.1:${(other.address() as AddressInfo).port}`;
    try {
      expectCleanError(
        await runCli([url, '--service', 'agent']),
        /^deadline-lineage: http:\/\/127\.0\.0\.1:\d+ does not look like Jaeger's query service \(GET \/api\/services answered HTTP 200\)$/m,
      );
    } finally {
      await new Promise<void>((done) => other.close(() => done()));
    }
  });
});
