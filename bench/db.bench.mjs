// npm run bench:db — the deadline guard on real database calls, in wall-clock
// time (information only: the targets are judged in instructions, by
// bench:db:instructions).
//
// One child process per mode runs the same workloads (bench/db-workload.mjs)
// against PostgreSQL and Redis at 127.0.0.1, each under the OpenTelemetry SDK
// with instrumentation-pg and -ioredis: "none" has nothing of the deadline
// plugin; "guard-off" has DeadlineSpanProcessor and DeadlineInstrumentation
// with the pg and ioredis guards switched off, every statement under an
// active deadline; "guard-on" the same with the guards on; "idle" the guards
// on and no deadline active. This process asks each child in turn for one
// round of one workload, the modes in rotating order, so a machine that slows
// down for a while slows every mode of a round alike; the ratios are medians
// of per-round ratios over the mode's baseline. Client CPU per operation
// (process.cpuUsage in the child, kernel time included) is given too;
// throughput and latency also depend on the servers, which share the cores.
//
// Writes bench/results/db.json.
import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { BASELINE, CONCURRENCY, MODES, startWorkload } from './db-workload.mjs';
import { writeResult } from './report.mjs';
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
    for (const workload of WORKLOADS) for (const child of Object.values(children)) await round(child, workload, WARMUP_SECONDS);
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
  const paired = (workload, mode, pick) => median(samples[workload][mode].map((s, i) => pick(s) / pick(samples[workload][BASELINE[mode]][i])));
  const med = (workload, mode, pick) => median(samples[workload][mode].map(pick));
  const row = (workload, mode) => {
    const baseline = BASELINE[mode];
    const ratio = (pick) => (baseline === undefined ? '' : fmt(paired(workload, mode, pick), 3));
    return [
      workload,
      mode,
      fmt(med(workload, mode, (s) => s.opsPerS)),
      fmt(med(workload, mode, (s) => s.p50Us)),
      fmt(med(workload, mode, (s) => s.cpuPerOpUs), 1),
      baseline ?? '',
      ratio((s) => s.opsPerS),
      ratio((s) => s.p50Us),
      ratio((s) => s.cpuPerOpUs),
    ];
  };
  writeResult('db', {
    title: 'Databases in wall-clock time (information only)',
    command: 'npm run bench:db',
    tables: [
      {
        caption:
          `pg-throughput: Pool#query('SELECT 1'), ${CONCURRENCY} workers on a pool of ${CONCURRENCY}; pg-latency: Client#query('SELECT 1') one at a time; ` +
          `redis-throughput: GET, ${CONCURRENCY} workers on one connection. ${ROUNDS} rounds of ${ROUND_SECONDS} s per workload and mode, medians; ratios are medians of per-round ratios over the baseline`,
        columns: ['workload', 'mode', 'ops/s:', 'p50 µs:', 'client CPU µs / op:', 'baseline', 'ops/s ratio:', 'p50 ratio:', 'CPU ratio:'],
        rows: WORKLOADS.flatMap((workload) => MODES.map((mode) => row(workload, mode))),
      },
    ],
    data: { rounds: ROUNDS, roundSeconds: ROUND_SECONDS, samples },
  });
}

if (process.argv[2] === '--serve') await serve(process.argv[3]);
else await drive();
