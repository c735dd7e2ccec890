// Where the benchmarks put what they measured: bench/results/NAME.json, one
// file per benchmark, holding the figures (`data`), the tables made from them
// and the machine, Node version, date and commit they were measured on.
// scripts/bench-report.mjs writes BENCHMARKS.md from these files.
import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, release, totalmem } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
export const RESULTS_DIR = process.env.BENCH_RESULTS_DIR ?? join(root, 'bench', 'results');
/** Read when this module loads, as the benchmark starts: the figures are of the code checked out then. */
const loadAtStart = loadavg()[0];
const startedAt = new Date().toISOString();

function cpuModel() {
  try {
    return /^model name\s*:\s*(.+)$/m.exec(readFileSync('/proc/cpuinfo', 'utf8'))?.[1] ?? cpus()[0]?.model;
  } catch {
    return cpus()[0]?.model ?? 'unknown';
  }
}

/** The commit checked out, `-dirty` if tracked files differ from it: not counting results, which earlier benchmarks write. */
function commit() {
  const git = (...args) => execFileSync('git', args, { cwd: root, encoding: 'utf8' }).trim();
  try {
    const changed = git('status', '--porcelain', '--untracked-files=no', '--', '.', ':(exclude)bench/results', ':(exclude)BENCHMARKS.md');
    return `${git('rev-parse', '--short=10', 'HEAD')}${changed === '' ? '' : '-dirty'}`;
  } catch {
    return 'unknown';
  }
}

const commitAtStart = commit();

/** The machine and build a result was measured on. */
export function environment() {
  return {
    node: process.version,
    v8: process.versions.v8,
    platform: `${process.platform}/${process.arch}, kernel ${release()}`,
    cpu: `${cpuModel()}, ${cpus().length} logical cores`,
    memoryGiB: Number((totalmem() / 2 ** 30).toFixed(1)),
    loadAverageAtStart: Number(loadAtStart.toFixed(2)),
    date: startedAt,
    commit: commitAtStart,
  };
}

/**
 * Writes bench/results/NAME.json. `tables` are `{ caption?, columns, rows }`
 * (rows of cells already formatted; a column name ending in ':' is
 * right-aligned); `data` is the raw figures. `measuredOn` replaces the
 * environment of this process for figures measured earlier.
 */
export function writeResult(name, { title, command, tables, data, measuredOn = environment() }) {
  mkdirSync(RESULTS_DIR, { recursive: true });
  const file = join(RESULTS_DIR, `${name.replaceAll(':', '-')}.json`);
  writeFileSync(file, `${JSON.stringify({ name, title, command, environment: measuredOn, tables, data }, null, 2)}\n`);
  console.log(`wrote ${file}`);
}
