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
// Prints a Markdown section between <!-- bench:db --> markers.
import { fork } from 'node:child_process';
import { cpus, loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';
import { BASELINE, CONCURRENCY, MODES, startWorkload } from './db-workload.mjs';
import { fmt, median } from './stats.mjs';

const ROUNDS = Number(process.env.BENCH_DB_ROUNDS ?? 12);
const ROUND_SECONDS = Number(process.env.BENCH_DB_SECONDS ?? 1);
const WARMUP_SECONDS = 2;
const WORKLOADS = ['pg-throughput', 'pg-latency', 'redis-throughput'];

/** Child: one workload set, answering each request with one round's figures. */
async function serve(mode) {
  const workload = await startWorkload(mode);
  process.on('message', async (request) => {
    if (request === 'close') {
      await workload.close();
      process.exit(0);
    }
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

function round(child, workload, seconds) {
  return new Promise((resolve) => {
    child.once('message', resolve);
    child.send({ workload, seconds });
  });
}

async function drive() {
  const children = Object.fromEntries(await Promise.all(MODES.map(async (mode) => [mode, await startChild(mode)])));
  const samples = Object.fromEntries(WORKLOADS.map((w) => [w, Object.fromEntries(MODES.map((m) => [m, []]))]));
  try {
    for (const workload of WORKLOADS) for (const mode of MODES) await round(children[mode], workload, WARMUP_SECONDS);
    for (let r = 0; r < ROUNDS; r++) {
      for (const workload of WORKLOADS) {
        const order = MODES.map((_, k) => MODES[(k + r) % MODES.length]);
        for (const mode of order) samples[workload][mode].push(await round(children[mode], workload, ROUND_SECONDS));
      }
    }
  } finally {
    for (const child of Object.values(children)) child.send('close');
  }

  // Per round: a mode over its baseline, measured back to back.
  const paired = (workload, mode, pick) =>
    median(samples[workload][mode].map((s, i) => pick(s) / pick(samples[workload][BASELINE[mode]][i])));
  const med = (workload, mode, pick) => median(samples[workload][mode].map(pick));
  const verdict = (ok) => (ok ? 'met' : 'NOT met');
  const pgTput = paired('pg-throughput', 'guard-on', (s) => s.opsPerS);
  const pgP50 = paired('pg-latency', 'guard-on', (s) => s.p50Us);
  const redisTput = paired('redis-throughput', 'guard-on', (s) => s.opsPerS);
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
    `The guard (guard-on over guard-off): PostgreSQL \`SELECT 1\` throughput ratio **${fmt(pgTput, 3)}** (target ≥ 0.97: ${verdict(pgTput >= 0.97)});`,
    `median latency ratio, one at a time, **${fmt(pgP50, 3)}** (target ≤ 1.03: ${verdict(pgP50 <= 1.03)}); Redis \`GET\` throughput ratio **${fmt(redisTput, 3)}** (target ≥ 0.95: ${verdict(redisTput >= 0.95)}).`,
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
