/**
 * Server admission against a hostile caller: requests written by hand on a raw
 * socket, so they can carry what no HTTP client would send (a 10-year
 * deadline in every accepted header, CR/LF injection attempts, one header
 * repeated 100 times). The server runs the register entry's setup: the real
 * SDK, instrumentation-http and -undici, and DeadlineInstrumentation. Its
 * handler calls a counting downstream with fetch, so the test also sees what
 * the server passes on. Expected: no crash, the budget capped, and no byte of
 * the attack echoed back in reply headers, reply body or downstream headers.
 */
import { createRequire } from 'node:module';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import { context, defaultTextMapGetter, propagation } from '@opentelemetry/api';
import { registerInstrumentations } from '@opentelemetry/instrumentation';
import { HttpInstrumentation } from '@opentelemetry/instrumentation-http';
import { UndiciInstrumentation } from '@opentelemetry/instrumentation-undici';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { DeadlineInstrumentation, DeadlinePropagator, getDeadline } from '../../src';
import { installOtel, type TestOtel } from '../helpers/otel';
import { startCountingServer, type CountingServer } from '../instrumentation/helpers/servers';

const TEN_YEARS_MS = 10 * 365 * 24 * 3_600_000;
/** Appears in every injection attempt; it must never come back. */
const MARKER = 'pwned';

let otel: TestOtel;
let instrumentation: DeadlineInstrumentation;
let server: Server;
let port: number;
let downstream: CountingServer;

/** What the handler saw: its deadline and the baggage entry in its context. */
interface Seen {
  source: string | undefined;
  remainingMs: number | undefined;
  budgetMs: number | undefined;
  baggageAtMs: string | undefined;
}
const seen: Seen[] = [];

beforeAll(async () => {
  otel = installOtel();
  instrumentation = new DeadlineInstrumentation();
  registerInstrumentations({
    instrumentations: [
      new HttpInstrumentation({ requestHook: instrumentation.httpRequestHook }),
      new UndiciInstrumentation({ requestHook: instrumentation.undiciRequestHook }),
      instrumentation,
    ],
  });
  // instrumentation-http patches node:http when it is next required.
  const http = createRequire(import.meta.url)('node:http') as typeof import('node:http');
  downstream = await startCountingServer();
  // Room for 600 header lines, so that Node's 16 KiB default (431) does not stop them before our code runs.
  server = http.createServer({ maxHeaderSize: 64 * 1024 }, (req: IncomingMessage, res: ServerResponse) => {
    const deadline = getDeadline();
    seen.push({
      source: deadline?.source,
      remainingMs: deadline?.remainingMs(),
      budgetMs: deadline?.budgetMs,
      baggageAtMs: propagation.getBaggage(context.active())?.getEntry('deadline.at_ms')?.value,
    });
    req.resume();
    fetch(`${downstream.url}/next`)
      .then((reply) => reply.text())
      .then(
        () => res.end(JSON.stringify({ ok: true })),
        (err: unknown) => {
          res.statusCode = 502;
          res.end(JSON.stringify({ error: (err as Error).name }));
        },
      );
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  port = (server.address() as AddressInfo).port;
});
afterAll(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
  await downstream.close();
  instrumentation.disable();
  await otel.shutdown();
});
afterEach(() => {
  seen.length = 0;
  downstream.arrivals.length = 0;
  instrumentation.setConfig({});
});

interface RawReply {
  /** Every byte the server sent, as latin1, so nothing is hidden by decoding. */
  raw: string;
  status: number;
  headerNames: string[];
  body: string;
}

/**
 * Writes `headerLines` (joined with CRLF, sent as they are) after a request
 * line, reads until the server closes the connection, and returns the reply.
 * Bounded: gives up after 5 s.
 */
function rawRequest(headerLines: string[], encoding: BufferEncoding = 'latin1'): Promise<RawReply> {
  const head = ['GET /hostile HTTP/1.1', 'Host: 127.0.0.1', 'Connection: close', ...headerLines].join('\r\n');
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    const guard = setTimeout(() => socket.destroy(new Error('no reply within 5 s')), 5_000);
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    socket.once('error', (err) => {
      clearTimeout(guard);
      reject(err);
    });
    socket.once('close', () => {
      clearTimeout(guard);
      const raw = Buffer.concat(chunks).toString('latin1');
      const [headText, ...bodyParts] = raw.split('\r\n\r\n');
      const [statusLine, ...lines] = headText.split('\r\n');
      resolve({
        raw,
        status: Number(statusLine.split(' ')[1]),
        headerNames: lines.map((line) => line.slice(0, line.indexOf(':')).toLowerCase()),
        body: bodyParts.join('\r\n\r\n'),
      });
    });
    // Not end(): a half-closed socket would make the server close before it replies.
    socket.write(Buffer.from(`${head}\r\n\r\n`, encoding));
  });
}

