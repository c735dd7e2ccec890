#!/usr/bin/env node
import { writeFile } from 'node:fs/promises';
import { Command, CommanderError, InvalidArgumentError } from 'commander';
import { isUrl, LineageInputError, loadTraces } from './load';
import { buildTree, hasViolation } from './tree';
import { renderText } from './text';
import { renderHtml } from './html';

/** Exit codes: 0 fine, 1 a lateness violation with --fail-on-violation, 2 bad input or usage. */
export const EXIT_VIOLATION = 1;
export const EXIT_INPUT = 2;

interface CliOptions {
  trace?: string;
  html?: string;
  failOnViolation?: boolean;
  timeout: number;
}

export interface CliIo {
  out: (text: string) => void;
  err: (text: string) => void;
}

function positiveInt(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n <= 0) throw new InvalidArgumentError('expected a positive whole number of ms');
  return n;
}

function program(io: CliIo): Command {
  return new Command()
    .name('deadline-lineage')
    .description(
      'Show how one request deadline flowed through a trace: a span tree with each hop\'s cutoff,\n' +
        'remaining budget and outcome, lateness violations marked, and a summary.',
    )
    .argument(
      '<source>',
      'a Jaeger API JSON file, an OTLP/JSON file (collector file exporter, JSON lines),\n' +
        'or a Jaeger query URL such as http://localhost:16686 (needs --trace)',
    )
    .option('-t, --trace <id>', 'show only this trace (required with a Jaeger URL)')
    .option('--html <file>', 'also write a self-contained timeline page to <file>')
    .option('--fail-on-violation', `exit ${EXIT_VIOLATION} when any span is flagged late (a CI gate)`)
    .option('--timeout <ms>', 'how long to wait for Jaeger', positiveInt, 10_000)
    .addHelpText(
      'after',
      `\nExit codes: 0 done, ${EXIT_VIOLATION} violation found (with --fail-on-violation), ${EXIT_INPUT} bad input.`,
    )
    .configureOutput({ writeOut: io.out, writeErr: io.err })
    .exitOverride()
    .showHelpAfterError('(run deadline-lineage --help for usage)');
}

async function run(source: string, options: CliOptions, io: CliIo): Promise<number> {
  const traces = await loadTraces(source, { traceId: options.trace, timeoutMs: options.timeout });
  const trees = traces.map(buildTree);
  // The page is written before anything is printed, so a failure leaves one clean error line.
  if (options.html !== undefined) {
    const title = `Deadline lineage: ${isUrl(source) ? source : source.split('/').pop()}`;
    try {
      await writeFile(options.html, renderHtml(trees, title));
    } catch (err) {
      throw new LineageInputError(`cannot write ${options.html}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
    }
  }
  io.out(`${trees.map(renderText).join('\n\n')}\n`);
  if (options.html !== undefined) io.out(`timeline written to ${options.html}\n`);
  return options.failOnViolation === true && hasViolation(trees) ? EXIT_VIOLATION : 0;
}

/** Runs the CLI on `argv` (without node and script) and returns the exit code. */
export async function main(argv: string[], io: CliIo): Promise<number> {
  let code = 0;
  const cli = program(io).action(async (source: string, options: CliOptions) => {
    code = await run(source, options, io);
  });
  try {
    await cli.parseAsync(argv, { from: 'user' });
    return code;
  } catch (err) {
    if (err instanceof CommanderError) {
      // Help and version are "errors" to commander; it has already printed them.
      return err.exitCode === 0 ? 0 : EXIT_INPUT;
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
