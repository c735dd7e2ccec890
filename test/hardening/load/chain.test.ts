/**
 * The load chain of bench/load.bench.mjs, smaller: 5,000 requests at 500 at a
 * time (after 500 warm-up requests) through driver → A (fetch) → B (undici) →
 * C (node:http), each hop a child process with its own SDK and
 * DeadlineInstrumentation. The bench runs as a child process against the built
 * package (npm test builds first) and prints its figures as JSON; each check
 * below is one of its verdicts, asserted on the figures behind it.
 */
import { execFile } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { beforeAll, describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('../../../', import.meta.url));
const REQUESTS = 5_000;
/** Hard stop inside the bench; the test's own timeout leaves room for start-up and settling. */
const MAX_SECONDS = 60;

interface Lateness {
  checked: number;
  late: number;
  latestMs: number;
}
interface Leak {
  resourcesBefore: Record<string, number>;
  resourcesMiddle: Record<string, number>;
  openSocketsAfter?: Record<string, number>;
  resourcesAfter: Record<string, number>;
  heapBeforeBytes: number;
  heapMiddleBytes: number;
  heapAfterBytes: number;
  resourcesBack: boolean;
  timersBefore: number;
  timersAfter: number;
  /** What each timer left at the end is (deadline or other, due in, source). */
  timerSourcesAfter: string[];
}
interface ChainResult {
  sent: number;
  total: number;
  reachedTarget: boolean;
  processes: Record<string, { sends: Lateness; results: Record<string, number> }>;
  checks: {
    lateSendsIntoLastHop: number;
    lateSendsIntoLastHopDetail: string;
    lateSendsEarlierDetail: string;
    sendsIntoLastHop: number;
    lateSendsEarlier: number;
    lateAtLastHop: number;
    laterThanParentMetric: number;
    laterThanParentSpans: number;
    grewAlongChain: number;
    spans: {
      aborted: number;
      rootSpans: number;
      rootSpansAborted: number;
      driverClientSpans: number;
      fetchCalls: number;
      hops: Record<string, { arrivals: number; serverSpans: number; forwarded: number; clientSpans: number }>;
    };
    leaks: Record<string, Leak>;
    exitedOnTheirOwn: boolean;
  };
}

let result: ChainResult;

beforeAll(async () => {
  const { stdout } = await promisify(execFile)(process.execPath, ['--expose-gc', 'bench/load.bench.mjs'], {
    cwd: root,
    timeout: (MAX_SECONDS + 60) * 1_000,
    maxBuffer: 16 * 2 ** 20,
    env: {
      ...process.env,
      LOAD_REQUESTS: String(REQUESTS),
      LOAD_CONCURRENCY: '500',
      LOAD_WARMUP: '500',
      LOAD_MAX_SECONDS: String(MAX_SECONDS),
      LOAD_JSON: '1',
    },
  }).catch((err: { stdout?: string; stderr?: string }) => {
    // A failed verdict exits 1: the figures are still on stdout, and the checks below say which one.
    if (err.stdout?.trim().startsWith('{')) return { stdout: err.stdout };
    throw new Error(`bench/load.bench.mjs failed: ${err.stderr ?? String(err)}`);
  });
  const line = stdout.trim().split('\n').at(-1)!;
  // LOAD_SAVE_JSON=<file> keeps the raw figures of a run, passed or failed (repeated runs compare them).
  if (process.env.LOAD_SAVE_JSON) writeFileSync(process.env.LOAD_SAVE_JSON, line);
  result = JSON.parse(line) as ChainResult;
}, (MAX_SECONDS + 90) * 1_000);

describe(`${REQUESTS.toLocaleString('en-US')} requests, 500 at a time, through a 3-hop chain`, () => {
  it('sends every request before the hard stop, with a mix that aborts some at every stage', () => {
    expect(result.reachedTarget).toBe(true);
    expect(result.sent).toBe(REQUESTS);
    const outcomes = result.processes.driver.results;
    expect(outcomes['status 200']).toBeGreaterThan(REQUESTS / 2);
    expect(outcomes.DEADLINE_EXCEEDED).toBeGreaterThan(REQUESTS / 10);
    expect(outcomes.CANCELLED).toBeGreaterThan(0);
  });

  it('sends no request to the last hop after its cutoff', () => {
    // Measured at B's socket, where the bytes leave; what C's own event loop saw is in the bench report.
    expect(result.checks.sendsIntoLastHop).toBeGreaterThan(REQUESTS / 2);
    expect(result.checks.lateSendsIntoLastHop, result.checks.lateSendsIntoLastHopDetail).toBe(0);
  });

  it('sends no request to the first or second hop after its cutoff either (global fetch into A, undici into B)', () => {
    expect(result.checks.lateSendsEarlier, result.checks.lateSendsEarlierDetail).toBe(0);
  });

  it('keeps later_than_parent at zero, in the metric and on the spans, and never lets a cutoff grow along the chain', () => {
    expect(result.checks.laterThanParentMetric).toBe(0);
    expect(result.checks.laterThanParentSpans).toBe(0);
    expect(result.checks.grewAlongChain).toBe(0);
  });

  it('records the spans of every request, aborted ones included', () => {
    const { spans } = result.checks;
    expect(spans.rootSpans).toBe(result.total);
    // fetch may retry on a fresh connection when a kept-alive one closes under it: one more span, never fewer.
    expect(spans.driverClientSpans).toBeGreaterThanOrEqual(spans.fetchCalls);
    expect(spans.aborted).toBeGreaterThan(0);
    expect(spans.rootSpansAborted).toBeGreaterThanOrEqual(spans.aborted);
    for (const [hop, h] of Object.entries(spans.hops)) {
      expect([hop, 'server', h.serverSpans]).toEqual([hop, 'server', h.arrivals]);
      expect([hop, 'client', h.clientSpans]).toEqual([hop, 'client', h.forwarded]);
    }
  });

  it('leaves handles, timers and heap at their baseline in every process, which then exits on its own', () => {
    for (const [name, leak] of Object.entries(result.checks.leaks)) {
      // Named in the assertion, so that a failure says which process kept what.
      expect([name, leak.resourcesAfter], `open sockets: ${JSON.stringify(leak.openSocketsAfter)}`).toEqual([name, leak.resourcesBefore]);
      expect([name, leak.resourcesBack], `halfway: ${JSON.stringify(leak.resourcesMiddle)}`).toEqual([name, true]);
      expect(leak.timersAfter, `${name} kept timers: ${leak.timerSourcesAfter.join('; ')}`).toBe(leak.timersBefore);
      // Leaking one deadline per request would add ~6 MiB over the second half's 2,500 requests.
      expect(leak.heapAfterBytes - leak.heapMiddleBytes, name).toBeLessThan(4 * 2 ** 20);
    }
    expect(result.checks.exitedOnTheirOwn).toBe(true);
  });
});