/** The deadline headers the server's own outgoing call carried, as numbers. */
function passedOn(): { remainingMs: number; atMs: number; baggageAtMs: number } | undefined {
  expect(downstream.arrivals).toHaveLength(1);
  const headers = downstream.arrivals[0].headers;
  const values = (name: string) => headers.filter(([key]) => key === name).map(([, value]) => value);
  const remaining = values('x-deadline-remaining-ms');
  if (remaining.length === 0) {
    expect(values('x-deadline-at-ms')).toEqual([]);
    return undefined;
  }
  const [atMs] = values('x-deadline-at-ms');
  const entries = values('baggage').join(',').split(',').filter((entry) => entry.startsWith('deadline.at_ms='));
  // Numbers only, each header once: nothing of the caller's text survives into them.
  expect(remaining).toHaveLength(1);
  expect(remaining[0]).toMatch(/^\d+$/);
  expect(atMs).toMatch(/^\d+$/);
  expect(entries).toEqual([`deadline.at_ms=${atMs}`]);
  return { remainingMs: Number(remaining[0]), atMs: Number(atMs), baggageAtMs: Number(entries[0].split('=')[1]) };
}

/** The baggage the server's outgoing call carried. */
function forwardedBaggage(): string {
  return downstream.arrivals[0].headers.filter(([key]) => key === 'baggage').map(([, value]) => value).join(',');
}

/** Reply headers the server may send; anything else would have come from the request. */
const REPLY_HEADERS = new Set(['date', 'connection', 'content-length', 'content-type', 'transfer-encoding', 'keep-alive', 'x-deadline-expired']);

function expectNothingEchoed(reply: RawReply): void {
  expect(reply.raw.toLowerCase()).not.toContain(MARKER);
  expect(reply.raw.toLowerCase()).not.toContain('x-injected');
  for (const name of reply.headerNames) expect(REPLY_HEADERS.has(name), `reply header ${name}`).toBe(true);
}

/** The server still answers an ordinary request after the attack. */
async function expectStillServing(): Promise<void> {
  const before = seen.length;
  const started = performance.now();
  // 1 s: under every maxIncomingMs these tests set (2 s, 5 s), so the cap never changes what is granted.
  const reply = await rawRequest(['x-deadline-remaining-ms: 1000']);
  const elapsedMs = performance.now() - started;
  expect(reply.status).toBe(200);
  expect(seen.length).toBe(before + 1);
  // The 1 s the header gave, less no more than the exchange took (one clock, read around it).
  expect(seen.at(-1)?.remainingMs).toBeLessThanOrEqual(1_000);
  expect(seen.at(-1)?.remainingMs).toBeGreaterThanOrEqual(1_000 - elapsedMs);
}

/** Every header the propagator accepts, each asking for ten years. */
function tenYearHeaders(): string[] {
  const at = Date.now() + TEN_YEARS_MS;
  return [
    `x-deadline-remaining-ms: ${TEN_YEARS_MS}`,
    `x-deadline-at-ms: ${at}`,
    `baggage: deadline.at_ms=${at}`,
    'grpc-timeout: 99999999H',
    `connect-timeout-ms: ${TEN_YEARS_MS}`,
    `x-run-deadline-ms: ${TEN_YEARS_MS}`,
  ];
}

