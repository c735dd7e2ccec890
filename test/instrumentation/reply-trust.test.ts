import type { IncomingMessage, ServerResponse } from 'node:http';
import { context } from '@opentelemetry/api';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  DeadlineExceededError,
  type DeadlineInstrumentation,
  InsufficientBudgetError,
  openDeadline,
  retryWithinDeadline,
  setDeadline,
  type ReplyInfo,
} from '../../src';
import type { TestOtel } from '../helpers/otel';
import { installWithTransports } from './helpers/with-transports';
import { sendReply } from './helpers/replies';
import { startCountingServer, type CountingServer } from './helpers/servers';

/**
 * A reply is evidence, not a command (issue 12 §3): `x-deadline-expired` is
 * believed only from a trusted peer, with the refusal status and a
 * well-formed body. Everything else comes back to the caller as it was sent.
 */

const HTTP_SCOPE = '@opentelemetry/instrumentation-http';
const UNDICI_SCOPE = '@opentelemetry/instrumentation-undici';
const EXCEEDED = '{"code":"DEADLINE_EXCEEDED"}';
const MARKER = { 'x-deadline-expired': '1' };

let otel: TestOtel;
let instrumentation: DeadlineInstrumentation;
let server: CountingServer;
let http: typeof import('node:http');
let undici: typeof import('undici');
/** Request bodies the server received in full: writes it committed. */
let writes = 0;

/** What the server answers per path. */
const REPLIES: Record<string, [number, string]> = {
  '/write': [200, EXCEEDED],
  '/exceeded': [504, EXCEEDED],
  '/insufficient': [504, '{"code":"INSUFFICIENT_BUDGET","neededMs":80,"remainingMs":12}'],
  '/absurd-needed': [504, '{"code":"INSUFFICIENT_BUDGET","neededMs":1e308,"remainingMs":12}'],
  '/negative-remaining': [504, '{"code":"INSUFFICIENT_BUDGET","neededMs":80,"remainingMs":-5}'],
  '/extra-field': [504, '{"code":"DEADLINE_EXCEEDED","retry":"elsewhere"}'],
  '/not-json': [504, '<html>gateway timeout</html>'],
  '/other-status': [503, EXCEEDED],
};

beforeAll(async () => {
  ({ otel, instrumentation, http, undici } = installWithTransports('otel-first'));
  server = await startCountingServer((req: IncomingMessage, res: ServerResponse) => {
    const [status, body] = REPLIES[req.url ?? ''] ?? [404, '{}'];
    req.resume();
    req.once('end', () => {
      if (req.method === 'POST') writes++;
      sendReply(res, status, body, MARKER);
    });
  });
});
afterAll(async () => {
  instrumentation.disable();
  await server.close();
  await otel.shutdown();
});
afterEach(() => {
  server.arrivals.length = 0;
  writes = 0;
  otel.exporter.reset();
  instrumentation.setConfig({});
});

interface Answer {
  status: number;
  text: string;
}

type Transport = (url: string, method: string) => Promise<Answer>;

const transports: [string, string, () => Transport][] = [
  [
    'fetch',
    UNDICI_SCOPE,
    () => async (url, method) => {
      const res = await fetch(url, { method, body: method === 'POST' ? 'payload' : undefined });
      return { status: res.status, text: await res.text() };
    },
  ],
  [
    'undici.request',
    UNDICI_SCOPE,
    () => async (url, method) => {
      const res = await undici.request(url, { method: method as 'GET', body: method === 'POST' ? 'payload' : undefined });
      return { status: res.statusCode, text: await res.body.text() };
    },
  ],
  [
    'http.request',
    HTTP_SCOPE,
    () => (url, method) =>
      new Promise<Answer>((resolve, reject) => {
        const req = http.request(url, { method });
        req.once('error', reject);
        req.once('response', (res) => {
          let text = '';
          res.setEncoding('utf8');
          res.on('data', (chunk: string) => (text += chunk));
          res.once('end', () => resolve({ status: res.statusCode ?? 0, text }));
        });
        req.end(method === 'POST' ? 'payload' : undefined);
      }),
  ],
];

/** Runs fn under a 10 s deadline: far from its cutoff, so any deadline error here came from a reply. */
async function underDeadline<T>(fn: () => Promise<T>): Promise<T> {
  const deadline = openDeadline({ operation: 'root', timeoutMs: 10_000, parent: null });
  try {
    return await context.with(setDeadline(context.active(), deadline), fn);
  } finally {
    deadline.dispose();
  }
}

