import type { IncomingMessage, ServerResponse } from 'node:http';
import { context, propagation } from '@opentelemetry/api';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { DeadlineExceededError, type DeadlineInstrumentation, openDeadline, setDeadline, type OutgoingRequestInfo } from '../../../src';
import { startCountingServer, type Arrival, type CountingServer } from './servers';
import type { RegistrationOrder } from './coexistence';
import { installWithTransports } from './with-transports';
import type { TestOtel } from '../../helpers/otel';

/**
 * Deadline headers go only where the user wants them (issue 12 §6), with
 * instrumentation-http and -undici injecting through the global propagator
 * as the register entry runs them, in either registration order. Two servers
 * on two ports of 127.0.0.1, and a port-aware list that names only the
 * first: the second stands for a third-party host.
 */
export function propagateToSuite(order: RegistrationOrder): void {
let otel: TestOtel;
let instrumentation: DeadlineInstrumentation;
/** On the list. */
let inside: CountingServer;
/** Off the list: a third party. */
let outside: CountingServer;
let http: typeof import('node:http');
let undici: typeof import('undici');
const held: (() => void)[] = [];

function handler(req: IncomingMessage, res: ServerResponse): void {
  if (req.url === '/hang') return void held.push(() => res.destroy());
  if (req.url?.startsWith('/redirect?to=')) {
    res.writeHead(302, { location: decodeURIComponent(req.url.slice('/redirect?to='.length)) });
    return void res.end();
  }
  req.resume();
  req.once('end', () => res.end('ok'));
}

beforeAll(async () => {
  ({ otel, instrumentation, http, undici } = installWithTransports(order));
  inside = await startCountingServer(handler);
  outside = await startCountingServer(handler);
});
afterAll(async () => {
  instrumentation.disable();
  await inside.close();
  await outside.close();
  await otel.shutdown();
});
afterEach(() => {
  held.splice(0).forEach((release) => release());
  inside.arrivals.length = 0;
  outside.arrivals.length = 0;
  otel.exporter.reset();
  instrumentation.setConfig({});
});

function onlyInside(): void {
  instrumentation.setConfig({ propagateTo: [`127.0.0.1:${inside.port}`] });
}

/** Runs fn under a 10 s deadline with a user baggage entry, as an application would. */
async function underDeadline<T>(fn: () => Promise<T>, timeoutMs = 10_000): Promise<T> {
  const deadline = openDeadline({ operation: 'root', timeoutMs, parent: null });
  const bag = propagation.createBaggage({ 'user.tier': { value: 'gold' } });
  try {
    return await context.with(setDeadline(propagation.setBaggage(context.active(), bag), deadline), fn);
  } finally {
    deadline.dispose();
  }
}

/** The deadline as the server received it: header counts, and the baggage entries it was sent. */
function deadlineSeen(arrival: Arrival): { remaining: number; atMs: number; baggage: string[] } {
  const count = (name: string) => arrival.headers.filter(([key]) => key === name).length;
  const baggage = arrival.headers
    .filter(([key]) => key === 'baggage')
    .flatMap(([, value]) => value.split(','))
    .map((entry) => entry.split('=')[0].trim());
  return { remaining: count('x-deadline-remaining-ms'), atMs: count('x-deadline-at-ms'), baggage: baggage.sort() };
}

const SENT = { remaining: 1, atMs: 1, baggage: ['deadline.at_ms', 'user.tier'] };
const WITHHELD = { remaining: 0, atMs: 0, baggage: ['user.tier'] };

type Call = (base: string) => Promise<unknown>;

const calls: [string, () => Call][] = [
  ['fetch', () => async (base) => (await fetch(`${base}/x`, { method: 'POST', body: 'b' })).text()],
  ['undici.request', () => async (base) => (await undici.request(`${base}/x`)).body.text()],
  [
    'undici Pool#request (no url for the hook)',
    () => async (base) => {
      const pool = new undici.Pool(base);
      try {
        return await (await pool.request({ path: '/x', method: 'GET' })).body.text();
      } finally {
        await pool.close();
      }
    },
  ],
  [
    'undici Client#request',
    () => async (base) => {
      const client = new undici.Client(base);
      try {
        return await (await client.request({ path: '/x', method: 'GET' })).body.text();
      } finally {
        await client.close();
      }
    },
  ],
  [
    'undici Agent#request (origin in the options)',
    () => async (base) => {
      const agent = new undici.Agent();
      try {
        return await (await agent.request({ origin: base, path: '/x', method: 'GET' })).body.text();
      } finally {
        await agent.close();
      }
    },
  ],
  [
    'http.request',
    () => (base) =>
      new Promise((resolve, reject) => {
        const req = http.request(`${base}/x`, { method: 'POST' }, (res) => {
          res.resume();
          res.once('end', resolve);
        });
        req.once('error', reject);
        req.end('b');
      }),
  ],
  [
    'http.get with options',
    () => (base) =>
      new Promise((resolve, reject) => {
        const { hostname, port } = new URL(base);
        const req = http.get({ hostname, port, path: '/x' }, (res) => {
          res.resume();
          res.once('end', resolve);
        });
        req.once('error', reject);
      }),
  ],
];

describe.each(calls)('propagateTo with %s', (_name, make) => {
  it('sends the deadline to a listed host and withholds it (user baggage kept) from any other', async () => {
    onlyInside();
    await underDeadline(() => make()(inside.url));
    await underDeadline(() => make()(outside.url));
    expect(inside.arrivals.map(deadlineSeen)).toEqual([SENT]);
    expect(outside.arrivals.map(deadlineSeen)).toEqual([WITHHELD]);
  });

  it('sends it everywhere without a list', async () => {
    await underDeadline(() => make()(outside.url));
    expect(outside.arrivals.map(deadlineSeen)).toEqual([SENT]);
  });
});

describe('propagateTo and calls made from inside another call', () => {
  /** http.get of `first`, then, from its response callback (which runs in the context the transport ran it in), of `second`. */
  const nested = (first: string, second: string) =>
    new Promise((resolve, reject) => {
      http
        .get(first, (res) => {
          res.resume();
          res.once('end', () => {
            http
              .get(second, (inner) => {
                inner.resume();
                inner.once('end', resolve);
              })
              .once('error', reject);
          });
        })
        .once('error', reject);
    });

  it('http: a call to a listed host from the response callback of a call to another host carries the deadline', async () => {
    onlyInside();
    await underDeadline(() => nested(`${outside.url}/outer`, `${inside.url}/inner`));
    expect(outside.arrivals.map(deadlineSeen)).toEqual([WITHHELD]);
    expect(inside.arrivals.map(deadlineSeen)).toEqual([SENT]);
  });

  it('http: a call to another host from the response callback of a call to a listed host does not', async () => {
    onlyInside();
    await underDeadline(() => nested(`${inside.url}/outer`, `${outside.url}/inner`));
    expect(inside.arrivals.map(deadlineSeen)).toEqual([SENT]);
    expect(outside.arrivals.map(deadlineSeen)).toEqual([WITHHELD]);
  });
});

describe('propagateTo and redirects', () => {
  it('fetch: a 302 from a listed host to another host does not carry the deadline on', async () => {
    onlyInside();
    const target = encodeURIComponent(`${outside.url}/x`);
    const res = await underDeadline(() => fetch(`${inside.url}/redirect?to=${target}`));
    expect(await res.text()).toBe('ok');
    expect(inside.arrivals.map(deadlineSeen)).toEqual([SENT]);
    expect(outside.arrivals.map(deadlineSeen)).toEqual([WITHHELD]);
  });

  it('undici with the redirect interceptor: the same, hop by hop', async () => {
    onlyInside();
    const target = encodeURIComponent(`${outside.url}/x`);
    const dispatcher = new undici.Agent().compose(undici.interceptors.redirect({ maxRedirections: 1 }));
    try {
      const res = await underDeadline(() => undici.request(`${inside.url}/redirect?to=${target}`, { dispatcher }));
      expect(await res.body.text()).toBe('ok');
    } finally {
      await dispatcher.close();
    }
    expect(inside.arrivals.map(deadlineSeen)).toEqual([SENT]);
    expect(outside.arrivals.map(deadlineSeen)).toEqual([WITHHELD]);
  });
});

describe('propagateTo limits the headers, not the guard', () => {
  it('still aborts a call to an unlisted host at the cutoff', async () => {
    onlyInside();
    // 300 ms budget against a server that never answers: only the cutoff can end the call.
    const error = await underDeadline(() => fetch(`${outside.url}/hang`), 300).catch((err: unknown) => err);
    expect(error).toBeInstanceOf(DeadlineExceededError);
    expect(outside.arrivals.map(deadlineSeen)).toEqual([WITHHELD]);
  });

  it('a function decides per URL; one that throws says no', async () => {
    instrumentation.setConfig({ propagateTo: (url) => url.port === String(inside.port) });
    await underDeadline(() => fetch(`${inside.url}/x`).then((r) => r.text()));
    instrumentation.setConfig({
      propagateTo: () => {
        throw new Error('hook bug');
      },
    });
    await underDeadline(() => fetch(`${inside.url}/x`).then((r) => r.text()));
    expect(inside.arrivals.map(deadlineSeen)).toEqual([SENT, WITHHELD]);
  });
});

describe('ignoreOutgoingRequest', () => {
  it('gets the URL of a Pool#request, built from the pool origin and the path', async () => {
    const seen: OutgoingRequestInfo[] = [];
    instrumentation.setConfig({
      ignoreOutgoingRequest: (info) => {
        seen.push(info);
        return true;
      },
    });
    const pool = new undici.Pool(outside.url);
    try {
      await underDeadline(async () => (await pool.request({ path: '/x?y=1', method: 'GET' })).body.text());
    } finally {
      await pool.close();
    }
    expect(seen).toEqual([{ transport: 'undici', method: 'GET', url: `${outside.url}/x?y=1` }]);
    expect(outside.arrivals.map(deadlineSeen)).toEqual([WITHHELD]);
  });
});
}
