// The load chain: this process drives requests with global fetch into A; A
// calls B with undici, B calls C with node:http. A, B and C are child
// processes (hop.mjs), each a node:http server with its own OpenTelemetry SDK
// and DeadlineInstrumentation, as separate services would be. Separate
// processes keep the last hop's clock reads honest: a request is judged late
// by C's own event loop, not by one that is also busy driving the load.
//
// Requests get mixed budgets from a seeded generator (SCENARIOS); some expire
// at A, around B's call to C, or while C holds them; some are cancelled by the
// caller. runChain() returns every figure and check; bench/load.bench.mjs
// prints them, test/hardening/load/chain.test.ts asserts them.
import { fork } from 'node:child_process';
import { once } from 'node:events';
import { withDeadline } from '../../../dist/esm/index.mjs';
import { activeResources, sameCounts, settleResources, snapshot, trackTimers } from './resources.mjs';
import { startTelemetry } from './telemetry.mjs';
import { describeSends, resetSends, sends, watchSends } from './wire-probe.mjs';

/**
 * The mix. `budget` is [min, max] ms; `holds` are per-hop query values (see
 * hop.mjs); `around` gives B a hold within ±around ms of its remaining time, so
 * B's call to C starts just before or just after the cutoff.
 */
export const SCENARIOS = [
  // 2,000 at a time through four processes on two cores queue for seconds: these budgets leave room for that.
  { name: 'completes', weight: 60, budget: [10_000, 15_000] },
  { name: 'slow hops, in time', weight: 5, budget: [10_000, 15_000], holds: { a: 10, b: 10, c: 10 } },
  { name: 'expires while C holds it', weight: 10, budget: [100, 400], holds: { c: 5_000 } },
  { name: "expires around B's call to C", weight: 10, budget: [100, 300], around: 20 },
  { name: 'expires at A', weight: 5, budget: [60, 200], holds: { a: 'r+5' } },
  { name: 'budget gone on arrival', weight: 5, budget: [0, 3] },
  { name: 'cancelled by the caller', weight: 5, budget: [10_000, 10_000], holds: { c: 5_000 }, cancelAfter: [20, 300] },
];

/** mulberry32: a small seeded generator, so a run can be repeated request for request. */
function generator(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}

function planner(seed) {
  const random = generator(seed);
  const total = SCENARIOS.reduce((sum, s) => sum + s.weight, 0);
  const between = ([min, max]) => Math.round(min + random() * (max - min));
  return () => {
    let pick = random() * total;
    const scenario = SCENARIOS.find((s) => (pick -= s.weight) < 0) ?? SCENARIOS[0];
    const query = new URLSearchParams({ s: String(SCENARIOS.indexOf(scenario)) });
    for (const [hop, value] of Object.entries(scenario.holds ?? {})) query.set(hop, String(value));
    if (scenario.around !== undefined) query.set('b', `r${between([-scenario.around, scenario.around])}`);
    return {
      budgetMs: between(scenario.budget),
      path: `/load?${query}`,
      cancelAfterMs: scenario.cancelAfter === undefined ? undefined : between(scenario.cancelAfter),
    };
  };
}

