import { spawn, type ChildProcess } from 'node:child_process';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { SpanKind } from '@opentelemetry/api';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type DeadlineInstrumentation, retryWithinDeadline, withDeadline } from '../../src';
import type { TestOtel } from '../helpers/otel';
import { installWithTransports } from './helpers/with-transports';

/**
 * A → B → C over HTTP (issue 35 §6). C, an otel-deadline server in another
 * process (the register entry) that refuses requests with less than 10 s
 * left, refuses B's request: 504, `x-deadline-expired: 1` and the refusal
 * body. B has done its work (a counted write) and, as a proxy does, passes
 * C's reply on to A as it came (B does not believe C: `trustReply` trusts only
 * B). A must not be told that B never started.
 */

const UNDICI_SCOPE = '@opentelemetry/instrumentation-undici';
const INSUFFICIENT_BODY = /^\{"code":"INSUFFICIENT_BUDGET","neededMs":10000,"remainingMs":\d+\}$/;

/** How B passes C's reply on. */
const SHAPES = {
  'writeHead with an object': (up: IncomingMessage, res: ServerResponse) => res.writeHead(up.statusCode ?? 502, up.headers),
  'writeHead with the raw list': (up: IncomingMessage, res: ServerResponse) => res.writeHead(up.statusCode ?? 502, up.rawHeaders),
  'setHeader, then implicit headers': (up: IncomingMessage, res: ServerResponse) => {
    res.statusCode = up.statusCode ?? 502;
    for (const [name, value] of Object.entries(up.headers)) if (value !== undefined) res.setHeader(name, value);
  },
} as const;
type Shape = keyof typeof SHAPES;

let otel: TestOtel;
let instrumentation: DeadlineInstrumentation;
let http: typeof import('node:http');
let c: ChildProcess;
let cUrl: string;
let b: import('node:http').Server;
let bUrl: string;
/** B's writes, by request id. */
const writes = new Map<string, number>();

async function startC(): Promise<string> {
  const script = `
    const server = require('node:http').createServer((req, res) => res.end('ran'));
    server.listen(0, '127.0.0.1', () => console.log(JSON.stringify({ port: server.address().port })));
    process.stdin.resume();
    process.stdin.once('end', () => server.close());`;
  c = spawn(process.execPath, ['--require', 'otel-deadline/register', '-e', script], {
    cwd: join(__dirname, '..', '..'),
    env: { PATH: process.env.PATH ?? '', OTEL_DEADLINE_MIN_USEFUL_MS: '10000', OTEL_TRACES_EXPORTER: 'none', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:9' },
    stdio: ['pipe', 'pipe', 'ignore'],
  });
  const port = await new Promise<number>((resolve, reject) => {
    c.once('error', reject);
    c.stdout!.once('data', (chunk: Buffer) => resolve((JSON.parse(String(chunk)) as { port: number }).port));
  });
  return `http://127.0.0.1:${port}`;
}

beforeAll(async () => {
  ({ otel, instrumentation, http } = installWithTransports('otel-first'));
  cUrl = await startC();
  b = http.createServer((req, res) => {
    const [, shape, id] = decodeURI(req.url ?? '').split('/');
    writes.set(id, (writes.get(id) ?? 0) + 1);
    const toC = http.request(`${cUrl}/`, (up) => {
      SHAPES[shape as Shape](up, res);
      up.pipe(res);
    });
    toC.once('error', () => res.writeHead(502).end());
    toC.end();
  });
  await new Promise<void>((resolve) => b.listen(0, '127.0.0.1', resolve));
  bUrl = `http://127.0.0.1:${(b.address() as AddressInfo).port}`;
});
afterEach(() => otel.exporter.reset());
afterAll(async () => {
  instrumentation.disable();
  b.closeAllConnections();
  await new Promise((resolve) => b.close(resolve));
  const closed = new Promise((resolve) => c.once('close', resolve));
  c.stdin!.end();
  await closed;
  await otel.shutdown();
});

describe.each(Object.keys(SHAPES) as Shape[])('B passes C\'s refusal on: %s', (shape) => {
  const trustOnlyB = () => instrumentation.setConfig({ trustReply: (reply) => reply.url?.startsWith(bUrl) === true });

  it("A gets C's reply with the marker restated, and its span is not not_started", async () => {
    trustOnlyB();
    const id = `once-${shape}`;
    const reply = await withDeadline({ operation: 'a', timeoutMs: 5_000, parent: null }, async () => {
      const res = await fetch(`${bUrl}/${shape}/${id}`);
      return { status: res.status, marker: res.headers.get('x-deadline-expired'), body: await res.text() };
    });
    expect(writes.get(id)).toBe(1);
    // C did refuse B's request (its body says so, and B passed it on whole)...
    expect(reply.status).toBe(504);
    expect(reply.body).toMatch(INSUFFICIENT_BODY);
    // ...but B ran its handler, so its reply to A claims no refusal of A's request.
    expect(reply.marker).toBe('downstream');
    const aSpans = otel.spans().filter((s) => s.instrumentationScope.name === UNDICI_SCOPE && s.kind === SpanKind.CLIENT);
    expect(aSpans).toHaveLength(1);
    expect(aSpans[0].attributes['deadline.outcome']).not.toBe('not_started');
  });

  it('retryWithinDeadline does not repeat the request (so B does not write twice)', async () => {
    trustOnlyB();
    const id = `retried-${shape}`;
    let attempts = 0;
    const failure = await withDeadline({ operation: 'a', timeoutMs: 5_000, parent: null }, () =>
      retryWithinDeadline(
        async () => {
          attempts++;
          const res = await fetch(`${bUrl}/${shape}/${id}`);
          await res.arrayBuffer();
          if (!res.ok) throw res;
        },
        { operation: 'a.retry', attempts: 3, backoffMs: 0 },
      ),
    ).catch((err: unknown) => err);
    expect((failure as Response).status).toBe(504);
    expect(attempts).toBe(1);
    expect(writes.get(id)).toBe(1);
    expect(otel.span('a.retry').events.map((e) => e.attributes?.['deadline.retry.decision'])).toEqual(['deadline_expired_reply']);
  });
});
