// The callgrind launcher shared by the instruction-count benchmarks: runs a
// Node script under valgrind's callgrind and returns the instruction totals
// of the dumps the script asks for. The script marks a dump by calling
// os.getPriority(), whose libuv function (uv_os_getpriority) nothing else on
// these paths calls, named to callgrind with --dump-before. V8 runs with
// --predictable (no concurrent compilation or GC threads, whose timing would
// otherwise change what the main thread does).
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const MARK_FUNCTION = 'uv_os_getpriority';

/** V8 flags of every process under callgrind: no full collection at a time V8 sets by the wall clock (see callgrind.mjs). */
export const GC_ARGS = ['--initial-old-space-size=1024', '--no-memory-reducer'];

/** valgrind's arguments for `node --predictable ...nodeArgs script ...args` under callgrind, dumping at each mark into `outFile`.N. */
export function callgrindArgs(outFile, nodeArgs, script, args) {
  return [
    '--tool=callgrind',
    // V8 writes machine code at run time: valgrind must notice it.
    '--smc-check=all-non-file',
    `--dump-before=${MARK_FUNCTION}`,
    `--callgrind-out-file=${outFile}`,
    process.execPath,
    '--predictable',
    ...nodeArgs,
    script,
    ...args,
  ];
}

/**
 * Runs `node --predictable script ...args` under callgrind, which dumps its
 * counters (and starts from zero again) before each call to os.getPriority()
 * the script makes, and resolves with `{ total }` for each of those dumps in
 * order (out.1, out.2, ...; the dump at exit is left out), plus `compile`
 * (see compileInstructions) for the dumps whose indices `compileOf` lists.
 * `nodeArgs` go to node after --predictable. Rejects on a failed run; kills a
 * run past `timeoutMs` (a stuck one).
 */
export function callgrindDumps(script, args, { env = process.env, timeoutMs, label = script, nodeArgs = [], compileOf = [] }) {
  const dir = mkdtempSync(join(tmpdir(), 'bench-callgrind-'));
  const valgrindArgs = callgrindArgs(join(dir, 'out'), nodeArgs, script, args);
  return new Promise((resolve, reject) => {
    const child = spawn('valgrind', valgrindArgs, { stdio: ['ignore', 'ignore', 'pipe'], env });
    let stderr = '';
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
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
        const dumps = readdirSync(dir)
          .filter((f) => /^out\.\d+$/.test(f))
          .sort((a, b) => Number(a.slice(4)) - Number(b.slice(4)));
        const results = dumps.map((f, index) => {
          const total = /^(?:totals|summary):\s*(\d+)/m.exec(readFileSync(join(dir, f), 'utf8'));
          if (total === null) throw new Error(`no totals in ${f}`);
          if (!compileOf.includes(index)) return { total: Number(total[1]) };
          const compile = compileInstructions(join(dir, f));
          if (!(compile >= 0)) throw new Error(`callgrind_annotate could not read ${f}`);
          return { total: Number(total[1]), compile };
        });
        finish(undefined, results);
      } catch (error) {
        finish(new Error(`callgrind run ${label} failed (${error.message}): ${stderr.slice(-400)}`));
      }
    });
  });
}

/**
 * The instructions V8 spent in its optimizing compilers in one callgrind dump:
 * Compiler::CompileOptimized plus Compiler::CompileOptimizedOSR, inclusive (0
 * for one that never ran), read with callgrind_annotate; NaN if that fails.
 * These two are what every tier-up goes through on each supported Node line.
 * The runtime function that calls them is not: V8 11 (Node 20) calls
 * Runtime_CompileOptimized, V8 12 and 13 (Node 22 and 24) call
 * Runtime_OptimizeTurbofanEager and Runtime_OptimizeMaglevEager, and counting
 * the first alone found no compilation at all on Node 24. Under --predictable
 * V8 optimizes on the main thread, so a window soon after start-up counts a
 * one-off cost that grows with the amount of code on the path, not with its
 * per-call cost.
 */
export function compileInstructions(file) {
  const annotated = spawnSync('callgrind_annotate', ['--inclusive=yes', '--threshold=100', file], { encoding: 'utf8', maxBuffer: 256 * 1024 * 1024 });
  if (annotated.status !== 0) return NaN;
  // `name'2` lines are recursion cycles, already inside the plain entry.
  let sum = 0;
  for (const entry of ['CompileOptimized', 'CompileOptimizedOSR']) {
    const line = new RegExp(`^\\s*([\\d,]+) .*:v8::internal::Compiler::${entry}\\(`, 'm').exec(annotated.stdout);
    if (line !== null) sum += Number(line[1].replaceAll(',', ''));
  }
  return sum;
}

/** Switches callgrind's counting of this process off or on, from inside it; throws if callgrind_control fails. */
export function switchInstrumentation(state) {
  const control = spawnSync('callgrind_control', ['-i', state, String(process.pid)], { encoding: 'utf8', timeout: 120_000 });
  if (control.status !== 0 || !/OK/.test(control.stdout)) {
    throw new Error(`callgrind_control -i ${state} failed (status ${control.status}): ${control.stdout}${control.stderr}`);
  }
}
