// npm run bench:db — the cost of the deadline guard on real database calls.
//
// One child process per mode runs the same workloads (bench/db-workload.mjs)
// against PostgreSQL and Redis at 127.0.0.1, each under the OpenTelemetry SDK
// with instrumentation-pg and -ioredis: "none" has nothing of the deadline
// plugin; "guard-off" has DeadlineSpanProcessor and DeadlineInstrumentation
// with the pg and ioredis guards switched off, every statement under an
// active deadline; "guard-on" the same with the guards on; "idle" the guards
// on and no deadline active. The guard's cost is guard-on over guard-off;
// the no-deadline path's is idle over none. This process asks each child in
// turn for one round of one workload, the modes in rotating order, so a
// machine that slows down for a while slows every mode of a round alike. The
// ratios are medians of per-round ratios (measured back to back); the medians
// of each mode alone are printed too. Client CPU per operation (from
// process.cpuUsage in the child, kernel time included) is printed for
// reference; throughput and latency also depend on the servers, which share
// the machine's cores with the client.
//
// Two processes of one build differ by more than the targets' margins (on a
// 2-core VM, Redis GET by up to 30% in client CPU per operation), so the
// guard's cost is also measured in one process: each round the guard-on child
// runs every workload in ABBA slices with its guard switched off and on
// (the instrumentation disabled and enabled again), and the guard-off child runs the same slices as a control,
// with nothing switched. The targets are judged on the in-process ratios.
//
// Prints a Markdown section between <!-- bench:db --> markers.
import { fork } from 'node:child_process';
import { cpus, loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';
import { BASELINE, CONCURRENCY, MODES, startWorkload } from './db-workload.mjs';
import { fmt, median } from './stats.mjs';

const ROUNDS = Number(process.env.BENCH_DB_ROUNDS ?? 12);
const ROUND_SECONDS = Number(process.env.BENCH_DB_SECONDS ?? 1);
const WARMUP_SECONDS = 2;
/** Each slice of the in-process comparison (four per comparison). */
const AB_SLICE_SECONDS = Number(process.env.BENCH_DB_AB_SECONDS ?? 0.5);
/**
 * In-process comparisons per round and workload. Each one's ratio moves by
 * about ±4 % on this 2-core VM (the control's rounds), so the median of the
 * 12 comparisons that one per round gave moved by a few percent from run to
 * run, about the targets' whole margin; two per round halve that spread's variance.
 */
const AB_PER_ROUND = Number(process.env.BENCH_DB_AB_PER_ROUND ?? 2);
/**
 * An uncounted slice before each comparison, in the state of its first slice.
 * The child has sat idle while the others ran their rounds, and the first
 * slice after that idle spell ran slower (caches, the scheduler): in ABBA
 * order that slowness fell on guard-off and in BAAB on guard-on, so it
 * widened the spread of the per-comparison ratios instead of cancelling out.
 */
const AB_WARMUP_SECONDS = Number(process.env.BENCH_DB_AB_WARMUP_SECONDS ?? 0.25);
const WORKLOADS = ['pg-throughput', 'pg-latency', 'redis-throughput'];

/** Child: one workload set, answering each request with one round's figures. */
async function serve(mode) {
  const workload = await startWorkload(mode);
  process.on('message', async (request) => {
    if (request === 'close') {
      await workload.close();
      process.exit(0);
    }
    // The guard-on child runs the in-process comparison too: its guard is on unless a round asks otherwise.
    if (mode === 'guard-on') workload.setGuard(request.guard ?? true);
    process.send(await workload.run(request.workload, { seconds: request.seconds }));
  });
  process.send('ready');
}

function startChild(mode) {
  const child = fork(fileURLToPath(import.meta.url), ['--serve', mode], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('exit', (code) => reject(new Error(`${mode} child exited (${code}) before it was ready`)));
    child.once('message', () => resolve(child));
  });
}

function round(child, workload, seconds, guard = undefined) {
  return new Promise((resolve) => {
    child.once('message', resolve);
    child.send({ workload, seconds, guard });
  });
}

/**
 * One in-process comparison in the guard-on child: an uncounted warm-up
 * slice, then four slices, guard off and on in ABBA order (BAAB for an odd
 * `r`), so a drift within the comparison weighs on both alike. Returns the guard-on slices' ops/s, p50 and CPU over the
 * guard-off slices' (throughput and CPU from the summed slices, p50 from the
 * slices' mean).
 */
async function inProcessPair(child, workload, r) {
  const order = r % 2 === 0 ? [false, true, true, false] : [true, false, false, true];
  if (AB_WARMUP_SECONDS > 0) await round(child, workload, AB_WARMUP_SECONDS, order[0]);
  const slices = { true: [], false: [] };
  for (const guard of order) slices[guard].push(await round(child, workload, AB_SLICE_SECONDS, guard));
  const sum = (list, pick) => list.reduce((total, s) => total + pick(s), 0);
  const over = (pick) => sum(slices.true, pick) / sum(slices.false, pick);
  const ops = (list) => sum(list, (s) => s.ops);
  const cpu = (list) => sum(list, (s) => s.cpuPerOpUs * s.ops) / ops(list);
  return {
    opsPerS: over((s) => s.opsPerS),
    p50Us: over((s) => s.p50Us),
    cpuPerOpUs: cpu(slices.true) / cpu(slices.false),
  };
}

