import { getEventListeners } from 'node:events';
import { context } from '@opentelemetry/api';
import { registerInstrumentations } from '@opentelemetry/instrumentation';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  DeadlineExceededError,
  DeadlineInstrumentation,
  InsufficientBudgetError,
  openDeadline,
  setDeadline,
  type ManagedDeadline,
} from '../../src';
import { CUT_LAG_LIMIT_MS, passedDeadline } from '../helpers/clock';
import { installOtel, sleep, type TestOtel } from '../helpers/otel';
import { sendReply } from './helpers/replies';
import { startCountingServer, type CountingServer } from './helpers/servers';

let otel: TestOtel;
let instrumentation: DeadlineInstrumentation;
let server: CountingServer;
/** Responses the server is holding back; released after each test. */
const held: (() => void)[] = [];

beforeAll(async () => {
  otel = installOtel();
  instrumentation = new DeadlineInstrumentation();
  registerInstrumentations({ instrumentations: [instrumentation] });
  server = await startCountingServer((req, res) => {
    if (req.url === '/hang') return void held.push(() => res.destroy());
    if (req.url === '/stall-body') {
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.write('first chunk');
      return void held.push(() => res.destroy());
    }
    if (req.url === '/reject') {
      return sendReply(res, 504, '{"code":"INSUFFICIENT_BUDGET","neededMs":80,"remainingMs":12}', { 'x-deadline-expired': '1' });
    }
    res.end('ok');
  });
});
afterAll(async () => {
  instrumentation.disable();
  await server.close();
  await otel.shutdown();
});
afterEach(() => {
  held.splice(0).forEach((release) => release());
  server.arrivals.length = 0;
  otel.exporter.reset();
  instrumentation.setConfig({});
});

/** Runs fn with `deadline` active, without opening a span. */
function under<T>(deadline: ManagedDeadline, fn: () => T): T {
  return context.with(setDeadline(context.active(), deadline), fn);
}

function deadlineHeaders(index: number): Record<string, number> {
  return Object.fromEntries(
    ['x-deadline-remaining-ms', 'x-deadline-at-ms', 'baggage'].map((name) => [name, server.headerCount(index, name)]),
  );
}

describe('global fetch without an active deadline', () => {
  it('is untouched: no deadline headers', async () => {
    const res = await fetch(`${server.url}/plain`);
    expect(await res.text()).toBe('ok');
    expect(deadlineHeaders(0)).toEqual({ 'x-deadline-remaining-ms': 0, 'x-deadline-at-ms': 0, baggage: 0 });
  });
});

