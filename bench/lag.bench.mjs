// npm run bench:lag — cancellation lag with 10,000 live deadlines, against dist/.
//  (a) 10,000 armed roots whose cutoffs are staggered over one second.
//  (b) 10,000 armed children under 100 parents: each parent's cutoff aborts
//      its 100 children in one cascade, so the lag includes the fan-out.
// Lag = time from a deadline's cutoff to its signal's abort event. Heap and
// live timers are read before, while armed, and after dispose + gc, to show
// nothing is left behind. Writes bench/results/lag.json.
import { loadavg } from 'node:os';
import { PerformanceObserver } from 'node:perf_hooks';
import { openDeadline } from '../dist/esm/index.mjs';
import { trackTimers } from '../test/hardening/load/resources.mjs';
import { writeResult } from './report.mjs';

if (typeof globalThis.gc !== 'function') {
  console.error('run with node --expose-gc (npm run bench:lag does)');
  process.exit(2);
}

const DEADLINES = Number(process.env.LAG_DEADLINES ?? 10_000);
const ROUNDS = Number(process.env.LAG_ROUNDS ?? 3);
const FIRST_CUTOFF_MS = 1_500; // leaves time to open every deadline (and gc) before the first one is due
const SPREAD_MS = 1_000;
const PARENTS = 100;
const TARGET_P99_MS = 5;

// Deadline timers are unref'd, so process.getActiveResourcesInfo() does not list
// them: count them by wrapping the globals the build calls at run time.
// The real functions stay in reach for the bench's own guard timer, which must not be counted.
const realSetTimeout = globalThis.setTimeout;
const realClearTimeout = globalThis.clearTimeout;
const pendingTimers = trackTimers();

// GC pauses stall every timer alike; they are recorded so a high p99 can be told apart from the package's own cost.
const gcPauses = [];
const gcObserver = new PerformanceObserver((list) => {
  for (const entry of list.getEntries()) gcPauses.push({ start: entry.startTime, duration: entry.duration });
});
gcObserver.observe({ entryTypes: ['gc'] });
/** The longest GC pause that started in [from, to], in ms. */
function longestGcPause(from, to) {
  let longest = 0;
  for (const { start, duration } of gcPauses) if (start >= from && start <= to && duration > longest) longest = duration;
  return longest;
}

function settledHeap() {
  for (let i = 0; i < 4; i++) globalThis.gc();
  return process.memoryUsage().heapUsed;
}

function activeResources() {
  const counts = {};
  for (const name of process.getActiveResourcesInfo()) counts[name] = (counts[name] ?? 0) + 1;
  return counts;
}

/**
 * Arms `count` deadlines via `open(i)` (which returns { deadline, cutoff }),
 * waits for every abort event, and returns the lags in ms plus cleanup state.
 */
async function measure(count, open) {
  const lags = new Float64Array(count);
  const deadlines = [];
  const listeners = [];
  let seen = 0;
  let done;
  const allAborted = new Promise((resolve) => (done = resolve));
  const setupStart = performance.now();
  for (let i = 0; i < count; i++) {
    const { deadline, cutoff } = open(i);
    const onAbort = () => {
      lags[i] = performance.now() - cutoff;
      if (++seen === count) done();
    };
    deadline.signal.addEventListener('abort', onAbort, { once: true });
    deadlines.push(deadline);
    listeners.push(onAbort);
  }
  const setupMs = performance.now() - setupStart;
  const heapArmed = process.memoryUsage().heapUsed;
  // In a server, live deadlines have long since been promoted to the old generation. Here they
  // were all made a moment ago: promote them now, or the first scavenge while firing copies them all.
  globalThis.gc();
  const timersArmed = pendingTimers();
  const firingFrom = setupStart + FIRST_CUTOFF_MS;
  // Bounded: give up (and report it) well after the last cutoff.
  let guard;
  const timedOut = new Promise((resolve) => {
    guard = realSetTimeout(() => resolve('timeout'), FIRST_CUTOFF_MS + SPREAD_MS + 10_000);
  });
  const outcome = await Promise.race([allAborted, timedOut]);
  realClearTimeout(guard);
  // GC entries are delivered asynchronously: let the observer catch up before reading them.
  await new Promise((resolve) => setImmediate(resolve));
  const gcPauseMs = longestGcPause(firingFrom, performance.now());
  deadlines.forEach((d, i) => {
    d.signal.removeEventListener('abort', listeners[i]);
    d.dispose();
  });
  return { lags, seen, timedOut: outcome === 'timeout', heapArmed, timersArmed, setupMs, gcPauseMs };
}

/** Cutoff of the i-th deadline, as a lower bound: read before open(), so the lag is never understated. */
function staggered(i, count) {
  return FIRST_CUTOFF_MS + (i * SPREAD_MS) / count;
}

/**
 * The same schedule done by hand: an AbortController, a setTimeout that aborts
 * it, and the same listener. What any abort-at-a-time costs on this machine.
 */
function openByHand(i, count) {
  const timeoutMs = staggered(i, count);
  const cutoff = performance.now() + timeoutMs;
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), Math.ceil(timeoutMs));
  timer.unref();
  const deadline = { signal: controller.signal, dispose: () => clearTimeout(timer) };
  return { deadline, cutoff };
}

