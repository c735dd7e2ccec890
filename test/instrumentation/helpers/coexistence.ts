import { createRequire } from 'node:module';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { context, propagation, SpanKind, SpanStatusCode, trace, type Context, type TextMapSetter } from '@opentelemetry/api';
import { CompositePropagator, W3CBaggagePropagator, W3CTraceContextPropagator } from '@opentelemetry/core';
import { registerInstrumentations } from '@opentelemetry/instrumentation';
import { HttpInstrumentation } from '@opentelemetry/instrumentation-http';
import { UndiciInstrumentation } from '@opentelemetry/instrumentation-undici';
import type { ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  DeadlineExceededError,
  DeadlineInstrumentation,
  DeadlinePropagator,
  getDeadline,
  openDeadline,
  setDeadline,
  type ManagedDeadline,
} from '../../../src';
import { outgoingCallIn } from '../../../instrumentation/call/wire-context';
import { passedDeadline } from '../../helpers/clock';
import { installOtel, sleep, type TestOtel } from '../../helpers/otel';
import { readBody, requestError, response, startCountingServer, type CountingServer } from './servers';

export type RegistrationOrder = 'deadline-first' | 'otel-first';

const HTTP_SCOPE = '@opentelemetry/instrumentation-http';
const UNDICI_SCOPE = '@opentelemetry/instrumentation-undici';

/**
 * The same suite under both registration orders (one test file each, so each
 * runs in a fresh process): wrapping order decides who is outer on
 * `http.request`, and subscription order who runs first in the undici channel.
 */
