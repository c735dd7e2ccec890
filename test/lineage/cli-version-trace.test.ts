/**
 * `deadline-lineage --version`, and `--trace` checked as a trace id before
 * anything is read: the built CLI as a child process.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { runCli } from './helpers/run-cli';

const { version } = JSON.parse(readFileSync(join(__dirname, '..', '..', 'package.json'), 'utf8')) as { version: string };

describe('deadline-lineage --version and --trace', { timeout: 60_000 }, () => {
  it.each(['--version', '-V'])('%s prints the package version and exits 0', async (flag) => {
    const run = await runCli([flag]);
    expect(run).toEqual({ code: 0, stdout: `${version}\n`, stderr: '' });
  });

  it.each(['zzz', '4bf92f3577b34da6a3ce929d0e0e473', '4bf92f3577b34da6a3ce929d0e0e4736x'])(
    '--trace %s: one error line naming the option, exit 2, nothing read',
    async (id) => {
      // The file does not exist: the id is refused before the source is looked at.
      const run = await runCli(['no-such-file.json', '--trace', id]);
      expect(run.code).toBe(2);
      expect(run.stdout).toBe('');
      expect(run.stderr.split('\n')[0]).toBe(`error: option '--trace <id>' argument '${id}' is invalid. expected a trace id of 32 hex digits (or Jaeger's 16)`);
    },
  );
});