const scenarios = [
  {
    name: `baseline: ${DEADLINES.toLocaleString('en-US')} hand-made AbortController + setTimeout, schedule of (a)`,
    baseline: true,
    run: () => measure(DEADLINES, (i) => openByHand(i, DEADLINES)),
  },
  {
    name: `(a) ${DEADLINES.toLocaleString('en-US')} armed roots, cutoffs staggered over ${SPREAD_MS} ms`,
    run: () =>
      measure(DEADLINES, (i) => {
        const timeoutMs = staggered(i, DEADLINES);
        const cutoff = performance.now() + timeoutMs;
        const deadline = openDeadline({ operation: 'lag.root', timeoutMs, parent: null });
        return { deadline, cutoff };
      }),
  },
  {
    name: `(b) ${DEADLINES.toLocaleString('en-US')} armed children under ${PARENTS} parents (cascade)`,
    run: async () => {
      const parents = Array.from({ length: PARENTS }, (_, p) => {
        const timeoutMs = staggered(p, PARENTS);
        return { cutoff: performance.now() + timeoutMs, deadline: openDeadline({ operation: 'lag.parent', timeoutMs, parent: null }) };
      });
      const result = await measure(DEADLINES, (i) => {
        const parent = parents[i % PARENTS];
        // The child asks for more than its parent has, so the parent's cutoff is the one that fires.
        return { deadline: parent.deadline.child('lag.child', 60_000), cutoff: parent.cutoff };
      });
      parents.forEach((p) => p.deadline.dispose());
      return result;
    },
  },
];

const percentile = (sorted, p) => sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)];
const fmt = (n, digits = 2) => n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });
const kib = (bytes) => `${bytes >= 0 ? '+' : ''}${fmt(bytes / 1024, 0)} KiB`;

// Preallocated so the benchmark's own bookkeeping does not grow the heap between reads.
const results = scenarios.map(() => ({
  all: new Float64Array(ROUNDS * DEADLINES),
  roundP99s: [],
  missed: 0,
  heapArmed: 0,
  timersArmed: 0,
  setupMs: 0,
  gcPauseMs: 0,
}));
const loadBefore = loadavg()[0];
const heapBaseline = settledHeap();
const resourcesBefore = activeResources();
let heapAfterFirstRound = 0;
// Rounds alternate between scenarios, so a burst of load on the machine hits them alike.
for (let round = 0; round < ROUNDS; round++) {
  for (const [k, scenario] of scenarios.entries()) {
    settledHeap();
    const result = await scenario.run();
    const acc = results[k];
    if (result.timedOut) acc.missed += DEADLINES - result.seen;
    acc.all.set(result.lags, round * DEADLINES);
    acc.roundP99s.push(percentile(Float64Array.from(result.lags).sort(), 99));
    acc.heapArmed = Math.max(acc.heapArmed, result.heapArmed - heapBaseline);
    acc.timersArmed = Math.max(acc.timersArmed, result.timersArmed);
    acc.setupMs = Math.max(acc.setupMs, result.setupMs);
    acc.gcPauseMs = Math.max(acc.gcPauseMs, result.gcPauseMs);
  }
  if (round === 0) heapAfterFirstRound = settledHeap();
}
const heapAfter = settledHeap();
const resourcesAfter = activeResources();
const timersAfter = pendingTimers();
const rows = scenarios.map((scenario, k) => {
  const { all, roundP99s, ...rest } = results[k];
  all.sort();
  return {
    name: scenario.name,
    baseline: scenario.baseline === true,
    p50: percentile(all, 50),
    p99: percentile(all, 99),
    max: all[all.length - 1],
    worstRoundP99: Math.max(...roundP99s),
    ...rest,
  };
});
const ours = rows.filter((r) => !r.baseline);
const base = rows.find((r) => r.baseline);
const pass = ours.every((r) => r.p99 <= TARGET_P99_MS && r.missed === 0);
const resourceLine = (counts) =>
  Object.entries(counts)
    .map(([k, v]) => `${k}×${v}`)
    .join(', ') || 'none';
writeResult('lag', {
  title: 'Cancellation lag',
  command: 'npm run bench:lag',
  tables: [
    {
      caption: `Time from each deadline's cutoff to its abort event, ${ROUNDS} rounds of ${fmt(DEADLINES)} live deadlines each, pooled`,
      columns: ['scenario', 'p50:', 'p99:', 'max:', 'worst round p99:', 'longest GC pause while firing:', 'heap while armed:', 'time to arm all:', 'missed:'],
      rows: rows.map((r) => [
        r.name,
        `${fmt(r.p50)} ms`,
        `${fmt(r.p99)} ms`,
        `${fmt(r.max)} ms`,
        `${fmt(r.worstRoundP99)} ms`,
        `${fmt(r.gcPauseMs)} ms`,
        kib(r.heapArmed),
        `${fmt(r.setupMs, 0)} ms`,
        String(r.missed),
      ]),
    },
    {
      caption: 'Against the target, and what is left behind',
      columns: ['figure', 'value', 'target'],
      rows: [
        ['p99 of the package\'s scenarios', ours.map((r) => `${fmt(r.p99)} ms`).join(', '), `at most ${TARGET_P99_MS} ms (${pass ? 'met' : 'NOT met'})`],
        ['p99 over the hand-made baseline', ours.map((r) => `${fmt(r.p99 / base.p99)}×`).join(', '), ''],
        [`heap left between the end of round 1 and round ${ROUNDS}`, kib(heapAfter - heapAfterFirstRound), ''],
        ['deadline timers left after dispose', String(timersAfter), '0'],
        ['active resources before / after', `${resourceLine(resourcesBefore)} / ${resourceLine(resourcesAfter)}`, ''],
        ['load average (1 min) before / after', `${fmt(loadBefore)} / ${fmt(loadavg()[0])}`, ''],
      ],
    },
  ],
  data: { rows, timersAfter, heapLeftBytes: heapAfter - heapAfterFirstRound },
});
gcObserver.disconnect();
// Lag depends on the machine; what is left behind does not.
if (timersAfter !== 0) process.exitCode = 1;
