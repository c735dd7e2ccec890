import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { registerInstrumentations } from '@opentelemetry/instrumentation';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  DeadlineCancelledError,
  DeadlineInstrumentation,
  getDeadline,
  type Deadline,
} from '../../src';
import { aborted, installOtel, sleep, type TestOtel } from '../helpers/otel';
import { readBody, response, startCountingServer, type CountingServer } from './helpers/servers';

let otel: TestOtel;
let instrumentation: DeadlineInstrumentation;
let downstream: CountingServer;
const held: (() => void)[] = [];

beforeAll(async () => {
  otel = installOtel();
  instrumentation = new DeadlineInstrumentation();
  registerInstrumentations({ instrumentations: [instrumentation] });
  downstream = await startCountingServer((req) => {
    if (req.url === '/hang') held.push(() => req.socket.destroy());
  });
});
afterAll(async () => {
  instrumentation.disable();
  await downstream.close();
  await otel.shutdown();
});
afterEach(() => {
  held.splice(0).forEach((release) => release());
  instrumentation.setConfig({});
});

interface Seen {
  deadline: Deadline | undefined;
  remainingMs: number | undefined;
}

/** A server whose handler records the deadline it runs under, then calls `then`. */
async function withServer(
  then: (req: IncomingMessage, res: ServerResponse, seen: Seen) => void,
  run: (url: string, seen: Seen[]) => Promise<void>,
): Promise<void> {
  const seen: Seen[] = [];
  const server = http.createServer((req, res) => {
    const deadline = getDeadline();
    const entry = { deadline, remainingMs: deadline?.remainingMs() };
    seen.push(entry);
    then(req, res, entry);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  try {
    await run(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen);
  } finally {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
}

/** Sends a request with raw headers and no active deadline, so only the server side is at work. */
async function send(url: string, headers: Record<string, string>): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }> {
  const res = await response(http.get(url, { headers }));
  return { status: res.statusCode ?? 0, headers: res.headers, body: await readBody(res) };
}

const ok = (_req: IncomingMessage, res: ServerResponse) => res.end('ok');

describe('server: the handler runs under the deadline its caller sent', () => {
  it('takes the remaining time from the headers', async () => {
    await withServer(ok, async (url, seen) => {
      const started = performance.now();
      await send(url, { 'x-deadline-remaining-ms': '3000' });
      expect(seen[0].deadline?.source).toBe('remote');
      // The 3 s the header gave, less at most the round trip: the handler ran inside it.
      expect(seen[0].remainingMs).toBeLessThanOrEqual(3_000);
      expect(seen[0].remainingMs).toBeGreaterThanOrEqual(3_000 - (performance.now() - started));
    });
  });

  it('caps what a caller asks for at maxIncomingMs', async () => {
    instrumentation.setConfig({ maxIncomingMs: 1_000 });
    const tenYears = String(Date.now() + 10 * 365 * 24 * 3_600_000);
    await withServer(ok, async (url, seen) => {
      await send(url, { 'x-deadline-at-ms': tenYears });
      expect(seen[0].remainingMs).toBeLessThanOrEqual(1_000);
    });
  });

  it('ignores the headers of a caller trustIncoming rejects, and survives a throwing hook', async () => {
    let calls = 0;
    instrumentation.setConfig({
      trustIncoming: (req) => {
        calls++;
        if (req.headers['x-caller'] === 'broken') throw new Error('hook bug');
        return req.headers['x-caller'] === 'trusted';
      },
    });
    await withServer(ok, async (url, seen) => {
      await send(url, { 'x-deadline-remaining-ms': '3000', 'x-caller': 'stranger' });
      await send(url, { 'x-deadline-remaining-ms': '3000', 'x-caller': 'broken' });
      await send(url, { 'x-deadline-remaining-ms': '3000', 'x-caller': 'trusted' });
      expect(seen.map((s) => s.deadline === undefined)).toEqual([true, true, false]);
      expect(calls).toBe(3);
    });
  });

  it('gives no deadline to a request without one unless defaultTimeoutMs is set', async () => {
    await withServer(ok, async (url, seen) => {
      await send(url, {});
      instrumentation.setConfig({ defaultTimeoutMs: 2_000 });
      await send(url, {});
      expect(seen[0].deadline).toBeUndefined();
      expect(seen[1].deadline?.source).toBe('local');
      expect(seen[1].remainingMs).toBeLessThanOrEqual(2_000);
    });
  });
});

describe('server: early reject in enforce mode', () => {
  it('answers 504 DEADLINE_EXCEEDED without running the handler when the deadline passed on arrival', async () => {
    await withServer(ok, async (url, seen) => {
      const reply = await send(url, { 'x-deadline-at-ms': String(Date.now() - 1_000) });
      expect(reply.status).toBe(504);
      expect(reply.headers['x-deadline-expired']).toBe('1');
      expect(reply.headers['content-type']).toBe('application/json');
      expect(JSON.parse(reply.body)).toEqual({ code: 'DEADLINE_EXCEEDED' });
      expect(seen).toHaveLength(0);
    });
  });

  it('answers INSUFFICIENT_BUDGET with the configured status below minUsefulMs', async () => {
    instrumentation.setConfig({ minUsefulMs: 500, rejectStatusCode: 503 });
    await withServer(ok, async (url, seen) => {
      const reply = await send(url, { 'x-deadline-remaining-ms': '100' });
      expect(reply.status).toBe(503);
      expect(reply.headers['x-deadline-expired']).toBe('1');
      expect(JSON.parse(reply.body)).toMatchObject({ code: 'INSUFFICIENT_BUDGET', neededMs: 500 });
      expect(seen).toHaveLength(0);
    });
  });

  it('rejects a bad rejectStatusCode up front', () => {
    expect(() => new DeadlineInstrumentation({ rejectStatusCode: 200, enabled: false })).toThrow(RangeError);
    expect(() => new DeadlineInstrumentation({ mode: 'loud' as never, enabled: false })).toThrow(TypeError);
  });
});

describe('server: client disconnect', () => {
  it("aborts the request's deadline with DeadlineCancelledError and the handler's outgoing call", async () => {
    const outcome: { reason?: unknown; downstream?: unknown; sideEffects: number } = { sideEffects: 0 };
    const handled = new Promise<void>((resolve) => {
      void withServer(
        (_req, res, seen) => {
          void aborted(seen.deadline!.signal).then((reason) => (outcome.reason = reason));
          fetch(`${downstream.url}/hang`)
            .then(() => outcome.sideEffects++, (err: unknown) => (outcome.downstream = err))
            .finally(() => {
              res.end();
              resolve();
            });
        },
        async (url) => {
          const req = http.get(url, { headers: { 'x-deadline-remaining-ms': '10000' } });
          req.on('error', () => {});
          while (downstream.arrivals.length === 0) await sleep(5);
          req.destroy();
          await handled;
        },
      );
    });
    await handled;
    expect(outcome.reason).toBeInstanceOf(DeadlineCancelledError);
    expect((outcome.reason as DeadlineCancelledError).code).toBe('CANCELLED');
    expect(outcome.downstream).toBe(outcome.reason);
    expect(outcome.sideEffects).toBe(0);
  });

  it('does not count a normal finish as a disconnect, and disposes the deadline when the response ends', async () => {
    let deadline: Deadline | undefined;
    const closed = new Promise<void>((resolve) => {
      void withServer(
        (req, res, seen) => {
          deadline = seen.deadline;
          req.resume();
          req.once('end', () => res.end('done'));
          res.once('close', () => setImmediate(resolve));
        },
        async (url) => {
          const post = http.request(url, { method: 'POST', headers: { 'x-deadline-remaining-ms': '10000' } });
          post.end('body');
          await readBody(await response(post));
          await closed;
        },
      );
    });
    await closed;
    expect(deadline?.aborted).toBe(false);
    expect((deadline as unknown as { disposed: boolean }).disposed).toBe(true);
  });
});

describe('server: observe mode', () => {
  it('runs the handler instead of rejecting', async () => {
    instrumentation.setConfig({ mode: 'observe', minUsefulMs: 500 });
    await withServer(ok, async (url, seen) => {
      const reply = await send(url, { 'x-deadline-remaining-ms': '100' });
      expect(reply.status).toBe(200);
      expect(seen).toHaveLength(1);
    });
  });
});
