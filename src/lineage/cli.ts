#!/usr/bin/env node
import { writeFile } from 'node:fs/promises';
import { HELP, parseCliArgs, UNIT_MS, UsageError, type CliOptions } from './args';
import { isUrl, LineageInputError, loadTraces } from './load';
import { buildTreeWith, hasViolation, isLate, type LineageTree } from './tree';
import { renderText } from './text';
import { renderHtml } from './html';
import { searchJaeger } from './search';

/** Exit codes: 0 fine, 1 a lateness violation with --fail-on-violation, 2 bad input or usage. */
export const EXIT_VIOLATION = 1;
export const EXIT_INPUT = 2;

export interface CliIo {
  out: (text: string) => void;
  err: (text: string) => void;
}

/** The page is written before anything is printed, so a failure leaves one clean error line. */
async function writePage(file: string, trees: LineageTree[], title: string): Promise<void> {
  try {
    await writeFile(file, renderHtml(trees, title));
  } catch (err) {
    throw new LineageInputError(`cannot write ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
}

async function showTraces(options: CliOptions, io: CliIo): Promise<number> {
  const { source } = options;
  const traces = await loadTraces(source, { traceId: options.trace, timeoutMs: options.timeoutMs });
  const trees = traces.map((trace) => buildTreeWith(trace, { graceMs: options.graceMs }));
  if (options.html !== undefined) {
    await writePage(options.html, trees, `Deadline lineage: ${isUrl(source) ? source : source.split('/').pop()}`);
  }
  io.out(`${trees.map(renderText).join('\n\n')}\n`);
  if (options.html !== undefined) io.out(`timeline written to ${options.html}\n`);
  return options.failOnViolation && hasViolation(trees) ? EXIT_VIOLATION : 0;
}

function lookbackText(ms: number): string {
  const unit = ['d', 'h', 'm'].find((u) => ms % UNIT_MS[u] === 0) ?? 's';
  return `${ms / UNIT_MS[unit]}${unit}`;
}

async function search(options: CliOptions & { service: string }, io: CliIo): Promise<number> {
  const result = await searchJaeger(options.source, options);
  const trees = result.traces.map((trace) => buildTreeWith(trace, { graceMs: options.graceMs }));
  const late = trees.filter((tree) => tree.ordered.some(isLate));
  const window = `service ${options.service}, last ${lookbackText(options.lookbackMs)}`;
  const asked = result.queries.map((q) => `${q.tag} (${q.traces})`).join(', ');
  if (late.length === 0) {
    io.out(
      `nothing found: no late spans in ${trees.length} trace${trees.length === 1 ? '' : 's'} ` +
        `Jaeger at ${result.base} returned (${window}; searched ${asked})\n`,
    );
    return 0;
  }
  if (options.html !== undefined) await writePage(options.html, late, `Deadline lineage: ${options.service} at ${result.base}`);
  io.out(`${late.map(renderText).join('\n\n')}\n\n`);
  const lines = [
    `search: ${late.length} of ${trees.length} trace${trees.length === 1 ? '' : 's'} with late spans (${window}; searched ${asked})`,
  ];
  for (const q of result.queries) {
    if (q.full) lines.push(`  ${q.tag} returned --limit ${options.limit} traces: older ones may be missing (raise --limit or shorten --lookback)`);
  }
  if (options.html !== undefined) lines.push(`timeline written to ${options.html}`);
  io.out(`${lines.join('\n')}\n`);
  return options.failOnViolation ? EXIT_VIOLATION : 0;
}

/** Runs the CLI on `argv` (without node and script) and returns the exit code. */
export async function main(argv: string[], io: CliIo): Promise<number> {
  try {
    const parsed = parseCliArgs(argv);
    if (parsed.help || parsed.version !== undefined) {
      io.out(parsed.help ? HELP : `${parsed.version}\n`);
      return 0;
    }
    const { options } = parsed;
    if (options.service !== undefined) {
      if (!isUrl(options.source)) throw new UsageError('--service searches a Jaeger query URL, not a file');
      return await search({ ...options, service: options.service }, io);
    }
    return await showTraces(options, io);
  } catch (err) {
    if (err instanceof UsageError) {
      io.err(`error: ${err.message}\n(run deadline-lineage --help for usage)\n`);
      return EXIT_INPUT;
    }
    if (err instanceof LineageInputError) {
      io.err(`deadline-lineage: ${err.message}\n`);
      return EXIT_INPUT;
    }
    // Anything else is a bug in this tool; still one line, with a hint to dig further.
    io.err(`deadline-lineage: unexpected error: ${(err as Error)?.message ?? String(err)}\n`);
    if (process.env.DEADLINE_LINEAGE_DEBUG) io.err(`${(err as Error)?.stack}\n`);
    return EXIT_INPUT;
  }
}

if (require.main === module) {
  const io: CliIo = { out: (t) => process.stdout.write(t), err: (t) => process.stderr.write(t) };
  main(process.argv.slice(2), io).then((code) => {
    process.exitCode = code;
  });
}
