// Instruction counts of the bench:http chain (bench/http-chain.mjs) under
// valgrind's callgrind, for bench:http:instructions.
//
// One process per configuration: start-up, 300 warm-up requests, then one or
// more segments: 1,500 requests each for the first three, 5,500 each after the
// uncounted stretch (SETTLED_LONG). Callgrind dumps its counters (and starts
// from zero again) when the 500th and the last reply of a segment are in, so
// every second dump holds the instructions of exactly the requests between
// them (the first window: the difference between 500 and 1,500 requests), with
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
// time: scavenges and compilation are in them, cache misses and waits are not.
//
// Two things keep the counts from depending on the machine's speed, which
// under valgrind they otherwise did (GC_ARGS):
// - No full (mark-compact) collection falls in any window. V8 sizes the old
//   generation after each one from how fast the collector and the program ran
//   in wall-clock time, and its memory reducer starts one on a timer. Under
//   valgrind, where a run lasts minutes, that put a full collection in one
//   window of a run and in the next window of another run of the same build
//   (it cost about 640,000 instructions per request of its window on Node
//   24), so one window of three settled ones decided the figure. The old space
//   starts at 1 GiB, and the memory reducer is off: a run of this length never
//   fills it (natively it ends below 200 MB). What that leaves out: run
//   natively with V8's defaults over the same 29,300 requests (Node 24), the
//   plain chain, the contract floor and the whole plugin each made one full
//   collection after start-up, during the uncounted stretch, so the settled
//   figures leave out about the same from each. How much sooner what the
//   plugin keeps alive with each exported span brings the next one is not
//   measured here.
// - The settled windows come after SETTLE_REQUESTS requests more, run with
//   callgrind's instrumentation switched off (callgrind_control -i off/on;
//   fast, and not counted). V8 13 (Node 24) keeps tiering code up for some
//   20,000 requests: without that stretch its windows 4 to 6 still spent
//   90,000 to 130,000 instructions per request compiling, and what they ran
//   was still getting cheaper from window to window. After 20,000 the first
//   settled window of 5,000 still compiled about 8,000 per request and ran
//   4,600 (whole plugin) to 8,200 (plain chain) dearer than the next two, so
//   the stretch is 30,000.
//
// Run as a script (`node bench/callgrind.mjs --measure PARTS [OMIT;OMIT;...]`)
// it is the child under callgrind.
import { cpus, getPriority } from 'node:os';
import { fileURLToPath } from 'node:url';
import { callgrindArgs, callgrindDumps, GC_ARGS, switchInstrumentation } from './callgrind-run.mjs';
import { floorOmissions, startChain } from './http-chain.mjs';
import { drive } from './socket-driver.mjs';

export const SHORT = 500;
export const LONG = 1500;
export const WARMUP_REQUESTS = 300;
/** Segments counted before the uncounted stretch; the later ones are the settled windows. */
export const SETTLE_AFTER_SEGMENTS = 3;
/**
 * Requests in each segment from SETTLE_AFTER_SEGMENTS on (the settled windows and
 * the floor's pieces), counted from the SHORTth reply to the last: 5,000 counted
 * requests instead of 1,000. A scavenge on this chain costs some 29 million
 * instructions (Node 24) and falls every 650 to 800 requests, so a window of
 * 1,000 held one or two of them: on one build the three settled windows read
 * 558,777, 584,834 and 585,022 instructions per request, and one scavenge more
 * or less in a window moved a configuration's figure by 10,000 (BENCH_INSTR_SETTLED_LONG
 * to change it). Over 5,000 requests a window holds six or seven.
 */
export const SETTLED_LONG = Number(process.env.BENCH_INSTR_SETTLED_LONG ?? 5_500);
if (!Number.isInteger(SETTLED_LONG) || SETTLED_LONG <= SHORT) {
  throw new RangeError(`BENCH_INSTR_SETTLED_LONG must be a whole number of requests above ${SHORT}, got ${process.env.BENCH_INSTR_SETTLED_LONG}`);
}

