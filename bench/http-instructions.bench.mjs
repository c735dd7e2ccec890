// npm run bench:http:instructions — the plugin's cost on the HTTP chain in
// instructions, which a shared, noisy machine does not change, measured
// against what OpenTelemetry itself costs on the same chain; and the contract
// floor priced piece by piece.
//
// bench:http and bench:http:parts measure time, and on a machine whose speed
// drifts by ±10% within a run they cannot resolve a few percent. This one
// counts the instructions one request through the bench:http chain costs
// (bench/callgrind.mjs) in four configurations: bare Node (the same two
// servers and undici.request, no OTel), the plain chain (OTel SDK with the
// http and undici instrumentations), the whole plugin, and the contract floor
// (bench/contract-floor.mjs). OTel's own added cost is plain minus bare; every
// other configuration's added cost is given as a share of it.
//
// Each configuration is counted in six windows in one process: three of
// 1,000 requests, then (after the uncounted stretch) three of 5,000, long
// enough to hold several scavenges each (SETTLED_LONG in callgrind.mjs). The first is issue 16's method (the difference between 500 and
// 1,500 requests after 300 warm-up requests); it is mostly V8 compiling the
// code it has just found hot, a cost paid once per process that grows with the
// amount of hot code. The windows go on until that has settled: callgrind
// counts the compilation in each window too (compileInstructions in
// callgrind-run.mjs), the last three windows come after a stretch of requests
// run uncounted (SETTLE_REQUESTS in callgrind.mjs: V8 13 takes that long to
// stop tiering up), and the "settled" figure is the mean of those three
// without compilation, what every further request costs. Scavenges stay in
// every figure; no full collection falls in a window (GC_ARGS). With
// BENCH_INSTR_FLOOR=1 the floor's run then prices each of its pieces: in
// later windows of the same process, one piece at a time is left out, and the
// piece costs what the floor saves without it, both without compilation. A
// last window repeats the whole floor, to show how far the process drifted.
//
// Needs valgrind (Debian package `valgrind`, whose callgrind_control switches
// the counting off and on). Prints a Markdown section between
// <!-- bench:http:instructions --> markers (`http:instructions:nodeN` on a
// Node line other than 20), and with BENCH_INSTR_FLOOR=1 a second one between
// <!-- bench:http:floor --> markers. With
// BENCH_INSTR_RAW=FILE it also writes the counted windows to FILE as JSON;
// `node bench/http-instructions.bench.mjs --render FILE` prints the sections
// from such a file again without counting.
import { ALL_PARTS } from './http-chain.mjs';
import { readFileSync, writeFileSync } from 'node:fs';
import { instructionsPerRequest, LONG, SETTLE_REQUESTS, SETTLED_LONG, SHORT, WARMUP_REQUESTS } from './callgrind.mjs';
import { fmt } from './stats.mjs';

/** The plugin may add at most this share of OTel's own added instructions (issue 16 §4). */
const GOAL_SHARE = 0.3;
const PIECE_BY_PIECE = process.env.BENCH_INSTR_FLOOR === '1';

/** The pieces that do not overlap, whose costs add up; the baggage header is one of the three headers. */
const PIECES = [
  { piece: 'histogram', name: 'the `deadline.remaining` histogram record on the two server spans' },
  { piece: 'headers', name: 'the three headers (inject; undici writes them, node:http parses them, the getter reads one)' },
  { piece: 'attributes', name: 'the eight attributes on each of the three spans, and the per-span state they come from' },
  { piece: 'timer', name: 'a timer per outgoing call' },
  { piece: 'close', name: "a 'close' listener per server response" },
  { piece: 'context', name: 'the OTel context entry at each hop' },
];
const BAGGAGE = { piece: 'baggage', name: '… of which the baggage copy (`baggage: deadline.at_ms=…`: the header, and its parse by the W3C baggage propagator)' };

// Six windows per configuration; the settled figure is the mean of the last
// three. The floor's run goes on with its pieces: the contract before issue 16
// (the histogram on every span), each piece left out in turn, and the floor again.
const FLOOR = ['client-histogram'];
const WINDOWS = 6;
const SETTLED_FROM = 3;
const SIX_WINDOWS = Array.from({ length: WINDOWS }, () => []);
const FLOOR_SEGMENTS = [
  ...Array.from({ length: WINDOWS }, () => FLOOR),
  ...(PIECE_BY_PIECE ? [[], ...[...PIECES, BAGGAGE].map(({ piece }) => [...FLOOR, piece]), FLOOR] : []),
];

