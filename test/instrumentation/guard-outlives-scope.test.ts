/**
 * A call's guard lives as long as the call, not as long as the scope that
 * started it: a body read after `withDeadline` returned, a fetch nobody
 * awaits, and work a server keeps doing after it answered are all still cut
 * at the cutoff. Each test proves it at the server: the slow response is
 * closed by the client before the server finished writing it.
 */
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import { Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { registerInstrumentations } from '@opentelemetry/instrumentation';
import { createRequire } from 'node:module';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { DeadlineExceededError, DeadlineInstrumentation, withDeadline } from '../../src';
import { installOtel, type TestOtel } from '../helpers/otel';
import { startCountingServer, type CountingServer } from './helpers/servers';

/** Far beyond every budget below: a response that got this far was not cut. */
const SLOW_MS = 3_000;
/**
 * Each call must get its response headers within this budget, so that the
 * cutoff falls while the body is read. The transports are warmed up first (a
 * process's first fetch loads undici's fetch, which alone took over 300 ms on
 * a machine loaded 10 times over); 1 s leaves that much margin again for a
 * warm loopback request, and stays far below SLOW_MS, so a cut is still told
 * apart from a finished response.
 */
const BUDGET_MS = 1_000;

interface SlowResponse {
  /** Settles when the client or the server closed the response; true if the server had finished it. */
  closed: Promise<boolean>;
}

let otel: TestOtel;
let instrumentation: DeadlineInstrumentation;
let slow: CountingServer;
let responses: SlowResponse[] = [];
/** Required after the instrumentation is enabled, as an application loads it (an ESM import needs the register entry's loader hook). */
let undici: typeof import('undici');

/** Streams a chunk every 50 ms for SLOW_MS (`/drip`), answers once after SLOW_MS (`/slow`), or at once (`/small`). */
function slowHandler(req: IncomingMessage, res: ServerResponse): void {
  if (req.url === '/small') return void res.end('small body');
  let done!: (finished: boolean) => void;
  responses.push({ closed: new Promise((resolve) => (done = resolve)) });
  const timers: NodeJS.Timeout[] = [];
  res.once('close', () => {
    timers.forEach(clearTimeout);
    done(res.writableFinished);
  });
  if (req.url === '/drip') {
    res.writeHead(200, { 'content-type': 'text/plain' });
    for (let at = 0; at < SLOW_MS; at += 50) timers.push(setTimeout(() => res.write('chunk\n'), at));
    timers.push(setTimeout(() => res.end(), SLOW_MS));
  } else {
    timers.push(setTimeout(() => res.end('late'), SLOW_MS));
  }
}

beforeAll(async () => {
  otel = installOtel();
  instrumentation = new DeadlineInstrumentation();
  registerInstrumentations({ instrumentations: [instrumentation] });
  undici = createRequire(import.meta.url)('undici');
  slow = await startCountingServer(slowHandler);
  // Outside any deadline: loads and compiles each transport's path before a budget counts.
  await (await fetch(`${slow.url}/small`)).text();
  await (await undici.request(`${slow.url}/small`)).body.text();
  await new Promise<void>((resolve, reject) => http.get(`${slow.url}/small`, (res) => res.resume().once('end', resolve)).once('error', reject));
});
afterAll(async () => {
  instrumentation.disable();
  await slow.close();
  await otel.shutdown();
});
beforeEach(() => {
  responses = [];
  slow.arrivals.length = 0;
});

/** The one slow response of this test, once it has been closed. */
async function closedResponse(): Promise<boolean> {
  for (let i = 0; i < 100 && responses.length === 0; i++) await new Promise((resolve) => setTimeout(resolve, 10));
  expect(responses).toHaveLength(1);
  return responses[0].closed;
}

const root = { operation: 'caller', timeoutMs: BUDGET_MS, parent: null } as const;

describe('a body read after the scope that made the call', () => {
  it('fetch: iterating res.body rejects at the cutoff and the server sees the stream cut', async () => {
    const res = await withDeadline(root, () => fetch(`${slow.url}/drip`));
    const read = (async () => {
      for await (const chunk of res.body!) void chunk;
    })();
    await expect(read).rejects.toBeInstanceOf(DeadlineExceededError);
    expect(await closedResponse()).toBe(false);
  });

  it('fetch: res.text() rejects at the cutoff', async () => {
    const res = await withDeadline(root, () => fetch(`${slow.url}/drip`));
    await expect(res.text()).rejects.toBeInstanceOf(DeadlineExceededError);
    expect(await closedResponse()).toBe(false);
  });

  it('undici.request: body.text() rejects at the cutoff', async () => {
    const res = await withDeadline(root, () => undici.request(`${slow.url}/drip`));
    await expect(res.body.text()).rejects.toBeInstanceOf(DeadlineExceededError);
    expect(await closedResponse()).toBe(false);
  });

  it('http.get: a piped response is cut at the cutoff', async () => {
    const res = await withDeadline(
      root,
      () => new Promise<IncomingMessage>((resolve, reject) => http.get(`${slow.url}/drip`, resolve).once('error', reject)),
    );
    const sink = new Writable({ write: (_chunk, _encoding, next) => next() });
    await expect(pipeline(res, sink)).rejects.toBeInstanceOf(Error);
    expect(await closedResponse()).toBe(false);
  });
});

describe('a response that arrived whole before the cutoff', () => {
  /** Waits until `root`'s budget has certainly passed, however late the timers run. */
  const pastBudget = async (startedAt: number) => {
    while (performance.now() - startedAt <= BUDGET_MS) await new Promise((resolve) => setTimeout(resolve, BUDGET_MS));
  };

  it('fetch: is still read in full after the cutoff', async () => {
    const startedAt = performance.now();
    const res = await withDeadline(root, () => fetch(`${slow.url}/small`));
    await pastBudget(startedAt);
    expect(await res.text()).toBe('small body');
  });

  it('undici.request: is still read in full after the cutoff', async () => {
    const startedAt = performance.now();
    const res = await withDeadline(root, () => undici.request(`${slow.url}/small`));
    await pastBudget(startedAt);
    expect(await res.body.text()).toBe('small body');
  });

  it('http.get: is still read in full after the cutoff', async () => {
    const startedAt = performance.now();
    const res = await withDeadline(
      root,
      () => new Promise<IncomingMessage>((resolve, reject) => http.get(`${slow.url}/small`, resolve).once('error', reject)),
    );
    await pastBudget(startedAt);
    let body = '';
    for await (const chunk of res) body += String(chunk);
    expect(body).toBe('small body');
  });
});

describe('work nobody awaits', () => {
  it('a fire-and-forget fetch started in scope is aborted at the cutoff', async () => {
    let pending: Promise<Response> | undefined;
    await withDeadline(root, () => {
      pending = fetch(`${slow.url}/slow`);
    });
    await expect(pending).rejects.toBeInstanceOf(DeadlineExceededError);
    expect(await closedResponse()).toBe(false);
  });

  it('a server that answers 202 and keeps working: its background call ends at the caller cutoff', async () => {
    let background: Promise<unknown> | undefined;
    const front = await startCountingServer((_req, res) => {
      background = fetch(`${slow.url}/slow`).catch((err: unknown) => err);
      res.statusCode = 202;
      res.end('accepted');
    });
    try {
      const answer = await withDeadline(root, async () => {
        const res = await fetch(front.url);
        await res.text();
        return res.status;
      });
      expect(answer).toBe(202);
      expect(await closedResponse()).toBe(false);
      expect(await background).toBeInstanceOf(DeadlineExceededError);
    } finally {
      await front.close();
    }
  });
});
