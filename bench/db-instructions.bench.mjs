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
// --predictable, and with 1,000 warm-up operations it still optimized about
// 130 functions in the 2,000 measured ones (--trace-opt, pg-throughput: 130,
// then 19, 10, 4, 1 in the next rounds of 2,000): that one-off compilation was
// about 70% of the instructions counted, and it grows with the amount of code
// on the path, not with its per-call cost. So the table shows the
// instructions without TurboFan compilation (the inclusive cost of
// Compiler::CompileOptimized and its OSR form, read with callgrind_annotate) next to the total.
// The functions not optimized yet ran in the interpreter meanwhile: the
// warm-up is 8,000 operations (BENCH_DB_INSTR_WARMUP), after which redis GET
// guard-off counted 77k steady instructions instead of 107k.
// And scavenges fell in the window by chance (two or three of them, ~10k
// instructions per operation each): the young generation is emptied (a minor
// gc()) just before the first mark and its size is pinned, so the scavenges
// counted follow from what the operations allocate and keep.
//
// Needs valgrind (and its callgrind_annotate). Prints a Markdown section between <!-- bench:db:instructions --> markers.
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { cpus, getPriority, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { compileInstructions } from './callgrind-run.mjs';
import { BASELINE, MODES, startWorkload } from './db-workload.mjs';
import { fmt } from './stats.mjs';

const COUNT = Number(process.env.BENCH_DB_INSTR_COUNT ?? 2000);
const WARMUP = Number(process.env.BENCH_DB_INSTR_WARMUP ?? 8000);
/** BENCH_DB_INSTR_WORKLOADS=redis-throughput counts only that workload (while iterating). */
const WORKLOADS = process.env.BENCH_DB_INSTR_WORKLOADS ? process.env.BENCH_DB_INSTR_WORKLOADS.split(',') : ['pg-throughput', 'redis-throughput'];
/** BENCH_DB_INSTR_MODES=guard-off,guard-on counts only those modes (while iterating); a mode's baseline missing leaves its comparison empty. */
const RUN_MODES = process.env.BENCH_DB_INSTR_MODES ? process.env.BENCH_DB_INSTR_MODES.split(',') : MODES;
/** The young generation's semi-space, pinned (V8's largest default on 64-bit). */
const SEMI_SPACE_MB = 16;
/** A run under callgrind takes about a minute; one past this is stuck. */
const RUN_TIMEOUT_MS = 10 * 60_000;

/** Child, under callgrind: warm-up, then `count` operations between two marks, then exit. */
async function measure(mode, workload, count) {
  const { run, close } = await startWorkload(mode);
  await run(workload, { count: WARMUP });
  globalThis.gc({ type: 'minor' });
  getPriority();
  await run(workload, { count });
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
      // Dumps out.1 (start-up, warm-up), out.2 (the measured operations), then out (the rest).
      const parts = readdirSync(dir).filter((f) => /^out\.\d+$/.test(f)).sort((a, b) => Number(a.slice(4)) - Number(b.slice(4)));
      const totals = parts.map((f) => Number(/^(?:totals|summary):\s*(\d+)/m.exec(readFileSync(join(dir, f), 'utf8'))?.[1]));
      const compile = totals.length < 2 ? NaN : compileInstructions(join(dir, parts[1]));
      rmSync(dir, { recursive: true, force: true });
      if (code !== 0 || totals.length < 2 || !(totals[1] > 0) || !(compile >= 0)) {
        return reject(new Error(`callgrind ${mode} ${workload} failed (exit ${code}, dumps ${totals}, compile ${compile}): ${stderr.slice(-400)}`));
      }
      resolve({ total: totals[1], compile });
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
  const perOp = (workload, mode, kind) => {
    const { total, compile } = counts.get(`${workload}/${mode}`);
    return (kind === 'total' ? total : total - compile) / COUNT;
  };
  const over = (own, base) => {
    const sign = own >= base ? '+' : '−';
    return `${sign}${fmt(Math.abs(own - base))} (${sign}${fmt((100 * Math.abs(own - base)) / base, 1)}%)`;
  };
  const lines = [
    '<!-- bench:db:instructions -->',
    '### Databases in instructions (`npm run bench:db:instructions`)',
    '',
    `The bench:db workloads under valgrind's callgrind: the client process's user-space instructions for ${fmt(COUNT)} operations`,
    `after ${fmt(WARMUP)} warm-up operations, counted between two marks in one process per workload and mode (the servers and the`,
    `kernel are not counted), divided by ${fmt(COUNT)}. V8 with --predictable, its young generation emptied at the first mark and`,
    `pinned at ${SEMI_SPACE_MB} MB. "steady" leaves out optimizing compilation (Compiler::CompileOptimized and its OSR form, inclusive), which V8 still does`,
    'on the main thread in those operations: once per function, a one-off that falls in the window by chance. Node ' + `${process.version}.`,
    '',
    '| workload | mode | steady / op | total / op | compared with | steady over it | it / mode (steady) | total over it |',
    '| --- | --- | ---: | ---: | --- | ---: | ---: | ---: |',
    ...WORKLOADS.flatMap((workload) =>
      RUN_MODES.map((mode) => {
        const own = perOp(workload, mode, 'steady');
        const ownTotal = perOp(workload, mode, 'total');
        const baseline = BASELINE[mode];
        if (baseline === undefined || !RUN_MODES.includes(baseline)) return `| ${workload} | ${mode} | ${fmt(own)} | ${fmt(ownTotal)} | | | | |`;
        const base = perOp(workload, baseline, 'steady');
        const baseTotal = perOp(workload, baseline, 'total');
        return `| ${workload} | ${mode} | ${fmt(own)} | ${fmt(ownTotal)} | ${baseline} | ${over(own, base)} | ${fmt(base / own, 3)} | ${over(ownTotal, baseTotal)} |`;
      }),
    ),
    '',
    '"it / mode" is the throughput ratio the client\'s steady instruction counts alone would give a client-bound workload;',
    'the servers\' work, the same in every mode, brings the real ratio closer to 1. Garbage collection is in both columns.',
    'Repeated runs of one mode have differed by up to 5% in "steady" (redis-throughput guard-off, one build: 73,952 and 77,375).',
    '<!-- /bench:db:instructions -->',
  ];
  console.log(lines.join('\n'));
}

if (process.argv[2] === '--measure') await measure(process.argv[3], process.argv[4], Number(process.argv[5]));
else await main();
