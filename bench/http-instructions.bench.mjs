// npm run bench:http:instructions — the plugin's cost on the HTTP chain in
// instructions, which a shared, noisy machine does not change.
//
// bench:http and bench:http:parts measure time, and on a machine whose speed
// drifts by ±10% within a run they cannot resolve a few percent. This one runs
// the bench:http chain (bench/http-chain.mjs) under valgrind's callgrind, which
// counts the instructions the process executes, whatever else the machine is
// doing. Each configuration runs twice, with a short and a long load; the
// difference between the two counts, divided by the extra requests, is the
// cost of one request, with start-up and warm-up cancelled out. V8 runs with
// --predictable (no concurrent compilation or GC threads, whose timing would
// otherwise change what the main thread does), the batch span processor
// exports only full batches of 512 (no timer), and requests carry a budget
// valgrind's slowdown cannot use up. The figures are instructions, not time: garbage collection
// and compilation are in them, cache misses and waits are not.
//
// Needs valgrind (Debian package `valgrind`). Prints a Markdown section between
// <!-- bench:http:instructions --> markers.
import { spawn } from 'node:child_process';
import { cpus } from 'node:os';
import { fileURLToPath } from 'node:url';
import { ALL_PARTS, startChain } from './http-chain.mjs';
import { drive } from './socket-driver.mjs';
import { fmt } from './stats.mjs';

const SHORT = Number(process.env.BENCH_INSTR_SHORT ?? 500);
const LONG = Number(process.env.BENCH_INSTR_LONG ?? 1500);
const WARMUP_REQUESTS = 300;
/** Requests run about 100 times slower under valgrind: a budget the chain cannot use up. */
const BUDGET_MS = 600_000;
/** One run under callgrind takes 2-4 minutes; a run past this is stuck. */
const RUN_TIMEOUT_MS = 20 * 60_000;

const CONFIGURATIONS = [
  { name: 'plain chain (no plugin)', parts: [] },
  { name: 'whole plugin', parts: ALL_PARTS },
  { name: 'contract floor (stand-ins, not the package)', parts: ['floor'] },
];

/** Child, under callgrind: one chain, warm-up, then `total` requests, then exit. */
async function measure(parts, total) {
  const port = await startChain(parts);
  await drive(port, WARMUP_REQUESTS, BUDGET_MS);
  await drive(port, total, BUDGET_MS);
  process.exit(0);
}

/** Runs one measurement under callgrind and resolves with the instructions it executed. */
function countInstructions(parts, total) {
  const args = [
    '--tool=callgrind',
    // V8 writes machine code at run time: valgrind must notice it.
    '--smc-check=all-non-file',
    '--callgrind-out-file=/dev/null',
    process.execPath,
    '--predictable',
    fileURLToPath(import.meta.url),
    '--measure',
    parts.join(','),
    String(total),
  ];
  return new Promise((resolve, reject) => {
    // Batches leave when full, every 512 spans (the SDK's default batch size):
    // the heap then holds a bounded number of ended spans and each request
    // costs the same, where 4,096-span batches made garbage collection a
    // step function of the request count.
    const env = { ...process.env, BENCH_CHAIN_EXPORT_DELAY_MS: String(2 ** 31 - 1), BENCH_CHAIN_EXPORT_BATCH: '512' };
    const child = spawn('valgrind', args, { stdio: ['ignore', 'ignore', 'pipe'], env });
    let stderr = '';
    const timer = setTimeout(() => child.kill('SIGKILL'), RUN_TIMEOUT_MS);
    child.stderr.on('data', (chunk) => (stderr += chunk));
    child.once('error', (error) => {
      clearTimeout(timer);
      reject(error.code === 'ENOENT' ? new Error('valgrind is not installed (Debian package valgrind)') : error);
    });
    child.once('close', (code) => {
      clearTimeout(timer);
      const collected = /Collected\s*:\s*(\d+)/.exec(stderr);
      if (code !== 0 || collected === null) return reject(new Error(`callgrind run [${parts}] ${total} failed (exit ${code}): ${stderr.slice(-400)}`));
      resolve(Number(collected[1]));
    });
  });
}

/** Runs `jobs` (functions returning promises) with at most `limit` at a time, in order. */
async function runLimited(jobs, limit) {
  const results = new Array(jobs.length);
  let next = 0;
  const worker = async () => {
    while (next < jobs.length) {
      const index = next++;
      results[index] = await jobs[index]();
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, jobs.length) }, worker));
  return results;
}

async function main() {
  const jobs = CONFIGURATIONS.flatMap((c) => [SHORT, LONG].map((total) => () => countInstructions(c.parts, total)));
  const counts = await runLimited(jobs, Math.max(1, cpus().length));
  const perRequest = CONFIGURATIONS.map((_, i) => (counts[2 * i + 1] - counts[2 * i]) / (LONG - SHORT));
  const plain = perRequest[0];
  const lines = [
    '<!-- bench:http:instructions -->',
    '### HTTP chain in instructions (`npm run bench:http:instructions`)',
    '',
    `The bench:http chain in one process, driven over 16 keep-alive sockets, under valgrind's callgrind with V8's`,
    `--predictable; each configuration runs ${fmt(SHORT)} and ${fmt(LONG)} requests (after ${WARMUP_REQUESTS} warm-up requests), and the`,
    `difference of the two instruction counts over the ${fmt(LONG - SHORT)} extra requests is the cost of one request, driver included.`,
    'Batches of 512 spans are exported when full (no export timer). Instructions do not depend on what else the',
    `machine runs; they leave out cache misses, waits and the work of GC helper threads. Node ${process.version}.`,
    '',
    '| configuration | instructions / request | over plain | plain / configuration |',
    '| --- | ---: | ---: | ---: |',
    ...CONFIGURATIONS.map((c, i) => {
      const over = i === 0 ? '' : `+${fmt(perRequest[i] - plain)} (+${fmt((100 * (perRequest[i] - plain)) / plain, 1)}%)`;
      return `| ${c.name} | ${fmt(perRequest[i])} | ${over} | ${fmt(plain / perRequest[i], 3)} |`;
    }),
    '',
    '"plain / configuration" is the throughput ratio the instruction counts alone would give a CPU-bound chain.',
    'The contract floor (bench/contract-floor.mjs) is not the package: bare stand-ins for the least work the deadline',
    'contract adds, with no validation and no abort handling.',
    '<!-- /bench:http:instructions -->',
  ];
  console.log(lines.join('\n'));
}

if (process.argv[2] === '--measure') await measure(process.argv[3] ? process.argv[3].split(',') : [], Number(process.argv[4]));
else await main();