const CONFIGURATIONS = [
  { name: 'bare Node (two servers + undici.request, no OTel)', parts: ['bare'], segments: SIX_WINDOWS },
  { name: 'plain chain (OTel SDK + http + undici instrumentations)', parts: [], segments: SIX_WINDOWS },
  { name: 'whole plugin', parts: ALL_PARTS, segments: SIX_WINDOWS },
  { name: 'contract floor (stand-ins, not the package)', parts: ['floor'], segments: FLOOR_SEGMENTS },
];

/** Instructions per request without V8's optimizing compiler. */
const executed = (w) => w.total - w.compile;
const mean = (values) => values.reduce((a, b) => a + b, 0) / values.length;

const pct = (x) => `${fmt(100 * x, 1)}%`;

/**
 * The section's name: `name` on Node 20, the line BENCHMARKS.md is generated
 * on, else `name:nodeN`, which bench:all keeps beside it (scripts/bench-all.mjs).
 */
function sectionName(name, node) {
  const major = nodeMajor(node);
  return major === BENCHMARKS_NODE_MAJOR ? name : `${name}:node${major}`;
}

function lineSuffix(node) {
  return nodeMajor(node) === BENCHMARKS_NODE_MAJOR ? '' : ` on Node ${nodeMajor(node)}`;
}

const BENCHMARKS_NODE_MAJOR = 20;
const nodeMajor = (version) => Number(/^v(\d+)/.exec(version)?.[1]);

/** The counted windows: from a file written with BENCH_INSTR_RAW (--render FILE), or counted now. */
async function countedRuns() {
  if (process.argv[2] === '--render') return JSON.parse(readFileSync(process.argv[3], 'utf8'));
  const counted = {
    node: process.version,
    settleRequests: SETTLE_REQUESTS,
    runs: await instructionsPerRequest(CONFIGURATIONS),
  };
  if (process.env.BENCH_INSTR_RAW) writeFileSync(process.env.BENCH_INSTR_RAW, `${JSON.stringify(counted)}\n`);
  return counted;
}

async function main() {
  const { node, settleRequests, runs } = await countedRuns();
  const piecesCounted = runs[3].length > WINDOWS;
  const early = runs.map((windows) => windows[0].total);
  const earlyCompile = runs.map((windows) => windows[0].compile);
  const steady = runs.map((windows) => windows[1].total);
  const settled = runs.map((windows) => mean(windows.slice(SETTLED_FROM, WINDOWS).map(executed)));
  const settledCompile = runs.map((windows) => mean(windows.slice(SETTLED_FROM, WINDOWS).map((w) => w.compile)));
  const otel = (v) => v[1] - v[0];
  const share = (v, i) => (v[i] - v[1]) / otel(v);
  const verdict = (v) => (share(v, 2) <= GOAL_SHARE ? 'met' : 'NOT met');
  const settledFrom = WARMUP_REQUESTS + SETTLED_FROM * LONG + settleRequests;
  const lastWindow = settledFrom + (WINDOWS - SETTLED_FROM - 1) * SETTLED_LONG;
  const block = sectionName('http:instructions', node);
  const lines = [
    `<!-- bench:${block} -->`,
    `### HTTP chain in instructions (\`npm run bench:http:instructions\`)${lineSuffix(node)}`,
    '',
    `The bench:http chain in one process per configuration, driven over 16 keep-alive sockets, under valgrind's callgrind`,
    `with V8's --predictable. After ${WARMUP_REQUESTS} warm-up requests each process runs ${SETTLED_FROM} windows of ${fmt(LONG)} requests and counts the`,
    `instructions between the ${fmt(SHORT)}th and the ${fmt(LONG)}th reply of each: ${fmt(LONG - SHORT)} requests, driver included.`,
    `"Early" is the first window (requests ${fmt(WARMUP_REQUESTS + SHORT)} to ${fmt(WARMUP_REQUESTS + LONG)}: issue 16's "difference between 500 and 1,500`,
    `requests"), "steady" the second (requests ${fmt(WARMUP_REQUESTS + LONG + SHORT)} to ${fmt(WARMUP_REQUESTS + 2 * LONG)}). Both still pay for V8 compiling the code it has`,
    `just found hot (the "JIT" column: Compiler::CompileOptimized and its OSR form, TurboFan and Maglev), once per process.`,
    `After window ${SETTLED_FROM}, ${fmt(settleRequests)} more requests run uncounted (callgrind's instrumentation switched off), because V8 13`,
    'goes on tiering code up for that long. "Settled" is what each further request costs: the mean of windows',
    `${SETTLED_FROM + 1} to ${WINDOWS}, each of ${fmt(SETTLED_LONG)} requests counted from the ${fmt(SHORT)}th reply (requests ${fmt(settledFrom + SHORT)} to ${fmt(lastWindow + SETTLED_LONG)}: a scavenge`,
    `costs tens of millions of instructions and falls every several hundred requests, so a window of 1,000 held one or two and one more or less`,
    `moved a figure by some 10,000 per request), without compilation (${fmt(settledCompile[2])} instructions per request`,
    `were still compiling in the plugin's, ${fmt(settledCompile[1])} in the plain chain's). Scavenges are in every figure; no full collection falls in`,
    'any window (the old space starts at 1 GiB and the memory reducer is off: where V8 put one otherwise depended on how',
    'fast the machine ran). Batches of 512 spans are exported when full and metrics never (no export timer). Instructions',
    `do not depend on what else the machine runs; they leave out cache misses and waits. Node ${node}.`,
    '',
    "| configuration | early | of which JIT | share of OTel's own added cost | steady | share | settled | over plain | share of OTel's own added cost |",
    '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
    ...CONFIGURATIONS.map((c, i) => {
      const cost = (v) => (i < 2 ? '' : pct(share(v, i)));
      return `| ${c.name} | ${fmt(early[i])} | ${fmt(earlyCompile[i])} | ${cost(early)} | ${fmt(steady[i])} | ${cost(steady)} | ${fmt(settled[i])} | ${i < 2 ? '' : `+${fmt(settled[i] - settled[1])}`} | ${cost(settled)} |`;
    }),
    '',
    `OpenTelemetry's own added cost (plain minus bare): **${fmt(otel(early))}** instructions per request early, **${fmt(otel(steady))}** steady,`,
    `**${fmt(otel(settled))}** settled. The whole plugin adds **${pct(share(early, 2))}** of it early, **${pct(share(steady, 2))}** steady and **${pct(share(settled, 2))}** settled`,
    `(goal ≤ ${fmt(100 * GOAL_SHARE)}%: ${verdict(early)} early, ${verdict(steady)} steady, ${verdict(settled)} settled); the contract floor ${pct(share(early, 3))}, ${pct(share(steady, 3))} and ${pct(share(settled, 3))}.`,
    `As CPU-bound throughput ratios (plain / configuration), the whole plugin ${fmt(early[1] / early[2], 3)} early, ${fmt(steady[1] / steady[2], 3)} steady and ${fmt(settled[1] / settled[2], 3)} settled.`,
    'The contract floor (bench/contract-floor.mjs) is not the package: bare stand-ins for the least work the deadline',
    `contract adds, with no validation and no abort handling${piecesCounted ? '; the next section prices it piece by piece' : ''}.`,
    `<!-- /bench:${block} -->`,
  ];
  if (piecesCounted) lines.push('', ...floorSection(runs[3].slice(WINDOWS).map(executed), settled[3], settled[1], otel(settled), node));
  console.log(lines.join('\n'));
}

