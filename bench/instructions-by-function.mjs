// Where the instructions of the bench:http chain go, function by function:
// the chain under valgrind's callgrind (bench/callgrind.mjs, six windows, the
// last three of 5,000 requests after the uncounted stretch that lets V8
// finish tiering up), with V8's --perf-basic-prof naming its
// JIT code. Callgrind sees compiled JavaScript only as addresses; the map V8
// writes to /tmp/perf-<pid>.map gives each address range its function, so the
// self instructions of every JS function, builtin and C++ function can be
// added up. The settled windows (4 to 6) are averaged, per request.
//
//   node bench/instructions-by-function.mjs whole plain
//
// runs each named configuration (whole: the whole plugin; plain: no plugin;
// floor: the contract floor; or a comma list of bench/http-chain.mjs parts;
// or db:<workload>:<mode>, a bench:db:instructions workload and mode such as
// db:redis-throughput:guard-on, per operation over its settled windows of
// 10,000) one process at a time, and prints the functions whose self instructions
// per request differ most between the first and the second (or, with one
// configuration, the functions that cost most). Builtins such as
// KeyedLoadIC_Megamorphic or MapConstructor are where much of the difference
// lands: they run on behalf of the JavaScript around them. By hand, for
// finding what to cut; no figure in BENCHMARKS.md comes from it.
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { callgrindArgs, GC_ARGS } from './callgrind-run.mjs';
import { chainCallgrindArgs, chainEnv, SETTLED_LONG, SHORT } from './callgrind.mjs';
import { ALL_PARTS } from './http-chain.mjs';

const SETTLED_DUMPS = [8, 10, 12];
/** bench:db:instructions' settled windows (out.4 to out.6) and what each counts. */
const DB_SETTLED_DUMPS = [4, 5, 6];
const DB_OPERATIONS_PER_WINDOW = 10_000;
const STACK_BOTTOM = /PROGRAM TOTALS|\(below main\)|^\?\?\?:main |__libc_start_main|ld-linux|node::Start\(|NodeMainInstance::Run|SpinEventLoopInternal/;
/** What each settled window counts (bench/callgrind.mjs). */
const REQUESTS_PER_WINDOW = SETTLED_LONG - SHORT;
const NAMED = { whole: ALL_PARTS.join(','), plain: '', floor: 'floor' };

/** How to run a configuration: valgrind's arguments, and which dumps are settled windows of how many operations. */
function plan(configuration, dir) {
  const db = /^db:([\w-]+):([\w-]+)$/.exec(configuration);
  if (db !== null) {
    const script = fileURLToPath(new URL('./db-instructions.bench.mjs', import.meta.url));
    const nodeArgs = ['--perf-basic-prof', ...GC_ARGS, '--expose-gc', '--min-semi-space-size=16', '--max-semi-space-size=16'];
    const args = callgrindArgs(join(dir, 'out'), nodeArgs, script, ['--measure', db[2], db[1], String(DB_OPERATIONS_PER_WINDOW)]);
    return { args, env: process.env, dumps: DB_SETTLED_DUMPS, perWindow: DB_OPERATIONS_PER_WINDOW };
  }
  const parts = NAMED[configuration] ?? configuration;
  const args = chainCallgrindArgs(join(dir, 'out'), parts === '' ? [] : parts.split(','), Array.from({ length: 6 }, () => []), ['--perf-basic-prof']);
  return { args, env: chainEnv(), dumps: SETTLED_DUMPS, perWindow: REQUESTS_PER_WINDOW };
}

/** Runs one configuration under callgrind; resolves with the folder holding its dumps and V8's map, and its plan. */
function run(configuration) {
  const dir = mkdtempSync(join(tmpdir(), 'bench-by-function-'));
  const { args, env, dumps, perWindow } = plan(configuration, dir);
  return new Promise((resolve, reject) => {
    const child = spawn('valgrind', args, { stdio: ['ignore', 'ignore', 'pipe'], env });
    let stderr = '';
    child.stderr.on('data', (chunk) => (stderr = (stderr + chunk).slice(-2000)));
    child.once('error', reject);
    child.once('close', (code) => (code === 0 ? resolve({ dir, dumps, perWindow }) : reject(new Error(`callgrind [${configuration}] exited ${code}: ${stderr}`))));
  });
}

/** V8's map of the process that wrote `dir`'s dumps: sorted [start, end, name]. */
function jitMap(dir, firstDump) {
  const pid = /^pid:\s*(\d+)/m.exec(readFileSync(join(dir, `out.${firstDump}`), 'utf8').slice(0, 4096))?.[1];
  const file = join(tmpdir(), `perf-${pid}.map`);
  const ranges = readFileSync(file, 'utf8')
    .trim()
    .split('\n')
    .map((line) => {
      const [start, size, ...name] = line.split(' ');
      return [parseInt(start, 16), parseInt(start, 16) + parseInt(size, 16), name.join(' ')];
    })
    .sort((a, b) => a[0] - b[0]);
  rmSync(file, { force: true });
  return ranges;
}

function nameAt(ranges, address) {
  let lo = 0;
  let hi = ranges.length - 1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    if (ranges[mid][0] <= address) lo = mid + 1;
    else hi = mid - 1;
  }
  return hi >= 0 && address < ranges[hi][1] ? ranges[hi][2] : 'JIT code not in the map';
}

