// npm run bench:load — 100,000 requests, 2,000 at a time, with mixed budgets
// (some expiring mid-flight, some cancelled by the caller) through a 3-hop
// loopback chain: this process → A (fetch) → B (undici) → C (node:http), each
// hop a child process with its own SDK and DeadlineInstrumentation. See
// test/hardening/load/chain.mjs for the chain and the mix.
//
// Checks, written to bench/results/load.json: no request reaches the
// last hop after its cutoff, later_than_parent stays at 0, every request and
// every abort has its spans, and heap, handles and timers return to baseline
// in every process. Exits 1 when a check fails or the hard stop cut the run short.
//
// LOAD_REQUESTS, LOAD_CONCURRENCY, LOAD_WARMUP, LOAD_MAX_SECONDS and LOAD_SEED
// change the run; LOAD_JSON=1 prints the raw figures as one JSON line instead of writing them
// (test/hardening/load/chain.test.ts runs it that way, smaller).
import { cpus, loadavg } from 'node:os';
import { runChain, SCENARIOS } from '../test/hardening/load/chain.mjs';
import { verdicts } from '../test/hardening/load/verdicts.mjs';
import { writeResult } from './report.mjs';

if (typeof globalThis.gc !== 'function') {
  console.error('run with node --expose-gc (npm run bench:load does)');
  process.exit(2);
}

const config = {
  requests: Number(process.env.LOAD_REQUESTS ?? 100_000),
  concurrency: Number(process.env.LOAD_CONCURRENCY ?? 2_000),
  warmup: Number(process.env.LOAD_WARMUP ?? 2_000),
  maxSeconds: Number(process.env.LOAD_MAX_SECONDS ?? 900),
  seed: Number(process.env.LOAD_SEED ?? 1),
};
const loadBefore = loadavg()[0];
const result = await runChain(config);
const failed = verdicts(result).filter((v) => !v.pass);
if (process.env.LOAD_JSON === '1') {
  console.log(JSON.stringify(result));
} else {
  writeResult('load', { title: 'Load and leaks through a 3-hop chain', command: 'npm run bench:load', tables: tables(result, loadBefore), data: result });
}
if (failed.length > 0) {
  console.error(`bench:load: ${failed.map((v) => v.name).join('; ')}`);
  process.exitCode = 1;
}

/** The tables of bench/results/load.json. */
function tables(r, loadStart) {
  const n = (value) => Math.round(value).toLocaleString('en-US');
  const mib = (bytes) => `${(bytes / 2 ** 20).toFixed(1)} MiB`;
  const signed = (bytes) => `${bytes >= 0 ? '+' : '−'}${(Math.abs(bytes) / 2 ** 20).toFixed(2)} MiB`;
  const resources = (counts) =>
    Object.entries(counts)
      .map(([k, v]) => `${k}×${v}`)
      .join(', ') || 'none';
  const { checks } = r;
  // Requests into each hop are sent by the process before it.
  const sender = { A: 'driver', B: 'A', C: 'B' };
  const ms = (value) => `${value.toFixed(1)} ms`;
  return [
    {
      caption: 'The run',
      columns: ['figure', 'value'],
      rows: [
        ['requests', `${n(r.sent)} after ${n(r.config.warmup)} warm-up, ${n(r.config.concurrency)} at a time`],
        ['chain', 'driver → A (fetch) → B (undici) → C (node:http) on loopback, each hop a child process with its own SDK'],
        ['mix', `seed ${r.config.seed}: ${SCENARIOS.map((sc) => `${sc.weight}% ${sc.name}`).join(', ')}`],
        ['duration, throughput', `${(r.durationMs / 1_000).toFixed(1)} s, ${n(r.throughput)} requests/s end to end`],
        ['cores, load average (1 min) before / after', `${cpus().length}, ${loadStart.toFixed(2)} / ${loadavg()[0].toFixed(2)}`],
        ...Object.entries(r.processes.driver.results)
          .sort((x, y) => y[1] - x[1])
          .map(([k, v]) => [`outcome at the caller: ${k}`, n(v)]),
        ['requests ended with a deadline error at the caller', n(checks.spans.aborted)],
        ['root spans with outcome expired, cancelled or not_started', `${n(checks.spans.rootSpansAborted)} of ${n(checks.spans.rootSpans)}`],
      ],
    },
    {
      caption: 'Per hop (late: written or seen more than 1 ms after the x-deadline-at-ms it carries)',
      columns: ['hop', 'arrivals:', 'server spans:', 'calls to next hop:', 'client spans:', 'sent to it late:', 'seen by it late:', 'event-loop delay p99 / max:'],
      rows: [
        ['driver', '–', '–', n(checks.spans.fetchCalls), n(checks.spans.driverClientSpans), '–', '–', '–'],
        ...Object.entries(checks.spans.hops).map(([name, h]) => {
          const p = r.processes[name];
          const sent = r.processes[sender[name]].sends;
          return [
            name,
            n(h.arrivals),
            n(h.serverSpans),
            n(h.forwarded),
            n(h.clientSpans),
            `${n(sent.late)} of ${n(sent.checked)}${sent.late > 0 ? ` (latest ${ms(sent.latestMs)})` : ''}`,
            `${n(p.late)}${p.late > 0 ? ` (latest ${p.latestMs} ms)` : ''}`,
            `${ms(p.loopDelayP99Ms)} / ${ms(p.loopDelayMaxMs)}`,
          ];
        }),
      ],
    },
    {
      caption: 'Leaks: read after warm-up, halfway and at the end, each time after in-flight work ended and gc ran',
      columns: ['process', 'heap after warm-up:', 'heap halfway:', 'heap at the end:', 'handles after warm-up', 'handles at the end', 'pending timers:'],
      rows: Object.entries(checks.leaks).map(([name, l]) => [
        name,
        mib(l.heapBeforeBytes),
        `${mib(l.heapMiddleBytes)} (${signed(l.heapMiddleBytes - l.heapBeforeBytes)})`,
        `${mib(l.heapAfterBytes)} (${signed(l.heapAfterBytes - l.heapMiddleBytes)})`,
        resources(l.resourcesBefore),
        resources(l.resourcesAfter),
        `${l.timersBefore} → ${l.timersAfter}`,
      ]),
    },
    {
      caption: 'Checks',
      columns: ['check', 'result', 'detail'],
      rows: verdicts(r).map((v) => [v.name, v.pass ? 'pass' : 'FAIL', v.detail]),
    },
  ];
}
