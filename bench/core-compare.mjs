// Row (a) of the core bench for two builds side by side, in alternating
// rounds of one process: open + dispose, and open + signal + dispose, under a
// long-lived armed root, with the heap each keeps after 1,000,000 children.
// For checking that a change to the deadline lifecycle keeps the core figures.
//
//   git worktree add /tmp/before <commit> && (cd /tmp/before && npm ci && npm run build)
//   npm run bench:core:compare -- /tmp/before
import { pathToFileURL } from 'node:url';
import { fmt, median } from './stats.mjs';

const baseDir = process.argv[2];
if (baseDir === undefined || typeof globalThis.gc !== 'function') {
  console.error('usage: node --expose-gc bench/core-compare.mjs <checkout of the build to compare with, built>');
  process.exit(2);
}
const builds = [
  ['before', await import(pathToFileURL(`${baseDir}/dist/cjs/src/index.js`).href)],
  ['this', await import('../dist/esm/index.mjs')],
];

const ROUNDS = 9;
const OPS = { plain: 200_000, signal: 100_000 };
const MILLION = 1_000_000;

function settle() {
  for (let i = 0; i < 4; i++) globalThis.gc();
  return process.memoryUsage().heapUsed;
}

const candidates = builds.flatMap(([label, lib]) => {
  const root = lib.openDeadline({ operation: 'root', timeoutMs: 3_600_000, parent: null });
  void root.signal; // armed, as in a real server where the root's signal is used
  return [
    [`${label}: open + dispose`, 'plain', () => root.child('child', 60_000).dispose()],
    [
      `${label}: open + signal + dispose`,
      'signal',
      () => {
        const child = root.child('child', 60_000);
        void child.signal;
        child.dispose();
      },
    ],
  ];
});

for (const [, , fn] of candidates) for (let i = 0; i < 5_000; i++) fn();
const samples = new Map(candidates.map(([name]) => [name, []]));
for (let round = 0; round < ROUNDS; round++) {
  for (const [name, kind, fn] of candidates) {
    const start = process.hrtime.bigint();
    for (let i = 0; i < OPS[kind]; i++) fn();
    samples.get(name).push(Number(process.hrtime.bigint() - start) / OPS[kind]);
  }
}
const retained = new Map(
  candidates.map(([name, , fn]) => {
    const before = settle();
    for (let i = 0; i < MILLION; i++) fn();
    return [name, (settle() - before) / 1024 / 1024];
  }),
);

console.log(`Median of ${ROUNDS} alternating rounds; heap retained after 1,000,000 children and a full gc.\n`);
console.log('| candidate | ns/op (median) | vs before | heap retained |');
console.log('| --- | ---: | ---: | ---: |');
for (const [name] of candidates) {
  const [label, what] = name.split(': ');
  const ns = median(samples.get(name));
  const base = median(samples.get(`before: ${what}`));
  const ratio = label === 'before' ? '' : `${fmt(ns / base, 2)}×`;
  console.log(`| ${name} | ${fmt(ns)} | ${ratio} | ${fmt(retained.get(name), 2)} MiB |`);
}