function outcomes(scope: string): unknown[] {
  return otel
    .spans()
    .filter((s) => s.instrumentationScope.name === scope && s.kind === 2)
    .map((s) => s.attributes['deadline.outcome']);
}

/** A third-party host, as far as `propagateTo` is concerned: only another port of the same address is listed. */
function thirdParty(): void {
  instrumentation.setConfig({ propagateTo: [`127.0.0.1:${server.port === 65_535 ? 1 : server.port + 1}`] });
}

describe.each(transports)('%s', (_name, scope, make) => {
  const call = (path: string, method = 'GET') => underDeadline(() => make()(`${server.url}${path}`, method));

  it('returns a 200 POST carrying the marker from a third-party host as is: the write counted, not not_started', async () => {
    thirdParty();
    const answer = await call('/write', 'POST');
    expect(answer).toEqual({ status: 200, text: EXCEEDED });
    expect(writes).toBe(1);
    expect(outcomes(scope)).toHaveLength(1);
    expect(outcomes(scope)[0]).not.toBe('not_started');
  });

  it('never turns a 2xx into an error, even from a trusted peer', async () => {
    const answer = await call('/write', 'POST');
    expect(answer).toEqual({ status: 200, text: EXCEEDED });
    expect(writes).toBe(1);
    expect(outcomes(scope)[0]).not.toBe('not_started');
  });

  it('lets retryWithinDeadline see one successful attempt, not a call that never started', async () => {
    thirdParty();
    let attempts = 0;
    const answer = await underDeadline(() =>
      retryWithinDeadline(
        () => {
          attempts++;
          return make()(`${server.url}/write`, 'POST');
        },
        { attempts: 3, backoffMs: 0 },
      ),
    );
    expect(answer.status).toBe(200);
    expect(attempts).toBe(1);
    expect(writes).toBe(1);
    const events = otel.span('retry').events.map((e) => e.attributes?.['deadline.retry.decision']);
    expect(events).toEqual(['succeeded']);
  });

  it('believes a trusted early reject: the matching error and a not_started span', async () => {
    const error = await call('/insufficient').catch((err: unknown) => err);
    expect(error).toBeInstanceOf(InsufficientBudgetError);
    expect((error as InsufficientBudgetError).neededMs).toBe(80);
    expect((error as InsufficientBudgetError).remainingMs).toBe(12);
    expect(outcomes(scope)).toEqual(['not_started']);
    const exceeded = await call('/exceeded').catch((err: unknown) => err);
    expect(exceeded).toBeInstanceOf(DeadlineExceededError);
  });

  it('believes a reply from a propagateTo host by default', async () => {
    instrumentation.setConfig({ propagateTo: [`127.0.0.1:${server.port}`] });
    expect(await call('/exceeded').catch((err: unknown) => err)).toBeInstanceOf(DeadlineExceededError);
  });

  it.each(['/absurd-needed', '/negative-remaining', '/extra-field', '/not-json', '/other-status'])(
    'returns %s as it came, body intact',
    async (path) => {
      const answer = await call(path);
      expect(answer).toEqual({ status: REPLIES[path][0], text: REPLIES[path][1] });
      expect(outcomes(scope)[0]).not.toBe('not_started');
    },
  );

  it('returns an early reject from a third-party host as it came', async () => {
    thirdParty();
    expect(await call('/exceeded')).toEqual({ status: 504, text: EXCEEDED });
  });

  it('asks trustReply, with what answered; false (or a throw) means the reply is returned as is', async () => {
    const seen: ReplyInfo[] = [];
    instrumentation.setConfig({
      trustReply: (info) => {
        seen.push(info);
        return false;
      },
    });
    expect(await call('/exceeded', 'PUT')).toEqual({ status: 504, text: EXCEEDED });
    expect(seen.length).toBeGreaterThanOrEqual(1);
    expect(seen[0]).toEqual({ transport: expect.any(String), method: 'PUT', url: `${server.url}/exceeded`, statusCode: 504 });
    instrumentation.setConfig({
      trustReply: () => {
        throw new Error('hook bug');
      },
    });
    expect(await call('/exceeded')).toEqual({ status: 504, text: EXCEEDED });
  });
});