/** The floor piece by piece, from the windows after its settled ones (instructions without compilation). */
function floorSection(segments, floor, plain, otel, node) {
  const [before, ...rest] = segments;
  const without = rest.slice(0, PIECES.length + 1);
  const again = rest[PIECES.length + 1];
  const added = floor - plain;
  const row = (name, cost) => `| ${name} | ${fmt(cost)} | ${fmt((100 * cost) / added, 1)}% | ${fmt((100 * cost) / otel, 1)}% |`;
  const pieces = PIECES.map((_, k) => floor - without[k]);
  const remainder = added - pieces.reduce((a, b) => a + b, 0);
  return [
    `<!-- bench:${sectionName('http:floor', node)} -->`,
    '### The contract floor, piece by piece (`npm run bench:http:instructions`)',
    '',
    "The contract floor's run of the section above (bench/contract-floor.mjs: the histogram on hop-entry spans only)",
    `continues after its settled windows in more windows of ${fmt(SETTLED_LONG)} requests, counted the same way (without compilation): in`,
    'each, one piece of the floor is left out, and the piece costs what the floor saves without it, against the settled plain',
    'chain. The process ends with the whole floor again, which shows how far its figures drifted over the windows:',
    `${fmt(floor)} settled, ${fmt(again)} at the end.`,
    `The floor adds ${fmt(added)} instructions per request to the plain chain, ${fmt((100 * added) / otel, 1)}% of what OpenTelemetry itself adds;`,
    `with the histogram on every span, as before issue 16, ${fmt(before - plain)} (${fmt((100 * (before - plain)) / otel, 1)}%).`,
    '',
    "| piece | instructions / request | share of the floor's added cost | share of OTel's own added cost |",
    '| --- | ---: | ---: | ---: |',
    row('the histogram record on the client span (recorded before issue 16, no longer)', before - floor),
    ...PIECES.map((p, k) => row(p.name, pieces[k])),
    row(BAGGAGE.name, floor - without[PIECES.length]),
    row("the rest: the processor's calls, the first hop's extract, the pieces' interplay", remainder),
    `<!-- /bench:${sectionName('http:floor', node)} -->`,
  ];
}

await main();
