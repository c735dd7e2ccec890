/**
 * Canaries for the private parts of other libraries the package still relies
 * on (docs/internals.md lists each one, what it buys and why it stays). Each
 * test checks the very shape the code uses, on real objects of the library
 * installed on this line (the suite runs on Node 20 + OTel 2.x and on Node 22
 * and 24 + OTel 3.x, and global fetch is a different undici on each Node), and
 * says in its message which file to change when the library moved.
 */
import diagnosticsChannel from 'node:diagnostics_channel';
import http from 'node:http';
import { createRequire } from 'node:module';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { failQueuedRequest } from '../../instrumentation/client/http';
import { RequestClassPatcher } from '../../instrumentation/client/request-class';
import { dispatcherCallUrl } from '../../instrumentation/client/undici-target';
import { requestError, startCountingServer, type CountingServer } from './helpers/servers';

const load = createRequire(import.meta.url);
const undici: typeof import('undici') = load('undici');
const NPM_UNDICI = `undici ${(load('undici/package.json') as { version: string }).version}`;
let server: CountingServer;
const held: (() => void)[] = [];

beforeAll(async () => {
  server = await startCountingServer((req, res) => {
    if (req.url === '/hang') return void held.push(() => res.destroy());
    req.resume();
    req.once('end', () => res.end('ok'));
  });
});
afterEach(() => {
  held.splice(0).forEach((release) => release());
  server.arrivals.length = 0;
});
afterAll(() => server.close());

/** What undici did with each hooked method of one request, through RequestClassPatcher. */
interface Seen {
  proto: object | undefined;
  abortGiven: string[];
  completed: number;
}

/**
 * Runs `send` with a RequestClassPatcher installed from `undici:request:create`,
 * as the instrumentation installs it, adding one header through `addHeader`
 * as instrumentation-undici does; `refuse` is what beforeWrite returns.
 */
async function throughPatcher(send: () => Promise<unknown>, refuse?: Error): Promise<Seen & { result: unknown }> {
  const seen: Seen = { proto: undefined, abortGiven: [], completed: 0 };
  const patcher = new RequestClassPatcher({
    beforeWrite: (_request, abort) => {
      seen.abortGiven.push(typeof abort);
      return refuse;
    },
    beforeComplete: () => void seen.completed++,
  });
  const onCreate = (message: unknown) => {
    const { request } = message as { request: { addHeader(name: string, value: string): unknown } };
    seen.proto = Object.getPrototypeOf(request) as object;
    patcher.patchClassOf(request);
    request.addHeader('x-canary', '1');
  };
  diagnosticsChannel.subscribe('undici:request:create', onCreate);
  try {
    const result = await send().catch((error: unknown) => error);
    return { ...seen, result };
  } finally {
    diagnosticsChannel.unsubscribe('undici:request:create', onCreate);
    patcher.restore();
  }
}

const COPIES = [
  { copy: 'npm undici', send: (path: string) => undici.request(`${server.url}${path}`).then((r) => r.body.text()) },
  { copy: 'the undici behind global fetch', send: (path: string) => fetch(`${server.url}${path}`).then((r) => r.text()) },
];