export function coexistenceSuite(order: RegistrationOrder): void {
  let otel: TestOtel;
  let deadline: DeadlineInstrumentation;
  let server: CountingServer;
  let http: typeof import('node:http');
  let undici: typeof import('undici');
  const held: (() => void)[] = [];
  const handled: { operation?: string; baggage?: string }[] = [];

  beforeAll(async () => {
    otel = installOtel();
    const load = createRequire(import.meta.url);
    // Instrumentations enable themselves when constructed (instrumentation-undici
    // records nothing if constructed with enabled: false), so construction order
    // is registration order; ours waits, disabled, when it goes second.
    deadline = new DeadlineInstrumentation({ enabled: order === 'deadline-first' });
    registerInstrumentations({
      instrumentations: [
        new HttpInstrumentation({ requestHook: deadline.httpRequestHook }),
        new UndiciInstrumentation({ requestHook: deadline.undiciRequestHook }),
      ],
    });
    // instrumentation-http patches node:http when it is next required.
    http = load('node:http');
    if (order === 'otel-first') registerInstrumentations({ instrumentations: [deadline] });
    undici = load('undici');
    server = await startCountingServer((req: IncomingMessage, res: ServerResponse) => {
      const active = getDeadline();
      handled.push({ operation: active?.operation, baggage: propagation.getBaggage(context.active())?.getEntry('deadline.at_ms')?.value });
      // A span the handler starts: it must name the deadline as the server span does.
      trace.getTracer('handler').startSpan('handler.work').end();
      if (req.url === '/hang') return void held.push(() => res.destroy());
      req.resume();
      req.once('end', () => res.end('ok'));
    });
  });
  afterAll(async () => {
    await server.close();
    await otel.shutdown();
  });
  afterEach(() => {
    held.splice(0).forEach((release) => release());
    server.arrivals.length = 0;
    handled.length = 0;
    otel.exporter.reset();
    deadline.setConfig({});
  });

  function under<T>(d: ManagedDeadline, fn: () => T): T {
    return context.with(setDeadline(context.active(), d), fn);
  }

  const clientSpans = (scope: string): ReadableSpan[] =>
    otel.spans().filter((s) => s.kind === SpanKind.CLIENT && s.instrumentationScope.name === scope);

  describe(`next to instrumentation-http and -undici (${order})`, () => {
    it('is wrapped in the order under test', () => {
      // shimmer marks instrumentation-http's wrapper; ours carries no such mark.
      const outer = (http.request as unknown as { __wrapped?: boolean }).__wrapped === true ? 'otel' : 'deadline';
      expect(outer).toBe(order === 'deadline-first' ? 'otel' : 'deadline');
    });

    it('sends every deadline header and traceparent exactly once from fetch, undici and http', async () => {
      const d = openDeadline({ operation: 'root', timeoutMs: 5_000, parent: null });
      await under(d, async () => {
        await (await fetch(`${server.url}/fetch`)).text();
        await (await undici.request(`${server.url}/undici`, { method: 'POST', body: 'x' })).body.text();
        const post = http.request(`${server.url}/http`, { method: 'POST' });
        post.end('x');
        await readBody(await response(post));
      });
      d.dispose();
      expect(server.arrivals.map((a) => a.url)).toEqual(['/fetch', '/undici', '/http']);
      server.arrivals.forEach((_a, index) => {
        for (const name of ['x-deadline-remaining-ms', 'x-deadline-at-ms', 'baggage', 'traceparent']) {
          expect([index, name, server.headerCount(index, name)]).toEqual([index, name, 1]);
        }
      });
      // Both transport instrumentations still do their job.
      expect(clientSpans(UNDICI_SCOPE)).toHaveLength(2);
      expect(clientSpans(HTTP_SCOPE)).toHaveLength(1);
      expect(otel.spans().filter((s) => s.kind === SpanKind.SERVER)).toHaveLength(3);
    });

    it('leaves the global DeadlinePropagator nothing to write for a request the guard sends with its headers in', async () => {
      // Counts what the global DeadlinePropagator writes: instrumentation-undici injects through it.
      const writes: string[] = [];
      class CountingDeadlinePropagator extends DeadlinePropagator {
        override inject(ctx: Context, carrier: unknown, setter: TextMapSetter): void {
          super.inject(ctx, carrier, { set: (c, key, value) => (writes.push(key), setter.set(c, key, value)) });
        }
      }
      const setGlobal = (deadlinePropagator: DeadlinePropagator) => {
        propagation.disable();
        propagation.setGlobalPropagator(
          new CompositePropagator({ propagators: [new W3CTraceContextPropagator(), new W3CBaggagePropagator(), deadlinePropagator] }),
        );
      };
      setGlobal(new CountingDeadlinePropagator());
      const pool = new undici.Pool(server.url, { connections: 1 });
      try {
        const d = openDeadline({ operation: 'root', timeoutMs: 5_000, parent: null });
        await under(d, async () => {
          await (await undici.request(`${server.url}/top-level`)).body.text();
          await (await pool.request({ path: '/pool', method: 'GET' })).body.text();
          expect(writes).toEqual([]);
          // With the pool's one connection busy, the second request waits and is created later, from the
          // connection the first one opened: the propagator writes nothing there either.
          const both = await Promise.all([pool.request({ path: '/first', method: 'GET' }), pool.request({ path: '/queued', method: 'GET' })]);
          await Promise.all(both.map((reply) => reply.body.text()));
        });
        d.dispose();
        expect(writes).toEqual([]);
        expect(server.arrivals.map((a) => a.url)).toEqual(['/top-level', '/pool', '/first', '/queued']);
        server.arrivals.forEach((_a, index) => {
          for (const name of ['x-deadline-remaining-ms', 'x-deadline-at-ms', 'baggage', 'traceparent']) {
            expect([index, name, server.headerCount(index, name)]).toEqual([index, name, 1]);
          }
        });
      } finally {
        await pool.close();
        setGlobal(new DeadlinePropagator());
      }
    });

    it('lets no propagator inside a guarded undici call write the deadline or baggage; a call made inside it is its own', async () => {
      // What each global propagator writes inside undici's dispatch (instrumentation-undici injects through them).
      const writes: string[] = [];
      const counting = <T extends { inject(ctx: Context, carrier: unknown, setter: TextMapSetter): void }>(propagator: T): T => {
        const inject = propagator.inject.bind(propagator);
        propagator.inject = (ctx, carrier, setter) => inject(ctx, carrier, { set: (c, key, value) => (writes.push(key), setter.set(c, key, value)) });
        return propagator;
      };
      const setGlobal = (baggagePropagator: W3CBaggagePropagator, deadlinePropagator: DeadlinePropagator) => {
        propagation.disable();
        propagation.setGlobalPropagator(new CompositePropagator({ propagators: [new W3CTraceContextPropagator(), baggagePropagator, deadlinePropagator] }));
      };
      setGlobal(counting(new W3CBaggagePropagator()), counting(new DeadlinePropagator()));
      // A subscriber that makes a request of its own, synchronously, from inside the dispatch of /outer.
      const diagnostics = createRequire(import.meta.url)('node:diagnostics_channel') as typeof import('node:diagnostics_channel');
      let inner: Promise<unknown> | undefined;
      // What a hook inside /outer's dispatch sees.
      let callDuringDispatch: unknown;
      const onCreate = (message: unknown) => {
        const { request } = message as { request: { path: string } };
        if (request.path !== '/outer' || inner !== undefined) return;
        callDuringDispatch = outgoingCallIn(context.active());
        inner = undici.request(`${server.url}/inner`).then((reply) => reply.body.text());
      };
      diagnostics.subscribe('undici:request:create', onCreate);
      try {
        const d = openDeadline({ operation: 'root', timeoutMs: 5_000, parent: null });
        const outer = await under(d, async () => (await undici.request(`${server.url}/outer`)).body.text());
        await inner;
        d.dispose();
        // Only traceparent: neither the W3C baggage propagator nor ours wrote anything for either request.
        expect(writes.filter((key) => key !== 'traceparent')).toEqual([]);
        expect(outer).toBe('ok');
        expect(server.arrivals.map((a) => a.url).sort()).toEqual(['/inner', '/outer']);
        server.arrivals.forEach((arrival) => {
          for (const name of ['x-deadline-remaining-ms', 'x-deadline-at-ms', 'baggage', 'traceparent']) {
            expect([arrival.url, name, server.headerCount(server.arrivals.indexOf(arrival), name)]).toEqual([arrival.url, name, 1]);
          }
        });
        // Each request is a guarded call of its own, with the outcome on its own client span.
        const outcomes = clientSpans(UNDICI_SCOPE).map((span) => [span.attributes['url.full'], span.attributes['deadline.outcome']]);
        expect(outcomes.sort()).toEqual([
          [`${server.url}/inner`, 'completed'],
          [`${server.url}/outer`, 'completed'],
        ]);
        // Inside the dispatch the hooks found the call; the caller's context never held it.
        expect(callDuringDispatch).toMatchObject({ transport: 'undici', settled: true });
        expect(outgoingCallIn(context.active())).toBeUndefined();
      } finally {
        diagnostics.unsubscribe('undici:request:create', onCreate);
        setGlobal(new W3CBaggagePropagator(), new DeadlinePropagator());
      }
    });

    it('sends no deadline, in headers or baggage, on calls ignoreOutgoingRequest excludes', async () => {
      deadline.setConfig({ ignoreOutgoingRequest: () => true });
      const d = openDeadline({ operation: 'root', timeoutMs: 5_000, parent: null });
      await under(d, async () => {
        await (await fetch(`${server.url}/fetch`)).text();
        await (await undici.request(`${server.url}/undici`)).body.text();
        await readBody(await response(http.request(`${server.url}/http`).end()));
      });
      deadline.setConfig({});
      d.dispose();
      expect(server.arrivals.map((a) => a.url)).toEqual(['/fetch', '/undici', '/http']);
      server.arrivals.forEach((arrival, index) => {
        for (const name of ['x-deadline-remaining-ms', 'x-deadline-at-ms']) expect([index, name, server.headerCount(index, name)]).toEqual([index, name, 0]);
        expect([index, arrival.headers.filter(([key, value]) => key === 'baggage' && value.includes('deadline.at_ms'))]).toEqual([index, []]);
        // The transport instrumentations still propagate the trace.
        expect([index, server.headerCount(index, 'traceparent')]).toEqual([index, 1]);
      });
    });

    it('runs handlers under our server deadline, not the one a global propagator extracted', async () => {
      const d = openDeadline({ operation: 'root', timeoutMs: 5_000, parent: null });
      await under(d, async () => (await fetch(`${server.url}/ctx`)).text());
      d.dispose();
      expect(handled[0].operation).toBe('http.server');
      // The server span started under the node the global propagator built ('remote'), which the server
      // then takes over as 'http.server': the span says so too, like the spans under it.
      const serverSpan = otel.spans().find((s) => s.kind === SpanKind.SERVER)!;
      const handlerSpan = otel.spans().find((s) => s.name === 'handler.work')!;
      expect([serverSpan.attributes['deadline.operation'], handlerSpan.attributes['deadline.operation']]).toEqual(['http.server', 'http.server']);
      // The server rebuilds the cutoff as the earlier of at-ms and its own now + remaining-ms: never later than
      // the caller's, and earlier only by the whole-ms truncation of both headers (up to 2 ms) plus the wall
      // clock's NTP slew against the monotonic one over these few ms; 10 ms covers both.
      const baggageAtMs = Number(handled[0].baggage);
      expect(baggageAtMs).toBeLessThanOrEqual(Math.floor(d.expiresAtMs));
      expect(baggageAtMs).toBeGreaterThanOrEqual(Math.floor(d.expiresAtMs) - 10);
    });

    it('strips the deadline of an untrusted caller from the handler context and its baggage', async () => {
      deadline.setConfig({ trustIncoming: () => false });
      const d = openDeadline({ operation: 'root', timeoutMs: 5_000, parent: null });
      await under(d, async () => (await fetch(`${server.url}/untrusted`)).text());
      d.dispose();
      expect(handled[0]).toEqual({ operation: undefined, baggage: undefined });
    });

    it('puts the outcome on the transport client spans: expired, unknown, not_started, completed', async () => {
      const d = openDeadline({ operation: 'root', timeoutMs: 300, parent: null });
      const results = await under(d, () =>
        Promise.all([
          fetch(`${server.url}/hang`).catch((e: unknown) => e),
          undici.request(`${server.url}/hang`, { method: 'POST', body: 'payload' }).catch((e: unknown) => e),
          (() => {
            const post = http.request(`${server.url}/hang`, { method: 'POST' });
            post.end('payload');
            return requestError(post);
          })(),
          requestError(http.get(`${server.url}/hang`)),
        ]),
      );
      for (const result of results) expect(result).toBeInstanceOf(DeadlineExceededError);
      await sleep(20);
      const refused = await under(d, () => fetch(`${server.url}/late`).catch((e: unknown) => e));
      const refusedHttp = await requestError(under(d, () => http.get(`${server.url}/late`)));
      expect(refused).toBeInstanceOf(DeadlineExceededError);
      expect(refusedHttp).toBeInstanceOf(DeadlineExceededError);
      d.dispose();

      const outcomes = (scope: string, method: string) =>
        clientSpans(scope)
          .filter((s) => s.attributes['http.request.method'] === method)
          .map((s) => s.attributes['deadline.outcome']);
      expect(outcomes(UNDICI_SCOPE, 'GET')).toEqual(['expired']);
      expect(outcomes(UNDICI_SCOPE, 'POST')).toEqual(['unknown']);
      expect(outcomes(HTTP_SCOPE, 'POST')).toEqual(['unknown']);
      // The refused http.get has a span of its own, whoever is outer.
      const notStarted = otel.spans().filter((s) => s.attributes['deadline.outcome'] === 'not_started');
      expect(notStarted).toHaveLength(2);
      expect(outcomes(HTTP_SCOPE, 'GET').filter((o) => o !== 'not_started')).toEqual(['expired']);
      expect(server.arrivals.map((a) => a.url).filter((u) => u === '/late')).toHaveLength(0);

      const ok = openDeadline({ operation: 'root', timeoutMs: 5_000, parent: null });
      await under(ok, async () => (await fetch(`${server.url}/fine`)).text());
      ok.dispose();
      expect(clientSpans(UNDICI_SCOPE).at(-1)?.attributes['deadline.outcome']).toBe('completed');
    });

    it('records an early reject on the server span', async () => {
      deadline.setConfig({ minUsefulMs: 1_000 });
      // A raw caller with no deadline of its own, so only the server decides.
      const res = await response(http.get(`${server.url}/rejected`, { headers: { 'x-deadline-remaining-ms': '200' } }));
      await readBody(res);
      await sleep(10);
      expect(res.statusCode).toBe(504);
      const span = otel.spans().find((s) => s.kind === SpanKind.SERVER)!;
      expect(span.attributes['deadline.outcome']).toBe('not_started');
      expect(span.attributes['deadline.abort.code']).toBe('INSUFFICIENT_BUDGET');
      expect(span.status.code).toBe(SpanStatusCode.ERROR);
      expect(handled).toHaveLength(0);
    });

    it('records a client disconnect on the server span as cancelled', async () => {
      const req = http.get(`${server.url}/hang`, { headers: { 'x-deadline-remaining-ms': '10000' } });
      req.on('error', () => {});
      while (handled.length === 0) await sleep(5);
      req.destroy();
      while (!otel.spans().some((s) => s.kind === SpanKind.SERVER)) await sleep(5);
      const span = otel.spans().find((s) => s.kind === SpanKind.SERVER)!;
      expect(span.attributes['deadline.outcome']).toBe('cancelled');
      expect(span.attributes['deadline.abort.code']).toBe('CANCELLED');
    });

    it('records what observe mode would have done, without doing it', async () => {
      deadline.setConfig({ mode: 'observe', minUsefulMs: 1_000 });
      const res = await response(http.get(`${server.url}/observed`, { headers: { 'x-deadline-remaining-ms': '200' } }));
      await readBody(res);
      const d = await passedDeadline('root');
      const late = await under(d, async () => (await fetch(`${server.url}/observed-late`)).text());
      d.dispose();
      await sleep(10);
      expect(res.statusCode).toBe(200);
      expect(late).toBe('ok');
      const server1 = otel.spans().find((s) => s.kind === SpanKind.SERVER && s.attributes['deadline.would_reject'] === true);
      expect(server1).toBeDefined();
      const client = clientSpans(UNDICI_SCOPE).at(-1)!;
      expect(client.attributes['deadline.would_reject']).toBe(true);
      expect(client.attributes['deadline.would_abort']).toBe(true);
    });
  });
}
