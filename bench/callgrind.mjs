// The one instructions harness, shared by bench:http:instructions,
// bench:db:instructions and bench:grpc:instructions (bench/instructions.bench.mjs).
//
// It runs a workload under valgrind's callgrind, which counts the instructions
// the process executes in user space (servers in other processes and the
// kernel are not counted), so a shared, loaded machine does not change the
// figures. A workload is a module in bench/ exporting `open(config)`, which
// resolves with `{ run(count), close() }`: `run` does `count` operations
// (requests, statements, calls) and resolves when they are done.
//
// One process per configuration and run: start-up and WARMUP operations (in two
// runs of the workload) with callgrind's counting switched off (callgrind_control -i off/on: fast, and not
// counted), a minor gc() so that scavenges then fall where the operations'
// own allocations put them, then WINDOWS windows of COUNT operations, each
// between two marks at which callgrind dumps its counters. The marks are calls
// to os.getPriority(), whose libuv function (uv_os_getpriority) nothing else
// on these paths calls, named to callgrind with --dump-before.
//
// Node runs with V8's --predictable (no concurrent compilation or GC threads,
// whose timing would change what the main thread does), the young generation
// pinned at 16 MB, the old space starting at 1 GiB and the memory reducer off:
// otherwise V8 sizes the heap, and so places full collections, by how fast the
// process ran in wall-clock time, which under valgrind depends on the machine's
// load. Under --predictable V8 also compiles optimized code on the main thread:
// that one-off cost is counted (callgrind_annotate, Compiler::CompileOptimized
// and its OSR form, inclusive) so that it can be reported apart.
//
// As a script (`node bench/callgrind.mjs --child WORKLOAD CONFIG WARMUP COUNT WINDOWS`)
// it is the child under callgrind.
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { cpus, getPriority, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const MARK_FUNCTION = 'uv_os_getpriority';
const NODE_ARGS = [
  '--predictable',
  '--expose-gc',
  '--min-semi-space-size=16',
  '--max-semi-space-size=16',
  '--initial-old-space-size=1024',
  '--no-memory-reducer',
];
/** A run takes minutes under valgrind on a loaded machine; one past this is stuck. */
const RUN_TIMEOUT_MS = Number(process.env.BENCH_INSTR_TIMEOUT_MS ?? 40 * 60_000);

/**
 * Counts one configuration of a workload in one process under callgrind.
 * Resolves with, per window, `{ total, compile }`: instructions per operation,
 * and how many of them V8 spent compiling optimized code.
 */
export function countWindows({ workload, config, warmup, count, windows }) {
  const dir = mkdtempSync(join(tmpdir(), 'bench-callgrind-'));
  const args = [
    '--tool=callgrind',
    // V8 writes machine code at run time: valgrind must notice it.
    '--smc-check=all-non-file',
    '--instr-atstart=no',
    `--dump-before=${MARK_FUNCTION}`,
    `--callgrind-out-file=${join(dir, 'out')}`,
    process.execPath,
    ...NODE_ARGS,
    fileURLToPath(import.meta.url),
    '--child',
    workload,
    config,
    String(warmup),
    String(count),
    String(windows),
  ];
  return new Promise((resolve, reject) => {
    const child = spawn('valgrind', args, { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    const timer = setTimeout(() => child.kill('SIGKILL'), RUN_TIMEOUT_MS);
    const finish = (error, value) => {
      clearTimeout(timer);
      rmSync(dir, { recursive: true, force: true });
      if (error) reject(error);
      else resolve(value);
    };
    child.stderr.on('data', (chunk) => (stderr += chunk));
    child.once('error', (error) => finish(error.code === 'ENOENT' ? new Error('valgrind is not installed (Debian package valgrind)') : error));
    child.once('close', (code) => {
      try {
        if (code !== 0) throw new Error(`exit ${code}`);
        // out.1: start-up and warm-up (not counted: zero); out.2 ... out.(WINDOWS+1): the windows.
        const dumps = readdirSync(dir)
          .filter((f) => /^out\.\d+$/.test(f))
          .sort((a, b) => Number(a.slice(4)) - Number(b.slice(4)))
          .slice(1, 1 + windows);
        if (dumps.length !== windows) throw new Error(`${dumps.length} window dumps, expected ${windows}`);
        finish(
          undefined,
          dumps.map((f) => {
            const file = join(dir, f);
            const total = Number(/^(?:totals|summary):\s*(\d+)/m.exec(readFileSync(file, 'utf8'))?.[1]);
            const compile = compileInstructions(file);
            if (!(total > 0) || !(compile >= 0)) throw new Error(`could not read ${f}`);
            return { total: total / count, compile: compile / count };
          }),
        );
      } catch (error) {
        finish(new Error(`callgrind ${workload} ${config} failed (${error.message}): ${stderr.slice(-600)}`));
      }
    });
  });
}

/**
 * The instructions V8 spent in its optimizing compilers in one dump:
 * Compiler::CompileOptimized plus Compiler::CompileOptimizedOSR, inclusive (0
 * for one that never ran), read with callgrind_annotate; NaN if that fails.
 * Every tier-up goes through these two on each supported Node line.
 */
function compileInstructions(file) {
  const annotated = spawnSync('callgrind_annotate', ['--inclusive=yes', '--threshold=100', file], { encoding: 'utf8', maxBuffer: 256 * 2 ** 20 });
  if (annotated.status !== 0) return NaN;
  let sum = 0;
  for (const entry of ['CompileOptimized', 'CompileOptimizedOSR']) {
    const line = new RegExp(`^\\s*([\\d,]+) .*:v8::internal::Compiler::${entry}\\(`, 'm').exec(annotated.stdout);
    if (line !== null) sum += Number(line[1].replaceAll(',', ''));
  }
  return sum;
}

/**
 * Counts every job (`{ workload, config, warmup, count, windows }`), at most
 * BENCH_INSTR_JOBS (default: one per core) at a time; resolves with their
 * windows in the jobs' order.
 */
export async function countAll(jobs) {
  const results = new Array(jobs.length);
  let next = 0;
  const worker = async () => {
    while (next < jobs.length) {
      const index = next++;
      const started = Date.now();
      results[index] = await countWindows(jobs[index]);
      console.error(`callgrind: ${jobs[index].workload} ${jobs[index].config} done in ${Math.round((Date.now() - started) / 1000)} s`);
    }
  };
  const limit = Number(process.env.BENCH_INSTR_JOBS ?? cpus().length);
  await Promise.all(Array.from({ length: Math.max(1, Math.min(limit, jobs.length)) }, worker));
  return results;
}

/** Switches callgrind's counting of this process off or on, from inside it. */
function switchInstrumentation(state) {
  const control = spawnSync('callgrind_control', ['-i', state, String(process.pid)], { encoding: 'utf8', timeout: 120_000 });
  if (control.status !== 0 || !/OK/.test(control.stdout)) {
    throw new Error(`callgrind_control -i ${state} failed (status ${control.status}): ${control.stdout}${control.stderr}`);
  }
}

/** The child under callgrind. Counting is off from the start (--instr-atstart=no) until the warm-up is done. */
async function child(workload, config, warmup, count, windows) {
  const { open } = await import(new URL(workload, import.meta.url).href);
  const { run, close } = await open(config);
  // The warm-up in two runs, so that what happens between runs (a workload's deadline disposed and the next
  // one opened, as between any two requests) has happened, with its one-off deoptimizations, before counting.
  await run(Math.ceil(warmup / 2));
  await run(Math.floor(warmup / 2));
  globalThis.gc({ type: 'minor' });
  switchInstrumentation('on');
  for (let window = 0; window < windows; window++) {
    getPriority();
    await run(count);
  }
  getPriority();
  await close();
  process.exit(0);
}

if (process.argv[2] === '--child' && process.argv[1] === fileURLToPath(import.meta.url)) {
  const [workload, config, warmup, count, windows] = process.argv.slice(3);
  await child(workload, config, Number(warmup), Number(count), Number(windows));
}
