// Instruction counts of the bench:http chain (bench/http-chain.mjs) under
// valgrind's callgrind, for bench:http:instructions.
//
// One process per configuration: start-up, 300 warm-up requests, then one or
// more segments of 1,500 requests each. Callgrind dumps its counters (and
// starts from zero again) when the 500th and the 1,500th reply of a segment
// are in, so every second dump holds the instructions of exactly the 1,000
// requests between them: the difference between 500 and 1,500 requests, with
// start-up, warm-up and exit left out. The marks are calls to os.getPriority(),
// whose libuv function (uv_os_getpriority) nothing else on this path calls,
// named to callgrind with --dump-before. Segments after the first change which
// pieces of the contract floor are left out (floorOmissions), so that one
// process with one start-up prices every piece: start-up is most of a run's
// instructions, and on a loaded machine a run under callgrind takes many
// minutes.
//
// V8 runs with --predictable (no concurrent compilation or GC threads, whose
// timing would otherwise change what the main thread does), the batch span
// processor exports only full batches of 512 (no timer), and requests carry a
// budget valgrind's slowdown cannot use up. The figures are instructions, not
// time: garbage collection and compilation are in them, cache misses and
// waits are not.
//
// Run as a script (`node bench/callgrind.mjs --measure PARTS [OMIT;OMIT;...]`)
// it is the child under callgrind.
import { cpus, getPriority } from 'node:os';
import { fileURLToPath } from 'node:url';
import { callgrindDumps } from './callgrind-run.mjs';
import { floorOmissions, startChain } from './http-chain.mjs';
import { drive } from './socket-driver.mjs';

export const SHORT = 500;
export const LONG = 1500;
export const WARMUP_REQUESTS = 300;
/** Requests run about 100 times slower under valgrind: a budget the chain cannot use up. */
const BUDGET_MS = 600_000;
/** A run under callgrind takes minutes on an idle machine, far longer on a loaded one; a run past this is stuck. */
const RUN_TIMEOUT_MS = 90 * 60_000;

/** `segments`: for each segment, the floor pieces left out during it. */
async function measure(parts, segments) {
  const port = await startChain(parts);
  await drive(port, WARMUP_REQUESTS, BUDGET_MS);
  const fixed = new Set(floorOmissions);
  for (const omit of segments) {
    floorOmissions.clear();
    for (const piece of [...fixed, ...omit]) floorOmissions.add(piece);
    // No gc() at the marks: tried, and a forced full collection made the
    // 1,000 requests after it cost 1.5 times as many instructions (plain
    // chain: 2.37 M instead of 1.59 M per request).
    await drive(port, LONG, BUDGET_MS, (done) => {
      if (done === SHORT || done === LONG) getPriority();
    });
  }
  process.exit(0);
}

/**
 * Runs one configuration under callgrind and resolves with, for each of its
 * segments (one segment unless `segments` says more), the instructions per
 * request (`total`) and how many of them V8 spent compiling optimized code
 * (`compile`, from Runtime_CompileOptimized: see compileInstructions).
 */
export async function countWindows(parts, segments = [[]]) {
  // Batches leave when full, every 512 spans (the SDK's default batch size):
  // the heap then holds a bounded number of ended spans and each request
  // costs the same, where 4,096-span batches made garbage collection a
  // step function of the request count.
  const env = { ...process.env, BENCH_CHAIN_EXPORT_DELAY_MS: String(2 ** 31 - 1), BENCH_CHAIN_EXPORT_BATCH: '512' };
  const args = ['--measure', parts.join(','), segments.map((omit) => omit.join(',')).join(';')];
  // out.1: start-up to the first mark; then, per segment, the measured
  // requests (out.2, out.4, ...) and what lies before the next segment's
  // first mark (out.3, ...).
  const measured = segments.map((_, k) => 2 * k + 1);
  const dumps = await callgrindDumps(fileURLToPath(import.meta.url), args, { env, timeoutMs: RUN_TIMEOUT_MS, label: `[${parts}]`, compileOf: measured });
  return measured.map((index) => {
    if (dumps[index] === undefined) throw new Error(`callgrind run [${parts}]: no dump out.${index + 1}`);
    return { total: dumps[index].total / (LONG - SHORT), compile: dumps[index].compile / (LONG - SHORT) };
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

/**
 * The windows of each configuration (`{ parts, segments? }`), in order, one
 * run per core (BENCH_INSTR_JOBS to change that): for each, an array of
 * countWindows' `{ total, compile }` per segment.
 */
export async function instructionsPerRequest(configurations) {
  // The longest run (most segments) starts first, so that it does not run alone at the end.
  const order = configurations.map((_, i) => i).sort((a, b) => (configurations[b].segments?.length ?? 1) - (configurations[a].segments?.length ?? 1));
  const results = await runLimited(
    order.map((i) => () => countWindows(configurations[i].parts, configurations[i].segments)),
    Number(process.env.BENCH_INSTR_JOBS ?? Math.max(1, cpus().length)),
  );
  const inOrder = new Array(configurations.length);
  order.forEach((i, k) => (inOrder[i] = results[k]));
  return inOrder;
}

if (process.argv[2] === '--measure' && process.argv[1] === fileURLToPath(import.meta.url)) {
  const segments = (process.argv[4] ?? '').split(';').map((omit) => (omit === '' ? [] : omit.split(',')));
  await measure(process.argv[3] ? process.argv[3].split(',') : [], segments);
}