describe('a caller asking for a 10-year deadline', () => {
  it('is ignored when untrusted: the handler gets defaultTimeoutMs, and so does the next hop', async () => {
    instrumentation.setConfig({ trustIncoming: () => false, defaultTimeoutMs: 1_500 });
    const before = Date.now();
    const reply = await rawRequest(tenYearHeaders());
    const after = Date.now();
    expect(reply.status).toBe(200);
    expect(seen).toHaveLength(1);
    expect(seen[0].source).toBe('local');
    expect(seen[0].budgetMs).toBe(1_500);
    // The local deadline's cutoff is the server's Date.now() at the open plus 1.5 s, so the values
    // that carry it lie between the reads around the request (whole ms on all of them): no slack.
    // The caller's baggage entry was replaced by the local deadline's own.
    expect(Number(seen[0].baggageAtMs)).toBeGreaterThanOrEqual(before + 1_500);
    expect(Number(seen[0].baggageAtMs)).toBeLessThanOrEqual(after + 1_500);
    const next = passedOn()!;
    expect(next.remainingMs).toBeLessThanOrEqual(1_500);
    expect(next.atMs).toBeGreaterThanOrEqual(before + 1_500);
    expect(next.atMs).toBeLessThanOrEqual(after + 1_500);
    expectNothingEchoed(reply);
  });

  it('is ignored when untrusted without a default: no deadline, no baggage entry, nothing passed on', async () => {
    instrumentation.setConfig({ trustIncoming: () => false });
    const reply = await rawRequest(tenYearHeaders());
    expect(reply.status).toBe(200);
    expect(seen).toEqual([{ source: undefined, remainingMs: undefined, budgetMs: undefined, baggageAtMs: undefined }]);
    expect(passedOn()).toBeUndefined();
    expect(forwardedBaggage()).not.toContain('deadline.at_ms');
  });

  it('is capped at maxIncomingMs when trusted, on the handler, the next hop and the server span', async () => {
    instrumentation.setConfig({ maxIncomingMs: 2_000 });
    const before = Date.now();
    const reply = await rawRequest(tenYearHeaders());
    expect(reply.status).toBe(200);
    expect(seen[0].source).toBe('remote');
    expect(seen[0].budgetMs).toBeLessThanOrEqual(2_000);
    expect(seen[0].remainingMs).toBeLessThanOrEqual(2_000);
    expect(Number(seen[0].baggageAtMs)).toBeLessThanOrEqual(Date.now() + 2_000);
    const next = passedOn()!;
    expect(next.remainingMs).toBeLessThanOrEqual(2_000);
    expect(next.atMs).toBeLessThanOrEqual(Date.now() + 2_000);
    expect(next.atMs).toBeGreaterThan(before);
    const serverSpan = otel.spans().find((s) => s.attributes['url.path'] === '/hostile' || s.name === 'GET');
    expect(serverSpan?.attributes['deadline.budget_ms']).toBeLessThanOrEqual(2_000);
  });
});

/**
 * Injection attempts in the deadline headers. Node's parser refuses a bare CR,
 * a bare LF, a folded line and NUL with 400 before any listener runs; what it
 * lets through (percent-encoded CR/LF that the baggage codec decodes, unicode
 * line separators, latin1 control-like bytes) must be ignored as a value and
 * never reach a reply or the next hop as raw text.
 */
const injections: { name: string; lines: string[]; encoding?: BufferEncoding; status: number }[] = [
  { name: 'bare LF in x-deadline-remaining-ms', lines: [`x-deadline-remaining-ms: 100\nx-injected: ${MARKER}`], status: 400 },
  { name: 'bare CR in x-deadline-at-ms', lines: [`x-deadline-at-ms: 1\rx-injected: ${MARKER}`], status: 400 },
  { name: 'a folded continuation line', lines: ['x-deadline-remaining-ms: 100', ` x-injected: ${MARKER}`], status: 400 },
  { name: 'NUL in grpc-timeout', lines: [`grpc-timeout: 1S\0x-injected: ${MARKER}`], status: 400 },
  {
    name: 'percent-encoded CRLF in the baggage entry, next to a valid budget',
    lines: ['x-deadline-remaining-ms: 3000', `baggage: deadline.at_ms=1%0D%0Ax-injected:%20${MARKER},user=a%0D%0Ab`],
    status: 200,
  },
  {
    name: 'percent-encoded CRLF in the baggage entry alone',
    lines: [`baggage: deadline.at_ms=9%0D%0ASet-Cookie:%20${MARKER}=1`],
    status: 200,
  },
  { name: 'U+2028 and U+0085 as UTF-8 bytes', lines: [`x-deadline-remaining-ms: 100\u2028x-injected: ${MARKER}\u0085`], encoding: 'utf8', status: 200 },
  { name: 'tab-separated second value', lines: [`x-deadline-at-ms: 1\tx-injected: ${MARKER}`], status: 200 },
];

describe('CR/LF injection attempts in deadline headers', () => {
  it.each(injections)('$name: answered with $status, nothing echoed', async ({ lines, encoding, status }) => {
    instrumentation.setConfig({ maxIncomingMs: 5_000 });
    const reply = await rawRequest(lines, encoding);
    expect(reply.status).toBe(status);
    expectNothingEchoed(reply);
    if (status === 200) {
      // Whatever the handler ran under, it is a sane budget, and the next hop got numbers only.
      const { remainingMs } = seen[0];
      if (remainingMs !== undefined) expect(remainingMs).toBeGreaterThanOrEqual(0);
      if (remainingMs !== undefined) expect(remainingMs).toBeLessThanOrEqual(5_000);
      passedOn();
      // The baggage codec may pass the caller's entries on, but percent-encoded, never as raw CR/LF.
      for (const [name, value] of downstream.arrivals[0].headers) {
        expect(value, name).not.toMatch(/[\r\n\u2028\u0085]/);
        expect(value.toLowerCase(), name).not.toContain(`x-injected: ${MARKER}`);
      }
      expect(downstream.arrivals[0].headers.map(([name]) => name)).not.toContain('x-injected');
    } else {
      expect(seen).toHaveLength(0);
    }
    await expectStillServing();
  });

  it('an expired request carrying an injection attempt gets only the fixed 504 reply', async () => {
    const reply = await rawRequest(['x-deadline-at-ms: 1', `baggage: deadline.at_ms=1%0D%0ASet-Cookie:%20${MARKER}=1`]);
    expect(reply.status).toBe(504);
    expect(reply.body).toBe('{"code":"DEADLINE_EXCEEDED"}');
    expect(new Set(reply.headerNames)).toEqual(new Set(['content-type', 'content-length', 'x-deadline-expired', 'date', 'connection']));
    expectNothingEchoed(reply);
    expect(seen).toHaveLength(0);
    expect(downstream.arrivals).toHaveLength(0);
  });
});

