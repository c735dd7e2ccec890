import { getEventListeners } from 'node:events';
import http from 'node:http';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { context } from '@opentelemetry/api';
import { registerInstrumentations } from '@opentelemetry/instrumentation';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
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
import { readBody, requestError, response, startCountingServer, type CountingServer } from './helpers/servers';
import { selfSignedCertificate } from './helpers/tls';

let otel: TestOtel;
let instrumentation: DeadlineInstrumentation;
let server: CountingServer;
let tlsServer: https.Server;
let tlsUrl: string;
let tlsHeaders: http.IncomingHttpHeaders[] = [];
let ca: string;
const held: (() => void)[] = [];

beforeAll(async () => {
  otel = installOtel();
  instrumentation = new DeadlineInstrumentation();
  registerInstrumentations({ instrumentations: [instrumentation] });
  server = await startCountingServer((req, res) => {
    if (req.url === '/hang') return void held.push(() => res.destroy());
    if (req.url === '/stall-body') {
      res.writeHead(200);
      res.write('first chunk');
      return void held.push(() => res.destroy());
    }
    if (req.url === '/reject') {
      return sendReply(res, 504, '{"code":"INSUFFICIENT_BUDGET","neededMs":40,"remainingMs":3}', { 'x-deadline-expired': '1' });
    }
    req.resume();
    req.once('end', () => res.end('ok'));
  });
  const tls = selfSignedCertificate();
  ca = tls.cert;
  tlsServer = https.createServer(tls, (req, res) => {
    tlsHeaders.push(req.headers);
    if (req.url === '/hang') return void held.push(() => res.destroy());
    res.end('secure');
  });
  await new Promise<void>((resolve) => tlsServer.listen(0, '127.0.0.1', resolve));
  tlsUrl = `https://127.0.0.1:${(tlsServer.address() as AddressInfo).port}`;
});
afterAll(async () => {
  instrumentation.disable();
  await server.close();
  tlsServer.closeAllConnections();
  await new Promise((resolve) => tlsServer.close(resolve));
  await otel.shutdown();
});
afterEach(() => {
  held.splice(0).forEach((release) => release());
  server.arrivals.length = 0;
  tlsHeaders = [];
  otel.exporter.reset();
});

function under<T>(deadline: ManagedDeadline, fn: () => T): T {
  return context.with(setDeadline(context.active(), deadline), fn);
}

describe('node:http without an active deadline', () => {
  it('is untouched: no deadline headers and no timer', async () => {
    const spy = vi.spyOn(globalThis, 'setTimeout');
    try {
      await readBody(await response(http.get(`${server.url}/plain`)));
      expect(spy).not.toHaveBeenCalled();
      // Positive control: under a deadline the same call arms the deadline's timer.
      const deadline = openDeadline({ operation: 'root', timeoutMs: 5_000, parent: null });
      await under(deadline, async () => readBody(await response(http.get(`${server.url}/plain`))));
      deadline.dispose();
      expect(spy).toHaveBeenCalled();
    } finally {
      spy.mockRestore();
    }
    expect(server.headerCount(0, 'x-deadline-remaining-ms')).toBe(0);
    expect(server.headerCount(0, 'baggage')).toBe(0);
    expect(server.headerCount(1, 'x-deadline-remaining-ms')).toBe(1);
  });
});

