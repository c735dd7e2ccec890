// npm run bench:grpc:instructions — the deadline plugin's cost on unary gRPC
// calls in instructions, which a shared, noisy machine does not change.
//
// The bench:grpc workload (bench/grpc-workload.mjs: client and server in one
// process, instrumentation-grpc on both sides) runs under valgrind's callgrind
// (bench/callgrind-run.mjs), one process per mode: start-up and WARMUP calls,
// then COUNT calls between two marks, so the middle dump holds exactly those
// calls, client and server side together (the kernel's socket work is not
// counted). The batch span processor exports only full batches of 512 (no
// timer, whose firing would fall differently from run to run), and calls
// carry a budget valgrind's slowdown cannot use up, so none is cut.
//
// Needs valgrind. Prints a Markdown section between <!-- bench:grpc:instructions --> markers.
import { cpus, getPriority } from 'node:os';
import { fileURLToPath } from 'node:url';
import { callgrindDumps } from './callgrind-run.mjs';
import { CONCURRENCY, MODES, startGrpc } from './grpc-workload.mjs';
import { fmt } from './stats.mjs';

const COUNT = Number(process.env.BENCH_GRPC_INSTR_COUNT ?? 1_500);
/** Calls before the window. V8 is still compiling after these (see the footnote it prints); each 1,000 more costs minutes under valgrind. */
const WARMUP = Number(process.env.BENCH_GRPC_INSTR_WARMUP ?? 1_500);
/** Calls run about 100 times slower under valgrind: a budget they cannot use up. */
const BUDGET_MS = 3_600_000;
/** The young generation's semi-space, pinned (V8's largest default on 64-bit), as bench:db:instructions does. */
const SEMI_SPACE_MB = 16;
/** A run under callgrind takes a few minutes; one past this is stuck. */
const RUN_TIMEOUT_MS = 30 * 60_000;

/** Child, under callgrind: warm-up, then `count` calls between two marks, then exit. */
async function measure(mode, count) {
  const { batch, close } = await startGrpc(mode, { budgetMs: BUDGET_MS, exportBatch: 512, exportDelayMs: 2 ** 31 - 1 });
  await batch(WARMUP);
  // Scavenges then fall in the window as the calls' own allocations make them, not by chance.
  globalThis.gc({ type: 'minor' });
  getPriority();
  await batch(count);
  getPriority();
  await close();
  process.exit(0);
}

async function countInstructions(mode) {
  const dumps = await callgrindDumps(fileURLToPath(import.meta.url), ['--measure', mode, String(COUNT)], {
    timeoutMs: RUN_TIMEOUT_MS,
    label: mode,
    nodeArgs: ['--expose-gc', `--min-semi-space-size=${SEMI_SPACE_MB}`, `--max-semi-space-size=${SEMI_SPACE_MB}`],
    compileOf: [1],
  });
  // out.1: start-up and warm-up; out.2: the measured calls.
  const measured = dumps[1];
  if (measured === undefined || !(measured.total > 0)) throw new Error(`callgrind ${mode}: no measured dump`);
  return { total: measured.total / COUNT, steady: (measured.total - measured.compile) / COUNT };
}

async function main() {
  const perCall = new Map();
  let next = 0;
  const worker = async () => {
    while (next < MODES.length) {
      const mode = MODES[next++];
      perCall.set(mode, await countInstructions(mode));
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Number(process.env.BENCH_INSTR_JOBS ?? cpus().length)) }, worker));
  const row = (mode, name) => {
    const cells = ['steady', 'total'].flatMap((kind) => {
      const own = perCall.get(mode)[kind];
      const base = perCall.get('without')[kind];
      if (mode === 'without') return [fmt(own), '', ''];
      const sign = own >= base ? '+' : '−';
      return [fmt(own), `${sign}${fmt(Math.abs(own - base))} (${sign}${fmt((100 * Math.abs(own - base)) / base, 1)}%)`, fmt(own / base, 3)];
    });
    return `| ${name} | ${cells.join(' | ')} |`;
  };
  const lines = [
    '<!-- bench:grpc:instructions -->',
    '### gRPC unary calls in instructions (`npm run bench:grpc:instructions`)',
    '',
    `The bench:grpc workload under valgrind's callgrind: the process's user-space instructions (client and server together)`,
    `for ${fmt(COUNT)} unary calls, ${CONCURRENCY} in flight, after ${fmt(WARMUP)} warm-up calls, counted between two marks in one`,
    `process per mode (the kernel is not counted), divided by ${fmt(COUNT)}. V8 with --predictable, the young generation`,
    `pinned at ${SEMI_SPACE_MB} MB and emptied just before the first mark. "Without compilation" leaves out TurboFan's`,
    `(Runtime_CompileOptimized, inclusive), a one-off cost in a window this early. Node ${process.version}.`,
    '',
    '| mode | without compilation / call | over without | mode / without | total / call | over without | mode / without |',
    '| --- | ---: | ---: | ---: | ---: | ---: | ---: |',
    row('without', 'without'),
    row('contract', 'contract only (no DeadlineInstrumentation)'),
    row('with', 'with'),
    '',
    '"mode / without" is the CPU-per-call ratio the instruction counts alone give; for this CPU-bound process,',
    'its inverse is about the throughput ratio (target ≥ 0.95, so "with" at ≤ about 1.05). The kernel\'s socket work,',
    'the same in every mode, is left out, so these ratios are larger than bench:grpc\'s CPU-time ones. Under',
    '--predictable V8 optimizes on the main thread, and this early it still does, more in the modes with more code',
    '(in a profile of calls 1,000 to 1,500 compilation was most of every mode\'s instructions): hence the two columns.',
    'Code not optimized yet still runs slower in both. Repeated runs of one mode differ by a few percent.',
    '<!-- /bench:grpc:instructions -->',
  ];
  console.log(lines.join('\n'));
}

if (process.argv[2] === '--measure') await measure(process.argv[3], Number(process.argv[4]));
else await main();