async function drive() {
  const children = Object.fromEntries(await Promise.all(MODES.map(async (mode) => [mode, await startChild(mode)])));
  // A second guard-off process: how far two processes of one build differ, round by round.
  const twin = await startChild('guard-off');
  const samples = Object.fromEntries(WORKLOADS.map((w) => [w, Object.fromEntries(MODES.map((m) => [m, []]))]));
  /** Per workload, per round: the in-process guard-on / guard-off ratios. */
  const inProcess = Object.fromEntries(WORKLOADS.map((w) => [w, []]));
  /** The same slices in the guard-off child, which has no guard to switch: what the method reads when nothing changes. */
  const control = Object.fromEntries(WORKLOADS.map((w) => [w, []]));
  /** Per workload, per round: the second guard-off process's figures. */
  const twins = Object.fromEntries(WORKLOADS.map((w) => [w, []]));
  try {
    for (const workload of WORKLOADS) for (const child of [...Object.values(children), twin]) await round(child, workload, WARMUP_SECONDS);
    for (let r = 0; r < ROUNDS; r++) {
      for (const workload of WORKLOADS) {
        const order = MODES.map((_, k) => MODES[(k + r) % MODES.length]);
        for (const mode of order) samples[workload][mode].push(await round(children[mode], workload, ROUND_SECONDS));
        twins[workload].push(await round(twin, workload, ROUND_SECONDS));
        for (let k = 0; k < AB_PER_ROUND; k++) {
          // ABBA and BAAB alternate from one comparison to the next; with an even count per round, the
          // order that opens a round alternates too.
          const index = r * AB_PER_ROUND + k + (AB_PER_ROUND % 2 === 0 ? r : 0);
          inProcess[workload].push(await inProcessPair(children['guard-on'], workload, index));
          control[workload].push(await inProcessPair(children['guard-off'], workload, index));
        }
      }
    }
  } finally {
    for (const child of [...Object.values(children), twin]) child.send('close');
  }

  // Per round: a mode over its baseline, measured back to back.
  const paired = (workload, mode, pick) =>
    median(samples[workload][mode].map((s, i) => pick(s) / pick(samples[workload][BASELINE[mode]][i])));
  const med = (workload, mode, pick) => median(samples[workload][mode].map(pick));
  const verdict = (ok) => (ok ? 'met' : 'NOT met');
  const pgTput = paired('pg-throughput', 'guard-on', (s) => s.opsPerS);
  const pgP50 = paired('pg-latency', 'guard-on', (s) => s.p50Us);
  const redisTput = paired('redis-throughput', 'guard-on', (s) => s.opsPerS);
  const within = (rounds, key) => median(rounds.map((x) => x[key]));
  const spread = (rounds, key) => {
    const values = rounds.map((x) => x[key]);
    return `${fmt(Math.min(...values), 3)}–${fmt(Math.max(...values), 3)}`;
  };
  const inRow = (workload) =>
    ['opsPerS', 'p50Us', 'cpuPerOpUs']
      .map((key) => `${fmt(within(inProcess[workload], key), 3)} (${spread(inProcess[workload], key)}) | ${fmt(within(control[workload], key), 3)} (${spread(control[workload], key)})`)
      .join(' | ');
  // The second guard-off process over the first, per round: the same code in two processes.
  const twinRatios = (workload) =>
    twins[workload].map((s, i) => {
      const first = samples[workload]['guard-off'][i];
      return { opsPerS: s.opsPerS / first.opsPerS, p50Us: s.p50Us / first.p50Us, cpuPerOpUs: s.cpuPerOpUs / first.cpuPerOpUs };
    });
  const twinRow = (workload) =>
    ['opsPerS', 'p50Us', 'cpuPerOpUs'].map((key) => `${fmt(within(twinRatios(workload), key), 3)} (${spread(twinRatios(workload), key)})`).join(' | ');
  const pgTputIn = within(inProcess['pg-throughput'], 'opsPerS');
  const pgP50In = within(inProcess['pg-latency'], 'p50Us');
  const redisTputIn = within(inProcess['redis-throughput'], 'opsPerS');
  const row = (workload, mode) => {
    const figures = `| ${workload} | ${mode} | ${fmt(med(workload, mode, (s) => s.opsPerS))} | ${fmt(med(workload, mode, (s) => s.p50Us))} | ${fmt(med(workload, mode, (s) => s.cpuPerOpUs), 1)}`;
    const baseline = BASELINE[mode];
    if (baseline === undefined) return `${figures} | | | | |`;
    const ratio = (pick) => fmt(paired(workload, mode, pick), 3);
    return `${figures} | ${baseline} | ${ratio((s) => s.opsPerS)} | ${ratio((s) => s.p50Us)} | ${ratio((s) => s.cpuPerOpUs)} |`;
  };
  const lines = [
    '<!-- bench:db -->',
    '## Databases: with vs without the deadline guard (`npm run bench:db`)',
    '',
    'PostgreSQL 127.0.0.1:5432 through pg, Redis 127.0.0.1:6379 through ioredis, in child processes under the',
    'OpenTelemetry SDK with instrumentation-pg and -ioredis (batch span processor, no-op exporter) in every mode.',
    '"none": no deadline plugin. "guard-off": DeadlineSpanProcessor + DeadlineInstrumentation with `pg: false, ioredis: false`,',
    'every statement under an active deadline. "guard-on": the same with the guards on. "idle": guards on, no deadline',
    `active. Workloads: \`pg-throughput\` = \`Pool#query('SELECT 1')\` with ${CONCURRENCY} workers on a pool of ${CONCURRENCY};`,
    "`pg-latency` = `Client#query('SELECT 1')` one at a time; " + `\`redis-throughput\` = \`GET\` with ${CONCURRENCY} workers on one connection.`,
    `${ROUNDS} rounds of ${ROUND_SECONDS} s per workload and mode, modes in rotating order, after a ${WARMUP_SECONDS} s warm-up each.`,
    'Medians across rounds; ratios are medians of per-round ratios over the mode named. Client CPU is the child\'s own',
    `(process.cpuUsage, kernel included). Node ${process.version}, ${cpus().length} CPUs shared with other jobs (load average`,
    `${fmt(loadavg()[0], 1)} at the start): the servers and the load generator compete for the same cores, and time figures move`,
    'by several percent from round to round; bench:db:instructions counts instructions instead.',
    '',
    '| workload | mode | ops/s | p50 µs | client CPU µs / op | over | ops/s ratio | p50 ratio | CPU ratio |',
    '| --- | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: |',
    ...WORKLOADS.flatMap((workload) => MODES.map((mode) => row(workload, mode))),
    '',
    'Across processes, the guard (the guard-on child over the guard-off child, round by round): PostgreSQL `SELECT 1`',
    `throughput ratio ${fmt(pgTput, 3)}, median latency ratio one at a time ${fmt(pgP50, 3)}, Redis \`GET\` throughput ratio ${fmt(redisTput, 3)}.`,
    'A second guard-off child, run in every round after the modes above, over the first (the same code in two processes;',
    'medians of the rounds, lowest–highest):',
    '',
    '| workload | ops/s ratio | p50 ratio | CPU ratio |',
    '| --- | ---: | ---: | ---: |',
    ...WORKLOADS.map((workload) => `| ${workload} | ${twinRow(workload)} |`),
    '',
    `In one process: each round, after the modes above, the guard-on child runs ${AB_PER_ROUND} comparison(s) per workload, each an`,
    `uncounted ${AB_WARMUP_SECONDS} s slice and then four slices of ${AB_SLICE_SECONDS} s with its guard switched off and on (DeadlineInstrumentation`,
    'disabled and enabled again: off, its wrappers under the driver instrumentations\' pass each call straight on), in ABBA',
    'and BAAB order by turns; a comparison\'s ratio is its guard-on slices over its guard-off slices. The control runs the same',
    'slices in the guard-off child, whose two halves are identical: what the method reads when nothing changes. Medians of',
    `the ${ROUNDS * AB_PER_ROUND} comparisons (lowest–highest):`,
    '',
    '| workload | ops/s ratio | control | p50 ratio | control | CPU ratio | control |',
    '| --- | ---: | ---: | ---: | ---: | ---: | ---: |',
    ...WORKLOADS.map((workload) => `| ${workload} | ${inRow(workload)} |`),
    '',
    `The guard, in one process: PostgreSQL \`SELECT 1\` throughput ratio **${fmt(pgTputIn, 3)}** (target ≥ 0.97: ${verdict(pgTputIn >= 0.97)});`,
    `median latency ratio, one at a time, **${fmt(pgP50In, 3)}** (target ≤ 1.03: ${verdict(pgP50In <= 1.03)}); Redis \`GET\` throughput ratio **${fmt(redisTputIn, 3)}** (target ≥ 0.95: ${verdict(redisTputIn >= 0.95)}).`,
    'The targets are judged in one process: two processes of one build differ by more than the margins (see docs/databases.md).',
    '',
    ...WORKLOADS.map(
      (w) =>
        `Per round, ops/s of ${w}: ${MODES.map((m) => `${m} ${samples[w][m].map((s) => fmt(s.opsPerS)).join(', ')}`).join('; ')}.`,
    ),
    '<!-- /bench:db -->',
  ];
  console.log(lines.join('\n'));
}

if (process.argv[2] === '--serve') await serve(process.argv[3]);
else await drive();
