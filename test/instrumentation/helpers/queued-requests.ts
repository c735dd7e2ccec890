import { createRequire } from 'node:module';
import type { Agent as HttpAgent } from 'node:http';
import { context } from '@opentelemetry/api';
import { registerInstrumentations } from '@opentelemetry/instrumentation';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { DeadlineExceededError, DeadlineInstrumentation, openDeadline, setDeadline, type ManagedDeadline } from '../../../src';
import { untilPassed } from '../../helpers/clock';
import { installOtel, type TestOtel } from '../../helpers/otel';
import type { RegistrationOrder } from './coexistence';
import { readBody, response, startCountingServer, type CountingServer } from './servers';
import { installWithTransports } from './with-transports';

/**
 * A request that waits in a dispatcher's queue is created (and seen by the
 * undici channels, and by a propagator instrumentation-undici injects through)
 * from the dispatcher's drain, which runs in the async context of whichever
 * request opened the connection. Every request must still carry its own
 * caller's deadline, or none, and be cut at its own cutoff only.
 *
 * `setup`: DeadlineInstrumentation alone, or next to instrumentation-http and
 * -undici (which inject through the global propagator) in either order.
 */

interface Target {
  get(path: string): Promise<unknown>;
  close(): Promise<void>;
}

/** One way to send a GET, and how many connections it may open to one origin (undefined: no limit). */
interface Shape {
  name: string;
  connections: number | undefined;
  open(): Target;
}

/** A couple of hundred: enough to fill the queue behind the early requests, bounded. */
const QUEUED = 200;

/** Whether an arrival was one of the held requests. */
const isHeld = (id: string) => id.startsWith('hold');

function under<T>(deadline: ManagedDeadline | undefined, fn: () => T): T {
  return deadline === undefined ? fn() : context.with(setDeadline(context.active(), deadline), fn);
}