describe('one deadline header repeated 100 times', () => {
  const repeat = (line: string, times = 100) => Array.from({ length: times }, () => line);

  it('x-deadline-remaining-ms: the budget is capped at maxIncomingMs', async () => {
    instrumentation.setConfig({ maxIncomingMs: 2_000 });
    const reply = await rawRequest(repeat('x-deadline-remaining-ms: 9000'));
    expect(reply.status).toBe(200);
    expect(seen[0].budgetMs).toBeLessThanOrEqual(2_000);
    expect(passedOn()!.remainingMs).toBeLessThanOrEqual(2_000);
    expectNothingEchoed(reply);
  });

  it('x-deadline-remaining-ms with one shorter value among them: the shorter one wins', async () => {
    const lines = repeat('x-deadline-remaining-ms: 9000');
    lines[5] = 'x-deadline-remaining-ms: 700';
    const reply = await rawRequest(lines);
    expect(reply.status).toBe(200);
    expect(seen[0].budgetMs).toBeLessThanOrEqual(700);
    expect(seen[0].budgetMs).toBeGreaterThan(500);
    expect(passedOn()!.remainingMs).toBeLessThanOrEqual(700);
  });

  it('x-deadline-at-ms ten years out: too long once joined, so ignored, and defaultTimeoutMs applies', async () => {
    instrumentation.setConfig({ maxIncomingMs: 2_000, defaultTimeoutMs: 1_000 });
    const reply = await rawRequest(repeat(`x-deadline-at-ms: ${Date.now() + TEN_YEARS_MS}`));
    expect(reply.status).toBe(200);
    expect(seen[0].source).toBe('local');
    expect(seen[0].budgetMs).toBe(1_000);
    expect(passedOn()!.remainingMs).toBeLessThanOrEqual(1_000);
  });

  it('every accepted header 100 times at once (600 lines): answered at once, capped, nothing echoed', async () => {
    instrumentation.setConfig({ maxIncomingMs: 2_000 });
    const started = performance.now();
    const reply = await rawRequest(tenYearHeaders().flatMap((line) => repeat(line)));
    expect(reply.status).toBe(200);
    expect(performance.now() - started).toBeLessThan(3_000);
    if (seen[0].budgetMs !== undefined) expect(seen[0].budgetMs).toBeLessThanOrEqual(2_000);
    const next = passedOn();
    if (next !== undefined) expect(next.remainingMs).toBeLessThanOrEqual(2_000);
    expectNothingEchoed(reply);
    await expectStillServing();
  });
});

/**
 * The W3C baggage codec decodes percent-encoding; the deadline propagator reads
 * the raw header and does not. `deadline.at_ms=%31%37…` is therefore no
 * deadline to admission, but would become a plain `deadline.at_ms=17…` entry in
 * the handler's baggage and be forwarded by the global propagator, so that a
 * next hop trusting this server would read a 10-year deadline. Admission drops
 * a deadline entry it did not accept.
 */
describe('a deadline entry the edge did not accept is not passed on', () => {
  it("does not forward an untrusted caller's percent-encoded baggage deadline to the next hop", async () => {
    instrumentation.setConfig({ trustIncoming: () => false });
    const encoded = [...String(Date.now() + TEN_YEARS_MS)].map((digit) => `%3${digit}`).join('');
    const reply = await rawRequest([`baggage: deadline.at_ms=${encoded}`]);
    expect(reply.status).toBe(200);
    expect(seen[0].source).toBeUndefined();
    // What a next hop that trusts this server would run the request under.
    const nextHop = new DeadlinePropagator().read({ baggage: forwardedBaggage() }, defaultTextMapGetter);
    expect(nextHop).toBeUndefined();
  });
});
