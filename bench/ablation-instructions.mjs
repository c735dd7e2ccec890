// node bench/ablation-instructions.mjs DIR [DIR ...] — what a piece of the
// package saves, in instructions (docs/internals.md, "How the savings were
// measured").
//
// Each DIR is a copy of the package prepared by hand: its own `bench/` and a
// `dist/` built with one piece switched off (or none, for the reference), and a
// `node_modules` link to this checkout's. For each, the whole-plugin
// configuration of bench:http:instructions is counted under callgrind in one
// process, in the same two windows (bench/callgrind.mjs), one DIR per core at
// a time. Prints one JSON line per DIR: instructions per request, early and
// steady. A run of one build differs from the next by a few percent (garbage
// collection falls differently), so a saving is read from several runs.
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
    const { countInstructions } = await import(pathToFileURL(`${dir}/bench/callgrind.mjs`).href);
    const [early, steady] = await countInstructions(ALL_PARTS, [[], []]);
    console.log(JSON.stringify({ dir, early: Math.round(early), steady: Math.round(steady) }));
  }
}
await Promise.all(Array.from({ length: Math.min(dirs.length, Number(process.env.BENCH_INSTR_JOBS ?? cpus().length)) }, worker));