export function queuedRequestSuite(setup: 'alone' | RegistrationOrder): void {
  let otel: TestOtel;
  let instrumentation: DeadlineInstrumentation;
  let server: CountingServer;
  let undici: typeof import('undici');
  let http: typeof import('node:http');

  /** What each arrival carried, by the id in its path: the x-deadline-at-ms value, or 'none'. */
  const carried = new Map<string, string>();
  /** Replies held back: each request whose id starts with `hold` waits here until the test releases it. */
  const held: (() => void)[] = [];
  let onHeld: () => void = () => {};
  const releaseHeld = () => held.splice(0).forEach((release) => release());

  beforeAll(async () => {
    if (setup === 'alone') {
      otel = installOtel();
      instrumentation = new DeadlineInstrumentation();
      registerInstrumentations({ instrumentations: [instrumentation] });
      const load = createRequire(import.meta.url);
      undici = load('undici') as typeof import('undici');
      http = load('node:http') as typeof import('node:http');
    } else {
      ({ otel, instrumentation, undici, http } = installWithTransports(setup));
    }
    server = await startCountingServer((req, res) => {
      const id = new URL(req.url ?? '/', 'http://x').searchParams.get('id') ?? '?';
      const at = req.headers['x-deadline-at-ms'];
      carried.set(id, typeof at === 'string' ? at : 'none');
      if (id === 'stall') {
        // Its body stops after the first chunk, until the test lets go: only a cut ends the read.
        res.writeHead(200);
        res.write('first chunk');
        return void held.push(() => res.destroy());
      }
      if (!isHeld(id)) return void res.end('ok');
      // Holds its connection until the test has queued the others behind it.
      const redirect = req.url?.includes('redirect') === true;
      held.push(() => (redirect ? res.writeHead(302, { location: `/?id=redirected-${id}` }).end() : res.end('ok')));
      onHeld();
    });
  });
  afterAll(async () => {
    instrumentation.disable();
    await server.close();
    await otel.shutdown();
  });
  afterEach(() => {
    releaseHeld();
    carried.clear();
    server.arrivals.length = 0;
    otel.exporter.reset();
  });

  /**
   * Sends `count` requests under `deadline` that the server holds, and resolves
   * once they have all arrived: their connections are open, opened in their
   * context, and busy. On a loaded machine they may be cut at their cutoff
   * before they arrive: that ends the wait too.
   */
  async function hold(target: Target, deadline: ManagedDeadline | undefined, count: number): Promise<{ done: Promise<unknown> }> {
    let arrivals = 0;
    const arrived = new Promise<void>((resolve) => (onHeld = () => ++arrivals === count && resolve()));
    const calls = Array.from({ length: count }, (_, i) => under(deadline, () => target.get(`/?id=hold-${i}`)).catch((error: unknown) => error));
    const done = Promise.all(calls);
    await Promise.race([arrived, done]);
    return { done };
  }

  function dispatcherShape(name: string, connections: number | undefined, make: () => import('undici').Dispatcher, viaOrigin: boolean): Shape {
    return {
      name,
      connections,
      open() {
        const dispatcher = make();
        return {
          get: async (path) => {
            const options = viaOrigin ? { origin: server.url, path, method: 'GET' as const } : { path, method: 'GET' as const };
            const { body } = await dispatcher.request(options);
            return body.text();
          },
          close: () => dispatcher.close(),
        };
      },
    };
  }

  /** Global fetch with a limited global dispatcher: an Agent with one connection per origin makes a Client, with more a Pool. */
  function globalFetchShape(connections: number): Shape {
    return {
      name: `global fetch with setGlobalDispatcher(new Agent({ connections: ${connections} }))`,
      connections,
      open() {
        const previous = undici.getGlobalDispatcher();
        const agent = new undici.Agent({ connections });
        undici.setGlobalDispatcher(agent);
        return {
          get: async (path) => (await fetch(`${server.url}${path}`)).text(),
          close: async () => {
            undici.setGlobalDispatcher(previous);
            await agent.close();
          },
        };
      },
    };
  }

  const httpAgentShape: Shape = {
    name: 'node:http with Agent({ keepAlive: true, maxSockets: 1 })',
    connections: 1,
    open() {
      const agent: HttpAgent = new http.Agent({ keepAlive: true, maxSockets: 1 });
      return {
        get: async (path) => readBody(await response(http.request(`${server.url}${path}`, { agent }).end())),
        close: async () => agent.destroy(),
      };
    },
  };

  const shapes: Shape[] = [
    dispatcherShape('undici Client with pipelining 1', 1, () => new undici.Client(server.url, { pipelining: 1 }), false),
    dispatcherShape('undici Pool with connections 1', 1, () => new undici.Pool(server.url, { connections: 1 }), false),
    dispatcherShape('undici Agent with connections 1', 1, () => new undici.Agent({ connections: 1 }), true),
    dispatcherShape('undici Agent with connections 2', 2, () => new undici.Agent({ connections: 2 }), true),
    dispatcherShape('undici Agent without connections', undefined, () => new undici.Agent(), true),
    globalFetchShape(1),
    globalFetchShape(2),
    httpAgentShape,
  ];

  describe.each(shapes)('$name: a queued request carries its own deadline or none', (shape) => {
    it('no-deadline requests queued behind early requests under a short deadline carry no deadline', async () => {
      const target = shape.open();
      // 150 ms, as in the report: long passed when most of the queue goes out.
      const early = openDeadline({ operation: 'early', timeoutMs: 150, parent: null });
      const own = String(Math.floor(early.expiresAtMs));
      const first = await hold(target, early, shape.connections ?? 1);
      const queued = Array.from({ length: QUEUED }, (_, i) => target.get(`/?id=${i}`));
      releaseHeld();
      await first.done;
      await untilPassed(early);
      // More once the early deadline has passed, dispatched from the same connections' callbacks.
      const after = Array.from({ length: QUEUED }, (_, i) => target.get(`/?id=after-${i}`));
      await Promise.all([...queued, ...after]);
      early.dispose();
      await target.close();
      // An early request cut before it arrived on a loaded machine carried nothing; one that arrived, its own.
      const wrong = [...carried].filter(([id, at]) => (isHeld(id) ? at !== own : at !== 'none'));
      expect(wrong.map(([id, at]) => `${id}: ${at}`)).toEqual([]);
      expect(server.arrivals.filter((a) => !a.url.includes('hold'))).toHaveLength(2 * QUEUED);
    });

    it('mixed queued requests each carry their own deadline', async () => {
      const target = shape.open();
      const early = openDeadline({ operation: 'early', timeoutMs: 150, parent: null });
      const first = await hold(target, early, shape.connections ?? 1);
      const own = new Map<string, string>();
      const deadlines: ManagedDeadline[] = [early];
      const calls: Promise<unknown>[] = [first.done];
      for (let i = 0; i < QUEUED; i++) {
        // Every third without a deadline; the others each with a cutoff of their own, far enough not to refuse.
        const deadline = i % 3 === 0 ? undefined : openDeadline({ operation: `q${i}`, timeoutMs: 10_000 + i * 7, parent: null });
        if (deadline !== undefined) deadlines.push(deadline);
        own.set(String(i), deadline === undefined ? 'none' : String(Math.floor(deadline.expiresAtMs)));
        calls.push(under(deadline, () => target.get(`/?id=${i}`)));
      }
      releaseHeld();
      await Promise.all(calls);
      deadlines.forEach((d) => d.dispose());
      await target.close();
      const wrong = [...carried].filter(([id, at]) => !isHeld(id) && own.get(id) !== at);
      expect(wrong.map(([id, at]) => `${id}: ${at}, own ${own.get(id)}`)).toEqual([]);
      expect(server.arrivals.filter((a) => !a.url.includes('hold'))).toHaveLength(QUEUED);
    });
  });

  const fetchShapes = shapes.filter((shape) => shape.name.startsWith('global fetch'));
  describe.each(fetchShapes)('$name: a redirect does not lend its deadline to the queue', (shape) => {
    it('no-deadline requests drained while a fetch under a deadline follows a redirect carry no deadline', async () => {
      const target = shape.open();
      const deadline = openDeadline({ operation: 'redirected', timeoutMs: 10_000, parent: null });
      const own = String(Math.floor(deadline.expiresAtMs));
      // Each held reply is a redirect: its fetch is still under way (its call open) when the queue drains.
      let arrivals = 0;
      const count = shape.connections!;
      const arrived = new Promise<void>((resolve) => (onHeld = () => ++arrivals === count && resolve()));
      const redirected = Array.from({ length: count }, (_, i) => under(deadline, () => target.get(`/?id=hold-${i}&redirect`)));
      await arrived;
      const queued = Array.from({ length: QUEUED }, (_, i) => target.get(`/?id=${i}`));
      releaseHeld();
      await Promise.all([...redirected, ...queued]);
      deadline.dispose();
      await target.close();
      const ownsDeadline = (id: string) => isHeld(id) || id.startsWith('redirected');
      const wrong = [...carried].filter(([id, at]) => (ownsDeadline(id) ? at !== own : at !== 'none'));
      expect(wrong.map(([id, at]) => `${id}: ${at}`)).toEqual([]);
      expect([...carried.keys()].filter((id) => id.startsWith('redirected'))).toHaveLength(count);
    });
  });

  // A dispatcher without a connection limit queues nothing: each request gets a connection of its own.
  const limited = shapes.filter((shape) => shape.connections !== undefined);
  describe.each(limited)('$name: a queued request is cut at its own cutoff, and only it', (shape) => {
    it('refuses the queued request whose cutoff passes; the others go out with their own deadline or none', async () => {
      const target = shape.open();
      // Held, under a deadline of their own, until the short call below has been refused: everything else waits behind them.
      const opener = openDeadline({ operation: 'opener', timeoutMs: 20_000, parent: null });
      const blockers = await hold(target, opener, shape.connections!);
      const short = openDeadline({ operation: 'short', timeoutMs: 150, parent: null });
      const long = openDeadline({ operation: 'long', timeoutMs: 10_000, parent: null });
      const cut = under(short, () => target.get('/?id=short')).then(
        () => 'answered',
        (error: unknown) => error,
      );
      const none = target.get('/?id=none');
      const own = under(long, () => target.get('/?id=long'));
      // Only the cut ends this wait: the blockers hold every connection until then.
      const error = await cut;
      releaseHeld();
      await Promise.all([blockers.done, none, own]);
      [opener, short, long].forEach((d) => d.dispose());
      await target.close();
      expect(error).toBeInstanceOf(DeadlineExceededError);
      expect([...carried].filter(([id]) => !isHeld(id))).toEqual([
        ['none', 'none'],
        ['long', String(Math.floor(long.expiresAtMs))],
      ]);
    });

    it('cuts the body of a queued request at its own cutoff; the request queued behind it still goes out', async () => {
      const target = shape.open();
      const opener = openDeadline({ operation: 'opener', timeoutMs: 20_000, parent: null });
      const blockers = await hold(target, opener, shape.connections!);
      // Long enough to be written and answered before its cutoff: the cut then lands while its body is read.
      const stalled = openDeadline({ operation: 'stalled', timeoutMs: 1_000, parent: null });
      const read = under(stalled, () => target.get('/?id=stall')).then(
        () => 'read whole',
        (error: unknown) => error,
      );
      const none = target.get('/?id=none');
      releaseHeld();
      // Only the cut ends this read: the server holds the rest of the body until the test lets go.
      const error = await read;
      releaseHeld();
      await Promise.all([blockers.done, none]);
      [opener, stalled].forEach((d) => d.dispose());
      await target.close();
      expect(error).toBeInstanceOf(DeadlineExceededError);
      expect(carried.get('none')).toBe('none');
    });
  });
}
