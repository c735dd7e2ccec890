/**
 * No request bytes after the cutoff, at the socket, for every transport: the
 * clock is made to pass the cutoff at the worst moment (see
 * fixtures/late-write.mjs), deterministically, and the server must count no
 * arrival. Run in child processes against the built package (npm test builds
 * first), since the clock of the whole process is replaced.
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('../../', import.meta.url));
const fixture = fileURLToPath(new URL('./fixtures/late-write.mjs', import.meta.url));

describe('a request whose cutoff passes right before it is written', () => {
  it.each([
    ['fetch', 'before-check', 'after onConnect, before the last check'],
    ['undici', 'before-check', 'after onConnect, before the last check'],
    ['http', 'before-check', 'while it waits for its kept-alive socket'],
    ['fetch', 'after-check', 'between the last check and socket.write'],
    ['undici', 'after-check', 'between the last check and socket.write'],
    ['http', 'after-check', 'between the last check and socket.write'],
  ])('%s (%s): is never written when the cutoff passes %s', async (transport, jump) => {
    const { stdout, stderr } = await promisify(execFile)(process.execPath, [fixture], {
      cwd: root,
      timeout: 30_000,
      env: { ...process.env, TRANSPORT: transport, JUMP: jump },
    });
    expect(stderr).toBe('');
    expect(stdout.trim()).toBe('DeadlineExceededError 0');
  });

  it('http on a connection still being made: has gone, whole, by the time the cutoff passes behind its last look', async () => {
    // net sends the bytes queued on a connecting socket from its own 'connect' listener, which runs
    // after every other: the instrumentation holds them until its look, so none wait for that one.
    const { stdout, stderr } = await promisify(execFile)(process.execPath, [fixture], {
      cwd: root,
      timeout: 30_000,
      env: { ...process.env, TRANSPORT: 'http', JUMP: 'after-check', CONNECTING: '1' },
    });
    expect(stderr).toBe('');
    expect(stdout.trim()).toBe('completed 1 0');
  });
});
