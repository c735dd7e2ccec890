// npm run bench:all — runs every `bench` / `bench:*` script of package.json, one
// after another, and regenerates BENCHMARKS.md from what they print.
//
// The convention (docs/hardening.md, "Benchmarks"): a benchmark prints its
// Markdown section between a line `<!-- bench:NAME -->` and a line
// `<!-- /bench:NAME -->`; everything else it prints is ignored. This script adds
// the machine description once, at the top. A script whose file is missing is
// skipped; when one fails, the sections it printed last time are kept, marked as such.
//
// Sections measured by hand, which no script prints (HAND_MEASURED), and
// sections a benchmark printed on another Node line (named `...:nodeN`, such
// as `http:instructions:node24`; this script runs on the one it is started
// with) are kept as they are on every run that does not print them.
//
// BENCH_OUTPUT=path writes elsewhere; BENCH_ONLY=bench:lag,bench runs only those scripts.
import { spawn, execFileSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, release, totalmem } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const OUTPUT = process.env.BENCH_OUTPUT ?? join(root, 'BENCHMARKS.md');
const ONLY = process.env.BENCH_ONLY?.split(',').map((name) => name.trim());
const TIMEOUT_MS = Number(process.env.BENCH_TIMEOUT_MS ?? 15 * 60_000);
/** Sections no script prints: `internals` comes from copies of the package prepared by hand (docs/internals.md). */
const HAND_MEASURED = new Set(['internals']);
/** Sections printed on another Node line than the one the benchmarks are run on here. */
const OTHER_NODE_LINE = /:node\d+$/;
const BLOCK = /^<!-- bench:([\w:.-]+) -->$([\s\S]*?)^<!-- \/bench:\1 -->$/gm;

/** Every complete `<!-- bench:NAME -->` block in `text`, in order, markers included. */
function blocksIn(text) {
  return [...text.matchAll(BLOCK)].map((m) => ({ name: m[1], text: m[0] }));
}

function benchScripts() {
  const { scripts = {} } = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
  return Object.entries(scripts).filter(
    ([name]) => /^bench(:|$)/.test(name) && name !== 'bench:all' && (ONLY === undefined || ONLY.includes(name)),
  );
}

/** The first bench/ file a script names that does not exist, if any. */
function missingFile(command) {
  for (const [path] of command.matchAll(/\bbench\/[\w./-]+\.[cm]?js\b/g)) {
    if (!existsSync(join(root, path))) return path;
  }
  return undefined;
}

/** Runs `npm run NAME`, echoing its output, and resolves with its exit code and stdout. */
function run(name) {
  return new Promise((resolve) => {
    // Its own process group, so a timeout can stop npm and the node process under it together.
    const child = spawn('npm', ['run', '--silent', name], { cwd: root, stdio: ['ignore', 'pipe', 'inherit'], detached: true });
    let stdout = '';
    child.stdout.on('data', (chunk) => {
      stdout += chunk;
      process.stdout.write(chunk);
    });
    const timer = setTimeout(() => {
      console.error(`bench-all: ${name} ran past ${TIMEOUT_MS} ms, stopping it`);
      process.kill(-child.pid, 'SIGTERM');
    }, TIMEOUT_MS);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code: code ?? (signal ? 128 : 1), stdout });
    });
  });
}

function machine() {
  let cpu = cpus()[0]?.model ?? 'unknown';
  try {
    cpu = /^model name\s*:\s*(.+)$/m.exec(readFileSync('/proc/cpuinfo', 'utf8'))?.[1] ?? cpu;
  } catch {
    // not Linux: os.cpus() is good enough
  }
  let commit = 'unknown';
  try {
    commit = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: root, encoding: 'utf8' }).trim();
  } catch {
    // not a git checkout
  }
  return [
    `- Node.js ${process.version} (V8 ${process.versions.v8}), ${process.platform}/${process.arch}, kernel ${release()}`,
    `- CPU: ${cpu}, ${cpus().length} logical cores (from /proc/cpuinfo)`,
    `- Memory: ${(totalmem() / 2 ** 30).toFixed(1)} GiB`,
    `- Load average (1 min) when the run started: ${loadavg()[0].toFixed(2)}`,
    `- Commit measured: ${commit}`,
  ];
}

const previousText = existsSync(OUTPUT) ? readFileSync(OUTPUT, 'utf8') : '';
const previous = new Map(blocksIn(previousText).map((b) => [b.name, b.text]));

/** The commit a section of the previous file was measured at: from its own "kept" note, else the file's header. */
function previousCommitOf(name) {
  const kept = new RegExp(`^- Section \`${name.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}\` is kept from an earlier run \\(commit (\\w+)`, 'm').exec(previousText);
  return kept?.[1] ?? /^- Commit measured: (\w+)/m.exec(previousText)?.[1] ?? 'unknown';
}
const header = machine();
const sections = [];
const notes = [];
let failed = 0;

for (const [name, command] of benchScripts()) {
  const missing = missingFile(command);
  if (missing !== undefined) {
    notes.push(`- \`npm run ${name}\`: skipped, ${missing} does not exist yet.`);
    continue;
  }
  console.log(`\n== npm run ${name}`);
  const { code, stdout } = await run(name);
  const blocks = blocksIn(stdout);
  if (code === 0 && blocks.length > 0) {
    sections.push(...blocks.map((b) => b.text));
    continue;
  }
  failed++;
  notes.push(`- \`npm run ${name}\` ${code !== 0 ? `exited with code ${code}` : 'printed no <!-- bench:NAME --> block'}.`);
}

// Neither a failed benchmark nor a partial run (BENCH_ONLY) erases figures
// measured before: sections no benchmark produced in this run are kept, in
// their earlier place, and the notes say so.
if (failed > 0 || ONLY !== undefined) {
  const produced = new Map(sections.map((text) => [blocksIn(text)[0].name, text]));
  const merged = [];
  for (const [name, text] of previous) {
    if (produced.has(name)) {
      merged.push(produced.get(name));
      produced.delete(name);
    } else {
      notes.push(`- Section \`${name}\` is kept from an earlier run (commit ${previousCommitOf(name)}${failed > 0 ? '' : ', BENCH_ONLY'}).`);
      merged.push(text);
    }
  }
  sections.splice(0, sections.length, ...merged, ...produced.values());
}

for (const [name, text] of previous) {
  const kept = HAND_MEASURED.has(name) || OTHER_NODE_LINE.test(name);
  if (!kept || sections.some((section) => blocksIn(section)[0].name === name)) continue;
  sections.push(text);
  notes.push(
    HAND_MEASURED.has(name)
      ? `- Section \`${name}\` is measured by hand (docs/internals.md) and kept as it is.`
      : `- Section \`${name}\` was printed on another Node line (the section says which) and is kept as it is.`,
  );
}

const document = [
  '# Benchmarks',
  '',
  'Generated by `npm run bench:all` (scripts/bench-all.mjs); do not edit by hand. Each section is printed by the',
  'benchmark itself, which runs against the built package in `dist/`. Every figure in one section was measured',
  'side by side in one run of that benchmark.',
  '',
  '## Machine',
  '',
  ...header,
  '',
  ...(notes.length > 0 ? ['## Not measured in this run', '', ...notes, ''] : []),
  '## Results',
  '',
  sections.join('\n\n'),
  '',
].join('\n');
writeFileSync(OUTPUT, document);
console.log(`\nbench-all: wrote ${OUTPUT} (${sections.length} sections${failed > 0 ? `, ${failed} failed` : ''})`);
if (failed > 0) process.exitCode = 1;
