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
// The 'floor' mode is not the package: bare stand-ins for the least work the
// deadline contract needs (bench/grpc-contract-floor.mjs). With
// BENCH_GRPC_FLOOR_PIECES=1 (or a comma list of pieces) each piece of the floor
// is priced in a process of its own, the floor with that piece left out,
// counted in the same window as the modes: the piece costs what the floor
// saves without it, without compilation. Not in later windows of the floor's
// own process, as bench:http:instructions does: tried, the whole floor's
// windows there went from 1,588,165 to 1,134,319 per call and alternated with
// the pieces' (V8 still optimizing, and probably deoptimizing at each change of
// omissions), so the pieces came out at several times the floor's whole cost.
//
// Needs valgrind. Prints a Markdown section between <!-- bench:grpc:instructions --> markers,
// and with BENCH_GRPC_FLOOR_PIECES a second one between <!-- bench:grpc:floor --> markers.
import { cpus, getPriority } from 'node:os';
import { fileURLToPath } from 'node:url';
import { callgrindDumps } from './callgrind-run.mjs';
import { GRPC_FLOOR_PIECES } from './grpc-contract-floor.mjs';
import { CONCURRENCY, floorOmissions, MODES, startGrpc } from './grpc-workload.mjs';
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
const PIECES_ASKED = process.env.BENCH_GRPC_FLOOR_PIECES ?? '';
/** The floor's pieces priced, each in a run 'floor-<piece>' of its own. */
const PIECES = PIECES_ASKED === '1' ? GRPC_FLOOR_PIECES : GRPC_FLOOR_PIECES.filter((piece) => PIECES_ASKED.split(',').includes(piece));

/** What each piece is, for the table. */
const PIECE_NAMES = {
  histogram: 'the `deadline.remaining` histogram record on the server span',
  headers: 'the two `x-deadline-*` headers (inject, grpc-js metadata and HTTP/2 both ways, the getter reads one)',
  baggage: 'the `deadline.at_ms` baggage entry (the W3C propagator writes and parses `baggage`)',
  attributes: 'the eight attributes on the client span and the server span, and the per-span state they come from',
  timer: 'a timer per outgoing call',
  cancel: "a 'cancelled' listener per server call",
  context: 'the OTel context entry (set by the server\'s extract, read by inject, the processor and the timer)',
};

/** Child, under callgrind: warm-up, then `count` calls between two marks, then exit. */
async function measure(run, count) {
  // 'floor-<piece>': the floor with that piece left out.
  const [mode, omitted] = run.split('-');
  if (omitted !== undefined) floorOmissions.add(omitted);
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
  const runs = [...MODES, ...PIECES.map((piece) => `floor-${piece}`)];
  let next = 0;
  const worker = async () => {
    while (next < runs.length) {
      const mode = runs[next++];
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
    `(Compiler::CompileOptimized and its OSR form, inclusive), a one-off cost in a window this early. Node ${process.version}.`,
    '',
    '| mode | without compilation / call | over without | mode / without | total / call | over without | mode / without |',
    '| --- | ---: | ---: | ---: | ---: | ---: | ---: |',
    row('without', 'without'),
    row('contract', 'contract only (no DeadlineInstrumentation)'),
    row('with', 'with'),
    row('floor', 'contract floor (stand-ins, not the package)'),
    '',
    '"mode / without" is the CPU-per-call ratio the instruction counts alone give; for this CPU-bound process,',
    'its inverse is about the throughput ratio (target ≥ 0.95, so "with" at ≤ about 1.05). The kernel\'s socket work,',
    'the same in every mode, is left out, so these ratios are larger than bench:grpc\'s CPU-time ones. Under',
    '--predictable V8 optimizes on the main thread, and this early it still does, more in the modes with more code',
    '(in a profile of calls 1,000 to 1,500 compilation was most of every mode\'s instructions): hence the two columns.',
    'Code not optimized yet still runs slower in both. Repeated runs of one mode differ by a few percent.',
    ...floorNote(perCall),
    '<!-- /bench:grpc:instructions -->',
  ];
  if (PIECES.length > 0) lines.push('', ...floorSection(perCall));
  console.log(lines.join('\n'));
}

/** The floor's added cost against the contract's and the target. */
function floorNote(perCall) {
  const added = (mode, kind) => perCall.get(mode)[kind] - perCall.get('without')[kind];
  const share = (kind) => `${fmt((100 * added('floor', kind)) / added('contract', kind), 1)}%`;
  const ratio = perCall.get('floor').steady / perCall.get('without').steady;
  return [
    '',
    'The contract floor (bench/grpc-contract-floor.mjs) is not the package: bare stand-ins for the least work the deadline',
    'contract adds to these calls (the two headers and the baggage entry on the wire, a context entry on the server, the',
    'eight attributes on both spans, the histogram on the server span, a timer per call and a cancellation listener), with',
    `no validation and no abort handling. It adds ${share('steady')} of what "contract only" adds without compilation (${share('total')} in total);`,
    `floor / without ${fmt(ratio, 3)} without compilation, so about ${fmt(1 / ratio, 3)} as a throughput ratio (target ≥ 0.95: ${1 / ratio >= 0.95 ? 'met' : 'NOT met'}).`,
  ];
}

/** The floor piece by piece: the floor's run against a run without each piece (instructions per call). */
function floorSection(perCall) {
  const floor = perCall.get('floor');
  const without = perCall.get('without');
  const row = (piece, kind) => {
    const cost = floor[kind] - perCall.get(`floor-${piece}`)[kind];
    return [fmt(cost), `${fmt((100 * cost) / (floor[kind] - without[kind]), 1)}%`];
  };
  return [
    '<!-- bench:grpc:floor -->',
    '### The gRPC contract floor, piece by piece (`BENCH_GRPC_FLOOR_PIECES=1 npm run bench:grpc:instructions`)',
    '',
    'Each piece of the floor left out in a process of its own, counted in the same window as the section above: the piece',
    "costs what the floor saves without it. One run each, so a piece under about 30,000 (a few percent of a mode's",
    'instructions, the spread of repeated runs) decides little.',
    '',
    "| piece | without compilation / call | share of the floor's added cost | total / call | share |",
    '| --- | ---: | ---: | ---: | ---: |',
    ...PIECES.map((piece) => `| ${PIECE_NAMES[piece]} | ${[...row(piece, 'steady'), ...row(piece, 'total')].join(' | ')} |`),
    '<!-- /bench:grpc:floor -->',
  ];
}

if (process.argv[2] === '--measure') await measure(process.argv[3], Number(process.argv[4]));
else await main();
