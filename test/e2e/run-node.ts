import { spawn } from 'node:child_process';
import { resolve } from 'node:path';

export const root = resolve(__dirname, '..', '..');

export interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/**
 * Runs `node <args>` from the repository root with only PATH and `env`, so
 * no OTEL_* variable of this process leaks in. Killed after 30 s: the apps
 * finish in about a second, and a hung one must fail the test, not stall it.
 */
export function node(args: string[], env: Record<string, string>): Promise<Run> {
  return new Promise((done, fail) => {
    const child = spawn(process.execPath, args, {
      cwd: root,
      env: { PATH: process.env.PATH ?? '', OTEL_BSP_SCHEDULE_DELAY: '50', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk));
    const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
    child.once('error', fail);
    child.once('close', (code) => {
      clearTimeout(timer);
      done({ code, stdout, stderr });
    });
  });
}
