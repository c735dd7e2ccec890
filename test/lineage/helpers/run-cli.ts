import { execFile } from 'node:child_process';
import { resolve } from 'node:path';

/** The built CLI, as package.json's `bin` points at it (`npm test` builds first). */
export const CLI = resolve(__dirname, '../../../dist/cjs/src/lineage/cli.js');

export interface CliRun {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs `deadline-lineage` as a real child process. */
export function runCli(args: string[], timeoutMs = 20_000): Promise<CliRun> {
  return new Promise((resolvePromise) => {
    execFile(process.execPath, [CLI, ...args], { timeout: timeoutMs, encoding: 'utf8' }, (err, stdout, stderr) => {
      const code = err === null ? 0 : typeof err.code === 'number' ? err.code : -1;
      resolvePromise({ code, stdout, stderr });
    });
  });
}