async function startHop(name, transport, next) {
  const child = fork(new URL('./hop.mjs', import.meta.url), {
    execArgv: ['--expose-gc'],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const hop = {
    name,
    child,
    url: '',
    ask(message) {
      const reply = once(child, 'message').then(([value]) => value);
      child.send(message);
      return reply;
    },
  };
  hop.url = (await hop.ask({ cmd: 'start', name, transport, next })).url;
  return hop;
}

/** Sends `count` requests, `concurrency` at a time, stopping early at `stopAtMs` (performance.now()). */
async function drive(target, count, concurrency, stopAtMs, plan, tally) {
  let issued = 0;
  const one = async () => {
    const { budgetMs, path, cancelAfterMs } = plan();
    const caller = cancelAfterMs === undefined ? undefined : new AbortController();
    const cancel = caller && setTimeout(() => caller.abort(new Error('caller gave up')), cancelAfterMs);
    try {
      const status = await withDeadline({ operation: 'load.request', timeoutMs: budgetMs, parent: null, signal: caller?.signal }, async () => {
        tally.fetchCalls++;
        const res = await fetch(`${target}${path}`);
        await res.arrayBuffer();
        return res.status;
      });
      tally.add(`status ${status}`);
    } catch (err) {
      // The caller's own reason comes back as it is: the deadline passes it on.
      if (caller?.signal.aborted) tally.add('CANCELLED');
      else if (err?.name === 'TypeError' && err.cause !== undefined) tally.add(`fetch failed (${err.cause.code ?? err.cause.name})`);
      else tally.add(err?.code ?? err?.name ?? 'unknown');
    } finally {
      clearTimeout(cancel);
    }
  };
  const worker = async () => {
    while (issued < count && performance.now() < stopAtMs) {
      issued++;
      await one();
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  return issued;
}

function newTally() {
  const results = {};
  return { results, fetchCalls: 0, add: (key) => (results[key] = (results[key] ?? 0) + 1) };
}

const sum = (values) => values.reduce((a, b) => a + b, 0);

/** Progress on stderr (bench-all reads only stdout), with LOAD_PROGRESS=1. */
const progress = (message) => process.env.LOAD_PROGRESS === '1' && console.error(`[load ${(performance.now() / 1_000).toFixed(1)} s] ${message}`);

/**
 * Runs the chain. `requests` are sent after `warmup` requests (same mix), at
 * most `concurrency` at a time, stopping at `maxSeconds` whatever the count.
 * Call trackTimers() first thing in the entry script (bench/load.bench.mjs does).
 */
export async function runChain({ requests, concurrency, warmup, maxSeconds, seed = 1 }) {
  trackTimers();
  watchSends();
  const telemetry = startTelemetry();
  const c = await startHop('C', 'none', undefined);
  const b = await startHop('B', 'http', c.url);
  const a = await startHop('A', 'undici', b.url);
  const hops = [a, b, c];
  const startup = activeResources();
  const plan = planner(seed);
  const tally = newTally();

  /** Lets every process finish its work and drop idle connections, then reads what each holds. */
  const settleAll = async () => {
    let replies;
    // A connection accepted after a hop had closed its own (a connect that was still under way,
    // a straggler a loaded hop only now gets to) keeps a socket open in its caller: another round
    // closes it. Bounded by time rather than by a count of rounds, since on a loaded machine the
    // hops settle one after another and three rounds were sometimes not enough.
    const settleUntil = performance.now() + 20_000;
    do {
      replies = await Promise.all(hops.map((hop) => hop.ask({ cmd: 'settle' })));
    } while (!replies.every((reply) => reply.atBaseline) && performance.now() < settleUntil);
    await settleResources(startup);
    return {
      snapshots: { driver: await snapshot(), A: replies[0].snapshot, B: replies[1].snapshot, C: replies[2].snapshot },
      lateness: { driver: { sends: { ...sends } }, A: replies[0].lateness, B: replies[1].lateness, C: replies[2].lateness },
    };
  };

  const hardStopAtMs = performance.now() + maxSeconds * 1_000;
  progress('hops started; warming up');
  // At full concurrency, so that connection pools reach their size before the baseline is read.
  await drive(a.url, warmup, concurrency, hardStopAtMs, plan, tally);
  progress('warm-up sent; settling');
  const { snapshots: before, lateness: warmupLateness } = await settleAll();
  // Late arrivals and sends are counted for the measured run only; the warm-up's are reported apart.
  await Promise.all(hops.map((hop) => hop.ask({ cmd: 'reset' })));
  resetSends();
  progress('baseline read; load starts');
  const started = performance.now();
  // Unref'd: it must not show among the handles read halfway.
  const ticker = setInterval(() => progress(`${tally.fetchCalls} fetch calls so far`), 10_000).unref();
  // Two halves with a read in between: a leak grows the heap as much in the second half as in the
  // first, while what is only allocated once (code compiled late, pools at their size) does not.
  const firstHalf = await drive(a.url, Math.ceil(requests / 2), concurrency, hardStopAtMs, plan, tally);
  const pausedAtMs = performance.now();
  const { snapshots: middle } = await settleAll();
  progress(`${firstHalf} sent; halfway read`);
  const pauseMs = performance.now() - pausedAtMs;
  const sent = firstHalf + (await drive(a.url, requests - firstHalf, concurrency, hardStopAtMs, plan, tally));
  clearInterval(ticker);
  const durationMs = performance.now() - started - pauseMs;
  progress(`${sent} sent in ${(durationMs / 1_000).toFixed(1)} s; settling`);
  const { snapshots: after } = await settleAll();
  progress('settled; collecting reports');

  const reports = Object.fromEntries(await Promise.all(hops.map(async (hop) => [hop.name, await hop.ask({ cmd: 'report' })])));
  const driverViolations = await telemetry.violationsMetric();
  const { counter } = telemetry;
  const driver = {
    sends: { ...sends },
    results: tally.results,
    fetchCalls: tally.fetchCalls,
    spans: Object.fromEntries(counter.spans),
    spanViolations: Object.fromEntries(counter.violations),
    violationsMetric: driverViolations,
  };

  // Nothing is killed: each hop must exit on its own once told to stop.
  const exited = await Promise.all(
    hops.map(async (hop) => {
      const exit = once(hop.child, 'exit');
      hop.child.send({ cmd: 'exit' });
      const timer = setTimeout(() => hop.child.kill(), 10_000);
      const [code, signal] = await exit;
      clearTimeout(timer);
      return code === 0 && signal === null;
    }),
  );
  await telemetry.shutdown();

  const total = warmup + sent;
  const aborted = sum(['DEADLINE_EXCEEDED', 'INSUFFICIENT_BUDGET', 'CANCELLED'].map((code) => tally.results[code] ?? 0));
  const rootSpans = counter.count('internal', 'load.request');
  const processes = { driver, ...reports };
  return {
    config: { requests, concurrency, warmup, maxSeconds, seed },
    sent,
    total,
    durationMs,
    throughput: sent / (durationMs / 1_000),
    reachedTarget: sent >= requests,
    processes,
    warmupLateness,
    checks: {
      // Sent into C (by B) after the cutoff the request carried, at B's socket.
      lateSendsIntoLastHop: reports.B.sends.late,
      latestSendIntoLastHopMs: reports.B.sends.latestMs,
      sendsIntoLastHop: reports.B.sends.checked,
      lateSendsIntoLastHopDetail: `B → C: ${describeSends(reports.B.sends)}`,
      lateSendsEarlier: driver.sends.late + reports.A.sends.late,
      // Which sender, and by how much: a failure then says whether fetch (driver → A) or undici (A → B) sent late.
      lateSendsEarlierDetail: `driver → A: ${describeSends(driver.sends)}. A → B: ${describeSends(reports.A.sends)}`,
      // Seen by C's own event loop after the cutoff they carried, and how late that loop ran.
      lateAtLastHop: reports.C.late,
      latestAtLastHopMs: reports.C.latestMs,
      lastHopLoopDelayMaxMs: reports.C.loopDelayMaxMs,
      lastHopLoopDelayP99Ms: reports.C.loopDelayP99Ms,
      lateAtEarlierHops: reports.A.late + reports.B.late,
      laterThanParentMetric: sum(Object.values(processes).map((p) => p.violationsMetric.later_than_parent ?? 0)),
      laterThanParentSpans: sum(Object.values(processes).map((p) => p.spanViolations.later_than_parent ?? 0)),
      grewAlongChain: sum(hops.map((hop) => reports[hop.name].grew)),
      spans: {
        aborted,
        rootSpans,
        rootSpansAborted: counter.count('internal', 'load.request', ['expired', 'cancelled', 'not_started']),
        driverClientSpans: counter.count('client'),
        fetchCalls: tally.fetchCalls,
        // Per hop: every request that arrived has its server span, every call made its client span.
        hops: Object.fromEntries(
          hops.map((hop) => {
            const r = reports[hop.name];
            return [hop.name, { arrivals: r.arrivals, serverSpans: r.serverSpans, forwarded: r.forwarded, clientSpans: r.clientSpans }];
          }),
        ),
      },
      leaks: Object.fromEntries(
        Object.keys(before).map((name) => [
          name,
          {
            heapBeforeBytes: before[name].heapBytes,
            heapMiddleBytes: middle[name].heapBytes,
            heapAfterBytes: after[name].heapBytes,
            resourcesBefore: before[name].resources,
            resourcesMiddle: middle[name].resources,
            openSocketsAfter: after[name].openSockets,
            resourcesAfter: after[name].resources,
            resourcesBack: sameCounts(before[name].resources, after[name].resources) && sameCounts(before[name].resources, middle[name].resources),
            timersBefore: before[name].timers,
            timersAfter: after[name].timers,
            timerSourcesAfter: after[name].timerSources ?? [],
          },
        ]),
      ),
      exitedOnTheirOwn: exited.every(Boolean),
    },
  };
}
