// npm run bench:all — runs every `bench` / `bench:*` script of package.json,
// one after another, then writes BENCHMARKS.md from the results
// (scripts/bench-report.mjs). Each benchmark writes its own
// bench/results/NAME.json (bench/report.mjs); one that fails leaves its last
// result in place, with the date and commit it was measured at.
// BENCH_ONLY=bench:lag,bench runs only those scripts.
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const ONLY = process.env.BENCH_ONLY?.split(',').map((name) => name.trim());
const TIMEOUT_MS = Number(process.env.BENCH_TIMEOUT_MS ?? 60 * 60_000);

const { scripts = {} } = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
const names = Object.keys(scripts).filter((name) => /^bench(:|$)/.test(name) && name !== 'bench:all' && (ONLY === undefined || ONLY.includes(name)));
const failed = [];
for (const name of names) {
  console.log(`\n== npm run ${name}`);
  // On a timeout npm gets SIGTERM, which it passes on to the benchmark.
  const run = spawnSync('npm', ['run', '--silent', name], { cwd: root, stdio: 'inherit', timeout: TIMEOUT_MS, killSignal: 'SIGTERM' });
  if (run.status !== 0) failed.push(`${name} (${run.error?.message ?? `exit ${run.status ?? run.signal}`})`);
}
spawnSync(process.execPath, [join(root, 'scripts', 'bench-report.mjs')], { cwd: root, stdio: 'inherit' });
if (failed.length > 0) {
  console.error(`bench-all: failed, their last results kept: ${failed.join(', ')}`);
  process.exitCode = 1;
}
