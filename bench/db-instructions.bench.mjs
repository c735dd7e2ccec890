// npm run bench:db:instructions — the deadline guard's cost on database calls
// in instructions, which a shared, noisy machine does not change.
//
// The bench:db workloads (bench/db-workload.mjs) run under valgrind's
// callgrind, which counts the instructions the client process executes in
// user space (the PostgreSQL and Redis servers are other processes, and the
// kernel's socket work is not counted either). One process per mode and
// workload: start-up and a warm-up, then the measured operations between two
// marks at which callgrind dumps its counters (calls to os.getPriority(),
// whose libuv function nothing else here calls, named with --dump-before), so
// the middle dump holds exactly those operations. V8 runs with --predictable
// (no concurrent compilation or GC threads), and the batch span processor
// exports only full batches (no timer).
//
// Three things would otherwise swamp a per-operation difference of a few
// percent. V8 optimizes functions (TurboFan) on the main thread under
// --predictable: once per function, a one-off that grows with the amount of
// code on the path, not with its per-call cost. So the table shows the
// instructions without TurboFan compilation (the inclusive cost of
// Compiler::CompileOptimized and its OSR form, read with callgrind_annotate).
// The functions not optimized yet run in the interpreter meanwhile, and V8
// goes on tiering code up for tens of thousands of operations: right after
// 8,000 warm-up operations Redis GET still compiled about 120,000
// instructions per operation, and the window without them cost 76,775
// (guard-off) where later windows settle near 54,000; the guard's cost read
// there (-273 in the section this bench printed before) was the two modes'
// different stages of tiering, not the guard. So, as bench:http:instructions
// does, an early window is counted right after the warm-up, then
// BENCH_DB_INSTR_SETTLE operations (60,000) run with callgrind's counting
// switched off, and the "settled" figure is the mean of the three windows
// after them. And scavenges fall in a window by chance: the young generation
// is emptied (a minor gc()) before the first mark and its size is pinned, the
// old space starts at 1 GiB and the memory reducer is off (no full
// collection at a time set by the wall clock), and three windows are averaged.
//
// Needs valgrind (and its callgrind_annotate). Prints a Markdown section between <!-- bench:db:instructions --> markers.
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { cpus, getPriority, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { compileInstructions, GC_ARGS, switchInstrumentation } from './callgrind-run.mjs';
import { BASELINE, MODES, startWorkload } from './db-workload.mjs';
import { fmt } from './stats.mjs';

/**
 * Operations per window. A Redis GET workload scavenges about once per 2,000
 * operations (16 MB of young generation), and where each scavenge falls is
 * fixed for a build but moves with any change to what a call allocates: with
 * windows of 2,000, one build's three settled windows held three scavenges and
 * another's two, and the two builds, whose code differed by 282 instructions
 * per GET, read 1,281 apart in garbage collection alone (6,088 against 4,807
 * per GET, profiled 2026-12-04). Windows of 10,000 hold four or five each, so
 * one scavenge more or less moves the mean by a fifth as much.
 */
const COUNT = Number(process.env.BENCH_DB_INSTR_COUNT ?? 10_000);
const WARMUP = Number(process.env.BENCH_DB_INSTR_WARMUP ?? 8000);
/** Operations run uncounted between the early window and the settled ones. */
const SETTLE = Number(process.env.BENCH_DB_INSTR_SETTLE ?? 60_000);
/** Windows of COUNT operations averaged into the settled figure. */
const SETTLED_WINDOWS = 3;
/** BENCH_DB_INSTR_WORKLOADS=redis-throughput counts only that workload (while iterating). */
const WORKLOADS = process.env.BENCH_DB_INSTR_WORKLOADS ? process.env.BENCH_DB_INSTR_WORKLOADS.split(',') : ['pg-throughput', 'redis-throughput'];
/** BENCH_DB_INSTR_MODES=guard-off,guard-on counts only those modes (while iterating); a mode's baseline missing leaves its comparison empty. */
const RUN_MODES = process.env.BENCH_DB_INSTR_MODES ? process.env.BENCH_DB_INSTR_MODES.split(',') : MODES;
/** The young generation's semi-space, pinned (V8's largest default on 64-bit). */
const SEMI_SPACE_MB = 16;
/** A run under callgrind takes one to three minutes (longer on a loaded machine); one past this is stuck. */
const RUN_TIMEOUT_MS = 20 * 60_000;

/**
 * Child, under callgrind: warm-up, an early window of `count` operations, the
 * uncounted settling stretch, then SETTLED_WINDOWS windows of `count`, each
 * between two marks, then exit.
 */
async function measure(mode, workload, count) {
  const { run, close } = await startWorkload(mode);
  await run(workload, { count: WARMUP });
  globalThis.gc({ type: 'minor' });
  getPriority();
  await run(workload, { count });
  getPriority();
  if (SETTLE > 0) {
    switchInstrumentation('off');
    await run(workload, { count: SETTLE });
    switchInstrumentation('on');
  }
  for (let window = 0; window < SETTLED_WINDOWS; window++) {
    getPriority();
    await run(workload, { count });
  }
  getPriority();
  await close();
  process.exit(0);
}

/** Runs one measurement under callgrind; resolves with the instructions between the two marks. */
function countInstructions(mode, workload, count) {
  const dir = mkdtempSync(join(tmpdir(), 'bench-db-callgrind-'));
  const args = [
    '--tool=callgrind',
    // V8 writes machine code at run time: valgrind must notice it.
    '--smc-check=all-non-file',
    '--dump-before=uv_os_getpriority',
    `--callgrind-out-file=${join(dir, 'out')}`,
    process.execPath,
    '--predictable',
    ...GC_ARGS,
    '--expose-gc',
    `--min-semi-space-size=${SEMI_SPACE_MB}`,
    `--max-semi-space-size=${SEMI_SPACE_MB}`,
    fileURLToPath(import.meta.url),
    '--measure',
    mode,
    workload,
    String(count),
  ];
  return new Promise((resolve, reject) => {
    const child = spawn('valgrind', args, { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    const timer = setTimeout(() => child.kill('SIGKILL'), RUN_TIMEOUT_MS);
    child.stderr.on('data', (chunk) => (stderr += chunk));
    child.once('error', (error) => {
      clearTimeout(timer);
      rmSync(dir, { recursive: true, force: true });
      reject(error.code === 'ENOENT' ? new Error('valgrind is not installed (Debian package valgrind)') : error);
    });
    child.once('close', (code) => {
      clearTimeout(timer);
      // Dumps out.1 (start-up, warm-up), out.2 (the early window), out.3 (the
      // settling stretch, not counted, and the first settled mark), then one
      // per settled window, then out (the rest).
      const parts = readdirSync(dir).filter((f) => /^out\.\d+$/.test(f)).sort((a, b) => Number(a.slice(4)) - Number(b.slice(4)));
      const read = (f) => {
        const total = Number(/^(?:totals|summary):\s*(\d+)/m.exec(readFileSync(join(dir, f), 'utf8'))?.[1]);
        return { total, compile: compileInstructions(join(dir, f)) };
      };
      const early = parts.length > 1 ? read(parts[1]) : undefined;
      const settled = parts.slice(3, 3 + SETTLED_WINDOWS).map(read);
      rmSync(dir, { recursive: true, force: true });
      const windows = [early, ...settled];
      if (code !== 0 || settled.length !== SETTLED_WINDOWS || windows.some((w) => !(w?.total > 0) || !(w.compile >= 0))) {
        return reject(new Error(`callgrind ${mode} ${workload} failed (exit ${code}, ${parts.length} dumps): ${stderr.slice(-400)}`));
      }
      const mean = (key) => settled.reduce((sum, w) => sum + w[key], 0) / SETTLED_WINDOWS;
      resolve({ early, settled: { total: mean('total'), compile: mean('compile') } });
    });
  });
}

async function main() {
  const jobs = WORKLOADS.flatMap((workload) => RUN_MODES.map((mode) => ({ workload, mode })));
  const counts = new Map();
  let next = 0;
  const worker = async () => {
    while (next < jobs.length) {
      const { workload, mode } = jobs[next++];
      counts.set(`${workload}/${mode}`, await countInstructions(mode, workload, COUNT));
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, cpus().length) }, worker));
  /** Instructions per operation of one window (`early` or `settled`), without compilation unless `withCompile`. */
  const perOp = (workload, mode, window, withCompile = false) => {
    const { total, compile } = counts.get(`${workload}/${mode}`)[window];
    return (withCompile ? total : total - compile) / COUNT;
  };
  const over = (own, base) => {
    const sign = own >= base ? '+' : '−';
    return `${sign}${fmt(Math.abs(own - base))} (${sign}${fmt((100 * Math.abs(own - base)) / base, 1)}%)`;
  };
  const lines = [
    '<!-- bench:db:instructions -->',
    '### Databases in instructions (`npm run bench:db:instructions`)',
    '',
    "The bench:db workloads under valgrind's callgrind: the client process's user-space instructions per operation, one",
    'process per workload and mode (the servers and the kernel are not counted), counted between marks in windows of',
    `${fmt(COUNT)} operations. "Early" is the window right after ${fmt(WARMUP)} warm-up operations; then ${fmt(SETTLE)} operations run with`,
    `callgrind's counting switched off, and "settled" is the mean of the ${SETTLED_WINDOWS} windows after them: what each further`,
    'operation costs. Both leave out optimizing compilation (Compiler::CompileOptimized and its OSR form, inclusive), which',
    'V8 does on the main thread under --predictable; "JIT" is what the settled windows still compiled. The young generation is',
    `emptied before the first mark and pinned at ${SEMI_SPACE_MB} MB, the old space starts at 1 GiB, the memory reducer is off. Node ${process.version}.`,
    '',
    '| workload | mode | early / op | settled / op | JIT, settled | compared with | settled over it | it / mode (settled) |',
    '| --- | --- | ---: | ---: | ---: | --- | ---: | ---: |',
    ...WORKLOADS.flatMap((workload) =>
      RUN_MODES.map((mode) => {
        const early = perOp(workload, mode, 'early');
        const own = perOp(workload, mode, 'settled');
        const jit = perOp(workload, mode, 'settled', true) - own;
        const row = `| ${workload} | ${mode} | ${fmt(early)} | ${fmt(own)} | ${fmt(jit)}`;
        const baseline = BASELINE[mode];
        if (baseline === undefined || !RUN_MODES.includes(baseline)) return `${row} | | | |`;
        const base = perOp(workload, baseline, 'settled');
        return `${row} | ${baseline} | ${over(own, base)} | ${fmt(base / own, 3)} |`;
      }),
    ),
    '',
    '"it / mode" is the throughput ratio the client\'s settled instruction counts alone would give a client-bound workload;',
    'the servers\' work, the same in every mode, brings the real ratio closer to 1. Garbage collection is in every column.',
    '<!-- /bench:db:instructions -->',
  ];
  console.log(lines.join('\n'));
}

if (process.argv[2] === '--measure') await measure(process.argv[3], process.argv[4], Number(process.argv[5]));
else await main();
