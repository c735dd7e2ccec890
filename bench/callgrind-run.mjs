// The callgrind launcher shared by the instruction-count benchmarks: runs a
// Node script under valgrind's callgrind and returns the instruction totals
// of the dumps the script asks for. The script marks a dump by calling
// os.getPriority(), whose libuv function (uv_os_getpriority) nothing else on
// these paths calls, named to callgrind with --dump-before. V8 runs with
// --predictable (no concurrent compilation or GC threads, whose timing would
// otherwise change what the main thread does).
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const MARK_FUNCTION = 'uv_os_getpriority';

/**
 * Runs `node --predictable script ...args` under callgrind, which dumps its
 * counters (and starts from zero again) before each call to os.getPriority()
 * the script makes, and resolves with the instruction totals of those dumps
 * in order (out.1, out.2, ...; the dump at exit is left out). Rejects on a
 * failed run; kills a run past `timeoutMs` (a stuck one).
 */
export function callgrindDumps(script, args, { env = process.env, timeoutMs, label = script }) {
  const dir = mkdtempSync(join(tmpdir(), 'bench-callgrind-'));
  const valgrindArgs = [
    '--tool=callgrind',
    // V8 writes machine code at run time: valgrind must notice it.
    '--smc-check=all-non-file',
    `--dump-before=${MARK_FUNCTION}`,
    `--callgrind-out-file=${join(dir, 'out')}`,
    process.execPath,
    '--predictable',
    script,
    ...args,
  ];
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
        const totals = dumps.map((f) => {
          const total = /^(?:totals|summary):\s*(\d+)/m.exec(readFileSync(join(dir, f), 'utf8'));
          if (total === null) throw new Error(`no totals in ${f}`);
          return Number(total[1]);
        });
        finish(undefined, totals);
      } catch (error) {
        finish(new Error(`callgrind run ${label} failed (${error.message}): ${stderr.slice(-400)}`));
      }
    });
  });
}
