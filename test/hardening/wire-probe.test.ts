/**
 * The load chain's wire probe (load/wire-probe.mjs) judges what it should: a
 * request handed to socket.write after its cutoff is late when nothing stops
 * it, a request the instrumentation refuses is not counted, and a pause right
 * after the instrumentation's last look (inside socket.write, where nothing
 * can give the write up any more) is reported apart, not judged late. Each
 * case runs fixtures/wire-probe-check.mjs in a child process against the built package,
 * since the clock of the whole process is replaced.
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('../../', import.meta.url));
const fixture = fileURLToPath(new URL('./fixtures/wire-probe-check.mjs', import.meta.url));

async function probe(env: Record<string, string>) {
  const { stdout, stderr } = await promisify(execFile)(process.execPath, [fixture], { cwd: root, timeout: 30_000, env: { ...process.env, ...env } });
  expect(stderr).toBe('');
  return JSON.parse(stdout.trim()) as { outcome: string; arrivals: number; sends: { checked: number; late: number; crossedAfterCheck: number } };
}

const transports = [
  ['fetch', {}],
  ['undici', {}],
  ['http', {}],
  ['http', { CONNECTING: '1' }],
] as const;

describe('the wire probe of the load chain', () => {
  it.each(transports)('counts a %s request written after its cutoff as late when nothing stops it %o', async (transport, extra) => {
    const run = await probe({ TRANSPORT: transport, GUARD: 'off', JUMP: 'before-write', ...extra });
    expect(run).toMatchObject({ outcome: 'completed', arrivals: 1, sends: { checked: 1, late: 1, crossedAfterCheck: 0 } });
  });

  it.each(transports)('counts a %s request the instrumentation refuses not at all %o', async (transport, extra) => {
    const run = await probe({ TRANSPORT: transport, GUARD: 'on', JUMP: 'before-write', ...extra });
    expect(run).toMatchObject({ outcome: 'DeadlineExceededError', arrivals: 0, sends: { checked: 0, late: 0 } });
  });

  it.each(transports)('counts a %s request sent in time as in time %o', async (transport, extra) => {
    const run = await probe({ TRANSPORT: transport, GUARD: 'on', JUMP: 'none', ...extra });
    expect(run).toMatchObject({ outcome: 'completed', arrivals: 1, sends: { checked: 1, late: 0, crossedAfterCheck: 0 } });
  });

  it.each(transports.slice(0, 3))('reports a %s request whose cutoff passes after the last look apart, not as late', async (transport) => {
    const run = await probe({ TRANSPORT: transport, GUARD: 'on', JUMP: 'after-look' });
    expect(run).toMatchObject({ outcome: 'completed', arrivals: 1, sends: { checked: 1, late: 0, crossedAfterCheck: 1 } });
  });
});
