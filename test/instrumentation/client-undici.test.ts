import diagnosticsChannel from 'node:diagnostics_channel';
import { getEventListeners } from 'node:events';
import { createRequire } from 'node:module';
import { Writable, type Duplex } from 'node:stream';
import { pipeline as pipelineAsync } from 'node:stream/promises';
import { context, propagation } from '@opentelemetry/api';
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
let undici: typeof import('undici');
const held: (() => void)[] = [];

beforeAll(async () => {
  otel = installOtel();
  instrumentation = new DeadlineInstrumentation();
  registerInstrumentations({ instrumentations: [instrumentation] });
  // Loaded after registration through require, as an application does; an ESM
  // import needs the loader hook that the register entry installs.
  undici = createRequire(import.meta.url)('undici');
  server = await startCountingServer((req, res) => {
    if (req.url === '/hang') return void held.push(() => res.destroy());
    if (req.url === '/stall-body') {
      res.writeHead(200);
      res.write('first chunk');
      return void held.push(() => res.destroy());
    }
    if (req.url === '/reject') {
      return sendReply(res, 504, '{"code":"DEADLINE_EXCEEDED"}', { 'x-deadline-expired': '1' });
    }
    req.resume();
    req.once('end', () => res.end('ok'));
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
});

function under<T>(deadline: ManagedDeadline, fn: () => T): T {
  return context.with(setDeadline(context.active(), deadline), fn);
}

const sink = () => new Writable({ write: (_chunk, _encoding, done) => done() });

describe('undici without an active deadline', () => {
  it('is untouched: no deadline headers', async () => {
    const { body } = await undici.request(`${server.url}/plain`);
    expect(await body.text()).toBe('ok');
    expect(server.headerCount(0, 'x-deadline-remaining-ms')).toBe(0);
    expect(server.headerCount(0, 'baggage')).toBe(0);
  });
});

describe('undici under an active deadline', () => {
  it('sends the deadline headers exactly once on request, stream, pipeline, fetch and Pool.request', async () => {
    const deadline = openDeadline({ operation: 'root', timeoutMs: 5_000, parent: null });
    const pool = new undici.Pool(server.url);
    await under(deadline, async () => {
      await (await undici.request(`${server.url}/a`, { headers: { 'x-deadline-at-ms': '1' } })).body.text();
      await undici.stream(`${server.url}/b`, { method: 'GET' }, () => sink());
      const piped = undici.pipeline(`${server.url}/c`, { method: 'GET' }, ({ body }) => body);
      piped.end();
      await pipelineAsync(piped, sink());
      await (await undici.fetch(`${server.url}/d`)).text();
      await (await pool.request({ path: '/e', method: 'GET' })).body.text();
    });
    await pool.close();
    deadline.dispose();
    expect(server.arrivals.map((a) => a.url)).toEqual(['/a', '/b', '/c', '/d', '/e']);
    server.arrivals.forEach((_arrival, index) => {
      expect(server.headerCount(index, 'x-deadline-remaining-ms')).toBe(1);
      expect(server.headerCount(index, 'x-deadline-at-ms')).toBe(1);
      expect(server.headerCount(index, 'baggage')).toBe(1);
    });
    expect(Object.fromEntries(server.arrivals[0].headers)['x-deadline-at-ms']).toBe(String(Math.floor(deadline.expiresAtMs)));
  });

  it('calls given only a URL keep undici semantics: global dispatcher, query string, URL objects, headers once', async () => {
    // Calls given only a URL go through undici's own top-level function like any other.
    const agent = new undici.Agent();
    let dispatched = 0;
    const counting = agent.compose((dispatch) => (options, handler) => {
      dispatched++;
      return dispatch(options, handler);
    });
    const previous = undici.getGlobalDispatcher();
    undici.setGlobalDispatcher(counting);
    const deadline = openDeadline({ operation: 'root', timeoutMs: 5_000, parent: null });
    try {
      await under(deadline, async () => {
        await (await undici.request(`${server.url}/bare?x=1&y=2`)).body.text();
        await (await undici.request(new URL(`${server.url}/bare-url`))).body.text();
        // undici accepts these forms at run time (its top-level functions take the handler in place of options); its types insist on options.
        const bare = undici as unknown as {
          stream(url: string, factory: () => Writable): Promise<unknown>;
          pipeline(url: string, handler: (data: { body: NodeJS.ReadableStream }) => NodeJS.ReadableStream): Duplex;
        };
        await bare.stream(`${server.url}/bare-stream`, () => sink());
        const piped = bare.pipeline(`${server.url}/bare-pipe`, ({ body }) => body);
        piped.end();
        await pipelineAsync(piped, sink());
      });
    } finally {
      undici.setGlobalDispatcher(previous);
      deadline.dispose();
      await agent.close();
    }
    expect(dispatched).toBe(4);
    expect(server.arrivals.map((a) => [a.method, a.url])).toEqual([
      ['GET', '/bare?x=1&y=2'],
      ['GET', '/bare-url'],
      ['GET', '/bare-stream'],
      ['GET', '/bare-pipe'],
    ]);
    server.arrivals.forEach((_arrival, index) => {
      expect(server.headerCount(index, 'x-deadline-remaining-ms')).toBe(1);
      expect(server.headerCount(index, 'x-deadline-at-ms')).toBe(1);
      expect(server.headerCount(index, 'baggage')).toBe(1);
    });
  });

  it('gives the deadline headers to a request no wrapper of ours sees (Dispatcher#dispatch), in the request channel', async () => {
    const deadline = openDeadline({ operation: 'root', timeoutMs: 5_000, parent: null });
    const client = new undici.Client(server.url);
    await under(
      deadline,
      () =>
        new Promise<void>((resolve, reject) => {
          client.dispatch(
            { origin: server.url, path: '/dispatched', method: 'GET' },
            { onConnect() {}, onHeaders: () => true, onData: () => true, onComplete: () => resolve(), onError: reject },
          );
        }),
    );
    await client.close();
    deadline.dispose();
    expect(server.arrivals.map((a) => a.url)).toEqual(['/dispatched']);
    for (const name of ['x-deadline-remaining-ms', 'x-deadline-at-ms', 'baggage']) expect([name, server.headerCount(0, name)]).toEqual([name, 1]);
  });

  it('still gives the deadline headers to a request whose options lost them inside the guarded dispatch', async () => {
    // An interceptor that rewrites the headers runs inside our wrapper's dispatch, while the call says it
    // carries the headers already: the request channel must write them, and not take that mark for itself.
    const stripping = (dispatch: (opts: Record<string, unknown>, handler: unknown) => boolean) => (opts: Record<string, unknown>, handler: unknown) =>
      dispatch({ ...opts, headers: {} }, handler);
    const agent = new undici.Agent();
    const composed = agent.compose(stripping as never);
    const deadline = openDeadline({ operation: 'root', timeoutMs: 5_000, parent: null });
    await under(deadline, async () => {
      await (await composed.request({ origin: server.url, path: '/stripped', method: 'GET' })).body.text();
    });
    await agent.close();
    deadline.dispose();
    expect(server.arrivals.map((a) => a.url)).toEqual(['/stripped']);
    for (const name of ['x-deadline-remaining-ms', 'x-deadline-at-ms', 'baggage']) expect([name, server.headerCount(0, name)]).toEqual([name, 1]);
  });

  it('drops the repeat a subscriber ahead of ours adds while the request is created, for fetch and undici', async () => {
    // What instrumentation-undici does when it was registered first: inject through
    // the global propagator (which includes ours) and addHeader each value, before our
    // own create subscriber has seen the request. The probe sees the list right after.
    instrumentation.disable();
    type Created = { request: { headers: unknown[]; addHeader(name: string, value: string): unknown } };
    const injectAhead = (message: unknown) => {
      const { request } = message as Created;
      const added: Record<string, string> = {};
      propagation.inject(context.active(), added);
      for (const [name, value] of Object.entries(added)) request.addHeader(name, value);
    };
    const lists: string[][] = [];
    const probe = (message: unknown) => {
      const { headers } = (message as Created).request;
      lists.push(headers.filter((_value, i) => i % 2 === 0).map((name) => String(name).toLowerCase()));
    };
    diagnosticsChannel.subscribe('undici:request:create', injectAhead);
    diagnosticsChannel.subscribe('undici:request:create', probe);
    instrumentation.enable();
    const deadline = openDeadline({ operation: 'root', timeoutMs: 5_000, parent: null });
    try {
      // Our hooks go on each undici copy's Request class with its first request.
      await (await undici.request(`${server.url}/warm`)).body.text();
      await (await fetch(`${server.url}/warm-fetch`)).text();
      lists.length = 0;
      server.arrivals.length = 0;
      await under(deadline, async () => {
        await (await undici.request(`${server.url}/ahead`)).body.text();
        await (await undici.request(`${server.url}/ahead-options`, { headers: { 'x-user': '1' } })).body.text();
        await (await fetch(`${server.url}/ahead-fetch`)).text();
      });
    } finally {
      deadline.dispose();
      diagnosticsChannel.unsubscribe('undici:request:create', injectAhead);
      diagnosticsChannel.unsubscribe('undici:request:create', probe);
    }
    expect(lists).toHaveLength(3);
    for (const names of lists) {
      for (const name of ['x-deadline-remaining-ms', 'x-deadline-at-ms', 'baggage']) {
        expect([name, names.filter((n) => n === name).length]).toEqual([name, 1]);
      }
    }
    server.arrivals.forEach((_arrival, index) => {
      for (const name of ['x-deadline-remaining-ms', 'x-deadline-at-ms', 'baggage']) expect(server.headerCount(index, name)).toBe(1);
    });
  });

  it('leaves a URL undici rejects to undici', async () => {
    const deadline = openDeadline({ operation: 'root', timeoutMs: 5_000, parent: null });
    const errors = await under(deadline, () =>
      Promise.all([
        Promise.resolve().then(() => undici.request('ftp://127.0.0.1/x')).catch((e: unknown) => e),
        Promise.resolve().then(() => undici.request('not a url')).catch((e: unknown) => e),
      ]),
    );
    deadline.dispose();
    for (const error of errors) expect((error as Error).name).toMatch(/InvalidArgumentError|TypeError/);
    expect(server.arrivals).toHaveLength(0);
  });

  it('leaves nothing armed on the deadline when undici throws before taking the request', async () => {
    const deadline = openDeadline({ operation: 'root', timeoutMs: 60_000, parent: null });
    // The request wrapper's abort subscription on the deadline: it must be gone once the call threw.
    const subscribers = () => (deadline as unknown as { abortSubscribers?: Set<unknown> }).abortSubscribers?.size ?? 0;
    const thrown = await under(deadline, () =>
      Promise.all([
        Promise.resolve().then(() => undici.request('ftp://127.0.0.1/x')).catch((e: unknown) => e),
        Promise.resolve().then(() => undici.pipeline('ftp://127.0.0.1/x', { method: 'GET' }, ({ body }) => body)).catch((e: unknown) => e),
      ]),
    );
    for (const error of thrown) expect((error as Error).name).toMatch(/InvalidArgumentError|TypeError/);
    expect(subscribers()).toBe(0);
    deadline.dispose();
    expect(server.arrivals).toHaveLength(0);
  });

  it('refuses every API before any connection once the deadline has passed', async () => {
    const before = server.connections;
    const deadline = await passedDeadline('root');
    const pool = new undici.Pool(server.url);
    const errors = await under(deadline, () =>
      Promise.all([
        undici.request(`${server.url}/x`).catch((e: unknown) => e),
        undici.stream(`${server.url}/x`, { method: 'GET' }, () => sink()).catch((e: unknown) => e),
        pipelineAsync(undici.pipeline(`${server.url}/x`, { method: 'GET' }, ({ body }) => body), sink()).catch((e: unknown) => e),
        undici.fetch(`${server.url}/x`).catch((e: unknown) => e),
        pool.request({ path: '/x', method: 'POST', body: 'payload' }).catch((e: unknown) => e),
        new Promise((resolve) => pool.request({ path: '/x', method: 'GET' }, (err) => resolve(err))),
      ]),
    );
    await pool.close();
    deadline.dispose();
    for (const error of errors) expect(error).toBeInstanceOf(DeadlineExceededError);
    expect(server.connections).toBe(before);
    expect(server.arrivals).toHaveLength(0);
    expect(otel.spans().filter((s) => s.attributes['deadline.outcome'] === 'not_started')).toHaveLength(6);
  });

  it('refuses with InsufficientBudgetError below minUsefulMs', async () => {
    instrumentation.setConfig({ minUsefulMs: 60_000 });
    const deadline = openDeadline({ operation: 'root', timeoutMs: 5_000, parent: null });
    const error = await under(deadline, () => undici.request(`${server.url}/x`)).catch((e: unknown) => e);
    instrumentation.setConfig({});
    deadline.dispose();
    expect(error).toBeInstanceOf(InsufficientBudgetError);
    expect(server.arrivals).toHaveLength(0);
  });

  it('aborts a request waiting for a pooled socket at the cutoff', async () => {
    const pool = new undici.Pool(server.url, { connections: 1 });
    const blocker = pool.request({ path: '/hang', method: 'GET' }).catch(() => {});
    const deadline = openDeadline({ operation: 'root', timeoutMs: 200, parent: null });
    const error = await under(deadline, () => pool.request({ path: '/queued', method: 'GET' })).catch((e: unknown) => e);
    const lagMs = Date.now() - deadline.expiresAtMs;
    deadline.dispose();
    expect(error).toBeInstanceOf(DeadlineExceededError);
    // /hang never answers: only the cut can end this call (see CUT_LAG_LIMIT_MS for the width).
    expect(lagMs).toBeLessThan(CUT_LAG_LIMIT_MS);
    expect(server.arrivals.map((a) => a.url)).toEqual(['/hang']);
    held.splice(0).forEach((release) => release());
    await blocker;
    await pool.destroy();
  });

  it('aborts a request waiting for response headers, and a body being streamed', async () => {
    const deadline = openDeadline({ operation: 'root', timeoutMs: 200, parent: null });
    const waiting = await under(deadline, () => undici.request(`${server.url}/hang`)).catch((e: unknown) => e);
    expect(waiting).toBeInstanceOf(DeadlineExceededError);
    deadline.dispose();

    const second = openDeadline({ operation: 'root', timeoutMs: 250, parent: null });
    const { body } = await under(second, () => undici.request(`${server.url}/stall-body`));
    const streaming = await body.text().catch((e: unknown) => e);
    expect(streaming).toBeInstanceOf(DeadlineExceededError);
    // /stall-body never ends its body: only the cut can end the read.
    expect(Date.now() - second.expiresAtMs).toBeLessThan(CUT_LAG_LIMIT_MS);
    second.dispose();
  });

  it("keeps the caller's signal working and leaves no listener behind", async () => {
    const deadline = openDeadline({ operation: 'root', timeoutMs: 5_000, parent: null });
    const caller = new AbortController();
    const mine = new Error('caller gave up');
    const pending = under(deadline, () => undici.request(`${server.url}/hang`, { signal: caller.signal })).catch(
      (e: unknown) => e,
    );
    await sleep(20);
    // While the call is in flight it is subscribed to the deadline (the check below can fail).
    expect((deadline as unknown as { subscriberCount: number }).subscriberCount).toBeGreaterThan(0);
    // Aborted only now: a timer set before the call raced the first request's synchronous setup on a loaded machine.
    caller.abort(mine);
    const error = await pending;
    expect(error).toBe(mine);
    await under(deadline, async () => (await undici.request(`${server.url}/ok`)).body.text());
    await sleep(20);
    expect(getEventListeners(deadline.signal, 'abort')).toHaveLength(0);
    expect(getEventListeners(caller.signal, 'abort')).toHaveLength(0);
    // Calls subscribe to the deadline without a signal: every subscription is released too.
    expect((deadline as unknown as { subscriberCount: number }).subscriberCount).toBe(0);
    deadline.dispose();
  });

  it("turns a server's early-reject reply into a DeadlineExceededError", async () => {
    const deadline = openDeadline({ operation: 'root', timeoutMs: 5_000, parent: null });
    const error = await under(deadline, () => undici.request(`${server.url}/reject`)).catch((e: unknown) => e);
    deadline.dispose();
    expect(error).toBeInstanceOf(DeadlineExceededError);
  });
});