describe('node:http and node:https under an active deadline', () => {
  it('sends each deadline header exactly once on request and get, replacing a stale one in another case', async () => {
    const deadline = openDeadline({ operation: 'root', timeoutMs: 5_000, parent: null });
    await under(deadline, async () => {
      const post = http.request(`${server.url}/post`, { method: 'POST', headers: { 'X-Deadline-At-Ms': '1', Baggage: 'a=1' } });
      post.end('payload');
      await readBody(await response(post));
      await readBody(await response(http.get({ host: '127.0.0.1', port: server.port, path: '/get' })));
    });
    deadline.dispose();
    for (const index of [0, 1]) {
      expect(server.headerCount(index, 'x-deadline-remaining-ms')).toBe(1);
      expect(server.headerCount(index, 'x-deadline-at-ms')).toBe(1);
      expect(server.headerCount(index, 'baggage')).toBe(1);
    }
    const first = Object.fromEntries(server.arrivals[0].headers);
    expect(first['x-deadline-at-ms']).toBe(String(Math.floor(deadline.expiresAtMs)));
    expect(first.baggage).toBe(`a=1,deadline.at_ms=${Math.floor(deadline.expiresAtMs)}`);
  });

  it('carries the headers over https too', async () => {
    const deadline = openDeadline({ operation: 'root', timeoutMs: 5_000, parent: null });
    const body = await under(deadline, async () => readBody(await response(https.get(`${tlsUrl}/`, { ca }))));
    deadline.dispose();
    expect(body).toBe('secure');
    expect(Number(tlsHeaders[0]['x-deadline-remaining-ms'])).toBeLessThanOrEqual(5_000);
  });

  it('refuses without opening a connection: the request errors, then closes', async () => {
    const before = server.connections;
    const deadline = await passedDeadline('root');
    const requests = under(deadline, () => [
      http.request(`${server.url}/x`, { method: 'POST' }),
      http.get(`${server.url}/x`),
      https.get(`${tlsUrl}/x`, { ca }),
    ]);
    const closed = requests.map((req) => new Promise((resolve) => req.once('close', resolve)));
    requests[0].end();
    const errors = await Promise.all(requests.map(requestError));
    await Promise.all(closed);
    deadline.dispose();
    for (const error of errors) expect(error).toBeInstanceOf(DeadlineExceededError);
    expect(server.connections).toBe(before);
    expect(server.arrivals).toHaveLength(0);
    expect(tlsHeaders).toHaveLength(0);
    expect(otel.spans().map((s) => s.attributes['deadline.outcome'])).toEqual(['not_started', 'not_started', 'not_started']);
  });

  it('refuses with InsufficientBudgetError below minUsefulMs', async () => {
    instrumentation.setConfig({ minUsefulMs: 60_000 });
    const deadline = openDeadline({ operation: 'root', timeoutMs: 5_000, parent: null });
    const error = await requestError(under(deadline, () => http.get(`${server.url}/x`)));
    instrumentation.setConfig({});
    deadline.dispose();
    expect(error).toBeInstanceOf(InsufficientBudgetError);
    expect(server.arrivals).toHaveLength(0);
  });

  it('fails a request queued for a pooled socket at the cutoff, not when a socket frees up', async () => {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    const blocker = http.get({ host: '127.0.0.1', port: server.port, path: '/hang', agent });
    blocker.on('error', () => {});
    const deadline = openDeadline({ operation: 'root', timeoutMs: 200, parent: null });
    const queued = under(deadline, () => http.get({ host: '127.0.0.1', port: server.port, path: '/queued', agent }));
    const closed = new Promise((resolve) => queued.once('close', resolve));
    const error = await requestError(queued);
    const lagMs = Date.now() - deadline.expiresAtMs;
    await closed;
    deadline.dispose();
    expect(error).toBeInstanceOf(DeadlineExceededError);
    // The pooled socket stays busy with /hang until the test releases it: only the cut ends the wait.
    expect(lagMs).toBeLessThan(CUT_LAG_LIMIT_MS);
    held.splice(0).forEach((release) => release());
    await sleep(20);
    expect(server.arrivals.map((a) => a.url)).toEqual(['/hang']);
    agent.destroy();
  });

  it('aborts a request waiting for headers, and errors a body being streamed with the deadline error', async () => {
    const deadline = openDeadline({ operation: 'root', timeoutMs: 200, parent: null });
    const waiting = await requestError(under(deadline, () => http.get(`${server.url}/hang`)));
    expect(waiting).toBeInstanceOf(DeadlineExceededError);
    // /hang never answers: only the cut can end this call (see CUT_LAG_LIMIT_MS for the width).
    expect(Date.now() - deadline.expiresAtMs).toBeLessThan(CUT_LAG_LIMIT_MS);
    deadline.dispose();

    const second = openDeadline({ operation: 'root', timeoutMs: 250, parent: null });
    const req = under(second, () => http.get(`${server.url}/stall-body`));
    req.on('error', () => {});
    const res = await response(req);
    let streamed = '';
    const error = await (async () => {
      for await (const chunk of res) streamed += String(chunk);
    })().catch((e: unknown) => e);
    expect(streamed).toBe('first chunk');
    expect(error).toBeInstanceOf(DeadlineExceededError);
    // /stall-body never ends its body: only the cut can end the read.
    expect(Date.now() - second.expiresAtMs).toBeLessThan(CUT_LAG_LIMIT_MS);
    second.dispose();
  });

  it("keeps the caller's signal working and removes its listener from the deadline once settled", async () => {
    const deadline = openDeadline({ operation: 'root', timeoutMs: 5_000, parent: null });
    const caller = new AbortController();
    const req = under(deadline, () => http.get(`${server.url}/hang`, { signal: caller.signal }));
    setTimeout(() => caller.abort(new Error('caller gave up')), 50);
    const error = await requestError(req);
    expect((error as Error & { cause?: Error }).cause?.message).toBe('caller gave up');
    await under(deadline, async () => readBody(await response(http.get(`${server.url}/ok`))));
    await sleep(10);
    expect(getEventListeners(deadline.signal, 'abort')).toHaveLength(0);
    deadline.dispose();
  });

  it("turns a server's early-reject reply into an 'error' event with the matching error", async () => {
    const deadline = openDeadline({ operation: 'root', timeoutMs: 5_000, parent: null });
    const req = under(deadline, () => http.get(`${server.url}/reject`));
    const events: string[] = [];
    req.on('error', () => events.push('error'));
    req.on('close', () => events.push('close'));
    const error = await requestError(req);
    await sleep(20);
    deadline.dispose();
    expect(error).toBeInstanceOf(InsufficientBudgetError);
    expect((error as InsufficientBudgetError).neededMs).toBe(40);
    expect(events).toEqual(['error', 'close']);
  });
});