describe('global fetch under an active deadline', () => {
  it('sends each deadline header exactly once, replacing stale values and merging baggage', async () => {
    const deadline = openDeadline({ operation: 'root', timeoutMs: 5_000, parent: null });
    try {
      const res = await under(deadline, () =>
        fetch(`${server.url}/ok`, {
          headers: { 'X-Deadline-Remaining-Ms': '999999', baggage: 'user.tier=gold,deadline.at_ms=1' },
        }),
      );
      await res.text();
    } finally {
      deadline.dispose();
    }
    expect(deadlineHeaders(0)).toEqual({ 'x-deadline-remaining-ms': 1, 'x-deadline-at-ms': 1, baggage: 1 });
    const headers = Object.fromEntries(server.arrivals[0].headers);
    expect(Number(headers['x-deadline-remaining-ms'])).toBeLessThanOrEqual(5_000);
    expect(headers['x-deadline-at-ms']).toBe(String(Math.floor(deadline.expiresAtMs)));
    expect(headers.baggage).toBe(`user.tier=gold,deadline.at_ms=${Math.floor(deadline.expiresAtMs)}`);
  });

  it('refuses an expired call before any connection, with a not_started span', async () => {
    const before = server.connections;
    const deadline = await passedDeadline('root');
    const error = await under(deadline, () => fetch(`${server.url}/ok`)).catch((err: unknown) => err);
    deadline.dispose();
    expect(error).toBeInstanceOf(DeadlineExceededError);
    expect(server.connections).toBe(before);
    expect(server.arrivals).toHaveLength(0);
    const span = otel.span('GET');
    expect(span.attributes['deadline.outcome']).toBe('not_started');
    expect(span.attributes['deadline.abort.code']).toBe('DEADLINE_EXCEEDED');
  });

  it('refuses with InsufficientBudgetError when less than minUsefulMs is left', async () => {
    instrumentation.setConfig({ minUsefulMs: 10_000 });
    const before = server.connections;
    const deadline = openDeadline({ operation: 'root', timeoutMs: 5_000, parent: null });
    const error = await under(deadline, () => fetch(new Request(`${server.url}/ok`, { method: 'POST', body: 'x' }))).catch(
      (err: unknown) => err,
    );
    deadline.dispose();
    expect(error).toBeInstanceOf(InsufficientBudgetError);
    expect(server.connections).toBe(before);
    expect(server.arrivals).toHaveLength(0);
  });

  it('rejects a call waiting for response headers with the DeadlineExceededError itself at the cutoff', async () => {
    const deadline = openDeadline({ operation: 'root', timeoutMs: 200, parent: null });
    const error = await under(deadline, () => fetch(`${server.url}/hang`)).catch((err: unknown) => err);
    const lagMs = Date.now() - deadline.expiresAtMs;
    deadline.dispose();
    expect(error).toBeInstanceOf(DeadlineExceededError);
    expect(error).toBe(deadline.abortReason);
    // /hang never answers: only the cut can end this call (see CUT_LAG_LIMIT_MS for the width).
    expect(lagMs).toBeLessThan(CUT_LAG_LIMIT_MS);
    expect(server.arrivals).toHaveLength(1);
  });

  it('errors a body being streamed at the cutoff with the DeadlineExceededError', async () => {
    const deadline = openDeadline({ operation: 'root', timeoutMs: 250, parent: null });
    const res = await under(deadline, () => fetch(`${server.url}/stall-body`));
    const error = await res.text().catch((err: unknown) => err);
    deadline.dispose();
    expect(error).toBeInstanceOf(DeadlineExceededError);
    // /stall-body never ends its body: only the cut can end the read.
    expect(Date.now() - deadline.expiresAtMs).toBeLessThan(CUT_LAG_LIMIT_MS);
  });

  it("keeps the caller's own signal working: whichever fires first wins", async () => {
    const deadline = openDeadline({ operation: 'root', timeoutMs: 5_000, parent: null });
    const caller = new AbortController();
    const mine = new Error('caller gave up');
    setTimeout(() => caller.abort(mine), 50);
    const first = await under(deadline, () => fetch(`${server.url}/hang`, { signal: caller.signal })).catch((e: unknown) => e);
    expect(first).toBe(mine);

    const short = openDeadline({ operation: 'short', timeoutMs: 100, parent: null });
    const later = new AbortController();
    const second = await under(short, () => fetch(`${server.url}/hang`, { signal: later.signal })).catch((e: unknown) => e);
    expect(second).toBeInstanceOf(DeadlineExceededError);
    expect(getEventListeners(later.signal, 'abort')).toHaveLength(0);
    expect(getEventListeners(deadline.signal, 'abort')).toHaveLength(0);
    deadline.dispose();
    short.dispose();
  });

  it('removes every listener it added to the deadline signal once calls settle', async () => {
    const deadline = openDeadline({ operation: 'root', timeoutMs: 5_000, parent: null });
    await under(deadline, () => Promise.all([1, 2, 3].map(async () => (await fetch(`${server.url}/ok`)).text())));
    await under(deadline, () => fetch(`${server.url}/reject`)).catch(() => {});
    // Trailers of a body read to the end arrive on the next turns.
    await sleep(20);
    expect(getEventListeners(deadline.signal, 'abort')).toHaveLength(0);
    deadline.dispose();
  });

  it("turns a server's early-reject reply into the matching error", async () => {
    const deadline = openDeadline({ operation: 'root', timeoutMs: 5_000, parent: null });
    const error = await under(deadline, () => fetch(`${server.url}/reject`)).catch((err: unknown) => err);
    deadline.dispose();
    expect(error).toBeInstanceOf(InsufficientBudgetError);
    expect((error as InsufficientBudgetError).neededMs).toBe(80);
    expect((error as InsufficientBudgetError).remainingMs).toBe(12);
  });
});
