// npm run bench:load — 100,000 requests, 2,000 at a time, with mixed budgets
// (some expiring mid-flight, some cancelled by the caller) through a 3-hop
// loopback chain: this process → A (fetch) → B (undici) → C (node:http), each
// hop a child process with its own SDK and DeadlineInstrumentation. See
// test/hardening/load/chain.mjs for the chain and the mix.
//
// Checks, printed between <!-- bench:load --> markers: no request reaches the
// last hop after its cutoff, later_than_parent stays at 0, every request and
// every abort has its spans, and heap, handles and timers return to baseline
// in every process. Exits 1 when a check fails or the hard stop cut the run short.
//
// LOAD_REQUESTS, LOAD_CONCURRENCY, LOAD_WARMUP, LOAD_MAX_SECONDS and LOAD_SEED
// change the run; LOAD_JSON=1 prints the raw figures as one JSON line instead
// (test/hardening/load/chain.test.ts runs it that way, smaller).
import { cpus, loadavg } from 'node:os';
import { runChain, SCENARIOS } from '../test/hardening/load/chain.mjs';
import { verdicts } from '../test/hardening/load/verdicts.mjs';

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
  console.log(render(result, loadBefore));
}
if (failed.length > 0) {
  console.error(`bench:load: ${failed.map((v) => v.name).join('; ')}`);
  process.exitCode = 1;
}

function render(r, loadStart) {
  const n = (value) => Math.round(value).toLocaleString('en-US');
  const mib = (bytes) => `${(bytes / 2 ** 20).toFixed(1)} MiB`;
  const signed = (bytes) => `${bytes >= 0 ? '+' : '−'}${(Math.abs(bytes) / 2 ** 20).toFixed(2)} MiB`;
  const resources = (counts) =>
    Object.entries(counts)
      .map(([k, v]) => `${k}×${v}`)
      .join(', ') || 'none';
  const { checks } = r;
  const outcomes = Object.entries(r.processes.driver.results)
    .sort((x, y) => y[1] - x[1])
    .map(([k, v]) => `${k} ${n(v)}`)
    .join(', ');
  // Requests into each hop are sent by the process before it.
  const sender = { A: 'driver', B: 'A', C: 'B' };
  const ms = (value) => `${value.toFixed(1)} ms`;
  const hopRows = Object.entries(checks.spans.hops).map(([name, h]) => {
    const p = r.processes[name];
    const sent = r.processes[sender[name]].sends;
    return (
      `| ${name} | ${n(h.arrivals)} | ${n(h.serverSpans)} | ${n(h.forwarded)} | ${n(h.clientSpans)} | ` +
      `${n(sent.late)} of ${n(sent.checked)}${sent.late > 0 ? ` (latest ${ms(sent.latestMs)})` : ''} | ` +
      `${n(p.late)}${p.late > 0 ? ` (latest ${p.latestMs} ms)` : ''} | ${ms(p.loopDelayP99Ms)} / ${ms(p.loopDelayMaxMs)} |`
    );
  });
  const leakRows = Object.entries(checks.leaks).map(
    ([name, l]) =>
      `| ${name} | ${mib(l.heapBeforeBytes)} | ${mib(l.heapMiddleBytes)} (${signed(l.heapMiddleBytes - l.heapBeforeBytes)}) | ` +
      `${mib(l.heapAfterBytes)} (${signed(l.heapAfterBytes - l.heapMiddleBytes)}) | ` +
      `${resources(l.resourcesBefore)} | ${resources(l.resourcesAfter)} | ${l.timersBefore} → ${l.timersAfter} |`,
  );
  const verdictLines = verdicts(r).map((v) => `- ${v.pass ? 'pass' : '**FAIL**'}: ${v.name} (${v.detail})`);
  return [
    '<!-- bench:load -->',
    '### Load and leaks through a 3-hop chain (`npm run bench:load`)',
    '',
    `${n(r.sent)} requests (after ${n(r.config.warmup)} warm-up requests), ${n(r.config.concurrency)} at a time, ` +
      `driver → A (fetch) → B (undici) → C (node:http) on loopback, each hop a child process with its own SDK; ` +
      `mix (seed ${r.config.seed}): ${SCENARIOS.map((s) => `${s.weight}% ${s.name}`).join(', ')}.`,
    '',
    `Duration ${(r.durationMs / 1_000).toFixed(1)} s, throughput ${n(r.throughput)} requests/s end to end ` +
      `(each request is up to 3 HTTP exchanges and 8 spans), on ${cpus().length} cores with load average ` +
      `${loadStart.toFixed(2)} before and ${loadavg()[0].toFixed(2)} after.`,
    '',
    `Outcomes at the caller: ${outcomes}.`,
    '',
    '| hop | arrivals | server spans | calls to next hop | client spans | sent to it after their cutoff (at the sender\'s socket) | seen by it after their cutoff | its event-loop delay p99 / max |',
    '|---|---:|---:|---:|---:|---:|---:|---:|',
    `| driver | – | – | ${n(checks.spans.fetchCalls)} | ${n(checks.spans.driverClientSpans)} | – | – | – |`,
    ...hopRows,
    '',
    'A request counts as sent late when the socket write carrying its headers (or the connect that flushes it) ' +
      'happens more than 1 ms (the header\'s resolution) after the x-deadline-at-ms it carries; as seen late when the ' +
      'receiving hop\'s diagnostics channel reports it after that instant. The second includes the receiver\'s own ' +
      'event-loop delay (GC, CPU shared by four processes on two cores), which the package does not control.',
    '',
    `Spans for aborted requests: ${n(checks.spans.aborted)} requests ended with a deadline error at the caller; ` +
      `${n(checks.spans.rootSpansAborted)} of the ${n(checks.spans.rootSpans)} root spans carry outcome expired, cancelled or not_started.`,
    '',
    '| process | heap after warm-up | heap halfway (first half) | heap at the end (second half) | handles after warm-up | handles at the end | pending timers |',
    '|---|---:|---:|---:|---|---|---:|',
    ...leakRows,
    '',
    'Heap, handles and timers are read after warm-up, halfway and at the end, each time once in-flight work has ' +
      'ended, the servers have closed their connections and gc has run four times. A leak grows the heap in the ' +
      'second half as in the first; what is allocated once (code compiled late, pools at their size) does not.',
    '',
    ...verdictLines,
    '<!-- /bench:load -->',
  ].join('\n');
}