describe.each(COPIES)("undici's Request class ($copy)", ({ copy, send }) => {
  const where = copy === 'npm undici' ? NPM_UNDICI : `undici ${process.versions.undici} (global fetch)`;

  it('has onConnect and onComplete on its prototype (and onData, reply-watch.ts), and calls them on every request (request-class.ts)', async () => {
    const seen = await throughPatcher(() => send('/ok'));
    expect(seen.result, `${where}: the request itself failed`).toBe('ok');
    const proto = seen.proto as Record<string, unknown>;
    for (const name of ['onConnect', 'onComplete', 'onData']) {
      expect(Object.prototype.hasOwnProperty.call(proto, name) && typeof proto[name] === 'function', `${where}: Request.prototype.${name} is gone; instrumentation/client/request-class.ts (reply-watch.ts for onData) hooks it`).toBe(true);
    }
    expect(seen.abortGiven, `${where}: onConnect is no longer called with the request's abort before the write`).toEqual(['function']);
    expect(seen.completed, `${where}: onComplete no longer runs once per finished request`).toBe(1);
    expect(server.headerCount(0, 'x-canary'), `${where}: a header added through addHeader did not go out once`).toBe(1);
  });

  it("keeps its headers as a flat [name, value, ...] list that is written as it stands when the request goes out (strip-deadline.ts)", async () => {
    let headers: unknown;
    const onCreate = (message: unknown) => {
      const { request } = message as { request: { headers: unknown } };
      headers = request.headers;
      // As stripDeadlineHeadersInList does: edit the list in place.
      if (Array.isArray(headers)) headers.push('x-in-place', '2');
    };
    diagnosticsChannel.subscribe('undici:request:create', onCreate);
    try {
      await send('/list');
    } finally {
      diagnosticsChannel.unsubscribe('undici:request:create', onCreate);
    }
    expect(Array.isArray(headers), `${where}: request.headers is no longer an array; strip-deadline.ts edits it in place`).toBe(true);
    expect(server.headerCount(0, 'x-in-place'), `${where}: an in-place edit of request.headers no longer reaches the wire`).toBe(1);
  });

  it('drops the request unwritten when the abort onConnect was given is called right there (channels.ts beforeWrite)', async () => {
    const reason = new Error('past the cutoff');
    const seen = await throughPatcher(() => send('/refused'), reason);
    const error = seen.result as Error;
    // fetch wraps what the request failed with; undici.request rejects with it.
    expect(error === reason || error.cause === reason, `${where}: the request did not fail with the reason given to its abort: ${String(error)}`).toBe(true);
    expect(server.arrivals, `${where}: a request aborted in onConnect still reached the server`).toHaveLength(0);
  });
});

describe("undici's Client and Pool", () => {
  it('keep their origin under Symbol(url), which a call on them uses whatever opts.origin says (undici-target.ts)', async () => {
    const pool = new undici.Pool(server.url);
    const client = new undici.Client(server.url);
    try {
      for (const dispatcher of [pool, client]) {
        expect(dispatcherCallUrl(dispatcher, { path: '/p', origin: 'http://elsewhere.invalid' }), `${NPM_UNDICI}: ${dispatcher.constructor.name} no longer keeps its origin under Symbol(url)`).toBe(`${server.url}/p`);
      }
    } finally {
      await Promise.all([pool.close(), client.close()]);
    }
  });
});

describe('node:http ClientRequest', () => {
  it('fails a request queued in agent.requests at once through onSocket(null) (http.ts failQueuedRequest)', async () => {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    const blocker = http.get({ host: '127.0.0.1', port: server.port, path: '/hang', agent });
    blocker.on('error', () => {});
    const queued = http.get({ host: '127.0.0.1', port: server.port, path: '/queued', agent });
    const inQueue = Object.values((agent as unknown as { requests: Record<string, unknown[]> }).requests).some((queue) => queue.includes(queued));
    expect(inQueue, `Node ${process.version}: a request waiting for a pooled socket is no longer in agent.requests`).toBe(true);
    const reason = new Error('cut while queued');
    const closed = new Promise((resolve) => queued.once('close', resolve));
    const failed = requestError(queued);
    queued.destroy(reason);
    failQueuedRequest(queued);
    // The blocker still holds the only socket: nothing but failQueuedRequest can end the wait.
    expect(await failed, `Node ${process.version}: onSocket(null) no longer fails a queued request with its destroy reason`).toBe(reason);
    await closed;
    expect(Object.keys((agent as unknown as { requests: object }).requests)).toEqual([]);
    agent.destroy();
  });

  it("emits 'response' and 'close' through the request's own emit (http.ts convertRejectReplies)", async () => {
    const events: (string | symbol)[] = [];
    const request = http.get(`${server.url}/emit`);
    const emit = request.emit;
    request.emit = function (this: http.ClientRequest, event: string | symbol, ...args: unknown[]) {
      events.push(event);
      return emit.call(this, event, ...args);
    } as typeof request.emit;
    await new Promise((resolve) => {
      request.once('response', (res: http.IncomingMessage) => res.resume());
      request.once('close', resolve);
    });
    expect(events.includes('response') && events.includes('close'), `Node ${process.version}: ClientRequest no longer emits through the instance's emit; early-reject replies would reach the caller as responses`).toBe(true);
  });
});
