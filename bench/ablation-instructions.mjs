// node bench/ablation-instructions.mjs DIR [DIR ...] — what a piece of the
// package saves, in instructions (docs/internals.md, "How the savings were
// measured").
//
// Each DIR is a copy of the package prepared by hand: its own `bench/` and a
// `dist/` built with one piece switched off (or none, for the reference), and a
// `node_modules` link to this checkout's. For each, the whole-plugin
// configuration of bench:http:instructions is counted under callgrind in one
// process, in the same six windows (bench/callgrind.mjs), one DIR per core at
// a time. Prints one JSON line per DIR: instructions per request early and
// steady (compilation included), and settled (the mean of windows 4 to 6
// without compilation, see bench/http-instructions.bench.mjs). Two runs of one
// build differ by up to about 1.5% settled, so a saving is read from several runs.
import { cpus } from 'node:os';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { ALL_PARTS } from './http-chain.mjs';

const dirs = process.argv.slice(2).map((dir) => resolve(dir));
if (dirs.length === 0) {
  console.error('usage: node bench/ablation-instructions.mjs DIR [DIR ...]');
  process.exit(2);
}

let next = 0;
async function worker() {
  while (next < dirs.length) {
    const dir = dirs[next++];
    // Each copy's own callgrind.mjs, so that its child loads that copy's dist/.
    const { countWindows } = await import(pathToFileURL(`${dir}/bench/callgrind.mjs`).href);
    const windows = await countWindows(ALL_PARTS, [[], [], [], [], [], []]);
    const settled = windows.slice(3).reduce((sum, w) => sum + w.total - w.compile, 0) / 3;
    console.log(JSON.stringify({ dir, early: Math.round(windows[0].total), steady: Math.round(windows[1].total), settled: Math.round(settled) }));
  }
}
await Promise.all(Array.from({ length: Math.min(dirs.length, Number(process.env.BENCH_INSTR_JOBS ?? cpus().length)) }, worker));