/** How many requests segment `index` (from 0) runs: LONG before the uncounted stretch, SETTLED_LONG after it. */
export function segmentLength(index) {
  return index >= SETTLE_AFTER_SEGMENTS ? SETTLED_LONG : LONG;
}
/** Requests of the uncounted stretch (BENCH_INSTR_SETTLE to change it; 0 for none). */
export const SETTLE_REQUESTS = Number(process.env.BENCH_INSTR_SETTLE ?? 30_000);
/** Requests run about 100 times slower under valgrind: a budget the chain cannot use up. */
const BUDGET_MS = 600_000;
/** A run under callgrind takes minutes on an idle machine, far longer on a loaded one; a run past this is stuck. */
const RUN_TIMEOUT_MS = 90 * 60_000;

/** `segments`: for each segment, the floor pieces left out during it. */
async function measure(parts, segments) {
  const port = await startChain(parts);
  await drive(port, WARMUP_REQUESTS, BUDGET_MS);
  const fixed = new Set(floorOmissions);
  let segment = 0;
  for (const omit of segments) {
    if (segment++ === SETTLE_AFTER_SEGMENTS && SETTLE_REQUESTS > 0) {
      switchInstrumentation('off');
      await drive(port, SETTLE_REQUESTS, BUDGET_MS);
      switchInstrumentation('on');
    }
    floorOmissions.clear();
    for (const piece of [...fixed, ...omit]) floorOmissions.add(piece);
    // No gc() at the marks: tried, and a forced full collection made the
    // 1,000 requests after it cost 1.5 times as many instructions (plain
    // chain: 2.37 M instead of 1.59 M per request).
    const length = segmentLength(segment - 1);
    await drive(port, length, BUDGET_MS, (done) => {
      if (done === SHORT || done === length) getPriority();
    });
  }
  process.exit(0);
}

/**
 * The valgrind arguments of one chain process under callgrind, dumping into
 * `outFile`.N: `segments` as for countWindows, `nodeArgs` added to GC_ARGS.
 */
export function chainCallgrindArgs(outFile, parts, segments, nodeArgs = []) {
  return callgrindArgs(outFile, [...GC_ARGS, ...nodeArgs], fileURLToPath(import.meta.url), measureArgs(parts, segments));
}

/** The child's own arguments: `--measure PARTS OMIT;OMIT;...` (see the end of this file). */
function measureArgs(parts, segments) {
  return ['--measure', parts.join(','), segments.map((omit) => omit.join(',')).join(';')];
}

/** The environment of a chain process under callgrind (see countWindows). */
export function chainEnv() {
  // Batches leave when full, every 512 spans (the SDK's default batch size):
  // the heap then holds a bounded number of ended spans and each request
  // costs the same, where 4,096-span batches made garbage collection a
  // step function of the request count.
  return { ...process.env, BENCH_CHAIN_EXPORT_DELAY_MS: String(2 ** 31 - 1), BENCH_CHAIN_EXPORT_BATCH: '512' };
}

/**
 * Runs one configuration under callgrind and resolves with, for each of its
 * segments (one segment unless `segments` says more), the instructions per
 * request (`total`) and how many of them V8 spent compiling optimized code
 * (`compile`: see compileInstructions in callgrind-run.mjs).
 */
export async function countWindows(parts, segments = [[]]) {
  // out.1: start-up to the first mark; then, per segment, the measured
  // requests (out.2, out.4, ...) and what lies before the next segment's
  // first mark (out.3, ...).
  const measured = segments.map((_, k) => 2 * k + 1);
  const dumps = await callgrindDumps(fileURLToPath(import.meta.url), measureArgs(parts, segments), {
    env: chainEnv(),
    nodeArgs: GC_ARGS,
    timeoutMs: RUN_TIMEOUT_MS,
    label: `[${parts}]`,
    compileOf: measured,
  });
  return measured.map((index, k) => {
    if (dumps[index] === undefined) throw new Error(`callgrind run [${parts}]: no dump out.${index + 1}`);
    const requests = segmentLength(k) - SHORT;
    return { total: dumps[index].total / requests, compile: dumps[index].compile / requests };
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