/** Self instructions per request (or operation) of each function, averaged over the settled windows. */
function selfCosts({ dir, dumps, perWindow }) {
  const ranges = jitMap(dir, dumps[0]);
  const costs = new Map();
  for (const dump of dumps) {
    const text = spawnSync('callgrind_annotate', ['--threshold=100', '--auto=no', '--inclusive=no', join(dir, `out.${dump}`)], {
      encoding: 'utf8',
      maxBuffer: 1 << 28,
    }).stdout;
    for (const line of text.split('\n')) {
      const row = /^\s*([\d,]+) \(\s*([\d.]+)%\)\s+(.*)$/.exec(line);
      // The frames the dump was taken under (main, the event loop) carry its whole cost, not their own.
      if (row === null || STACK_BOTTOM.test(row[3])) continue;
      const where = row[3];
      const jit = /^\?\?\?:0x([0-9a-f]+) \[\?\?\?\]$/.exec(where);
      const name = (jit === null ? where.replace(/ \[[^\]]*\]$/, '') : nameAt(ranges, parseInt(jit[1], 16)))
        .replace(/.*node_modules\//, '')
        .replace(/file:\/\/\S*\/bench\//, 'bench/');
      const cost = Number(row[1].replaceAll(',', '')) / dumps.length / perWindow;
      costs.set(name, (costs.get(name) ?? 0) + cost);
    }
  }
  rmSync(dir, { recursive: true, force: true });
  return costs;
}

const configurations = process.argv.slice(2);
if (configurations.length === 0 || configurations.length > 2) {
  console.error('usage: node bench/instructions-by-function.mjs <whole|plain|floor|parts|db:workload:mode> [<the same>]');
  process.exit(2);
}
// One process per configuration, side by side (callgrind counts instructions, not time).
const measured = (await Promise.all(configurations.map(run))).map(selfCosts);
const [first, second = new Map()] = measured;
const names = new Set([...first.keys(), ...second.keys()]);
const rows = [...names].map((name) => [name, (first.get(name) ?? 0) - (second.get(name) ?? 0)]).sort((a, b) => Math.abs(b[1]) - Math.abs(a[1]));
const total = (costs) => [...costs.values()].reduce((sum, cost) => sum + cost, 0);
console.log(`self instructions per request or operation, settled windows: ${configurations.join(' minus ')} = ${Math.round(total(first) - total(second))}`);
for (const [name, cost] of rows.slice(0, 60)) console.log(`${String(Math.round(cost)).padStart(9)}  ${name}`);
