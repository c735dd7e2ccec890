/** Values at the edges: the longest deadline, integers on the wire, and a default budget no caller can bypass. */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { context, defaultTextMapGetter, defaultTextMapSetter, ROOT_CONTEXT } from '@opentelemetry/api';
import { registerInstrumentations } from '@opentelemetry/instrumentation';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DeadlineInstrumentation, DeadlinePropagator, getDeadline, openDeadline, setDeadline } from '../src';
import { MAX_DEADLINE_MS } from '../src/time';
import { effectiveMaxIncomingMs } from '../instrumentation/config';
import { installOtel, type TestOtel } from './helpers/otel';

describe('the longest deadline', () => {
  it.each([1e308, MAX_DEADLINE_MS + 1, Number.MAX_SAFE_INTEGER])('refuses timeoutMs %d with a RangeError naming the maximum', (timeoutMs) => {
    expect(() => openDeadline({ operation: 'op', timeoutMs, parent: null })).toThrow(/at most 8640000000 ms \(100 days\)/);
  });

  it('refuses an expiresAtMs more than the maximum away', () => {
    expect(() => openDeadline({ operation: 'op', expiresAtMs: 1e308, parent: null })).toThrow(RangeError);
    expect(() => openDeadline({ operation: 'op', expiresAtMs: Date.now() + MAX_DEADLINE_MS + 60_000, parent: null })).toThrow(RangeError);
  });

  it('accepts the maximum itself and puts only integers on the wire', () => {
    const deadline = openDeadline({ operation: 'op', timeoutMs: MAX_DEADLINE_MS, parent: null });
    const carrier: Record<string, string> = {};
    new DeadlinePropagator().inject(setDeadline(ROOT_CONTEXT, deadline), carrier, defaultTextMapSetter);
    expect(carrier['x-deadline-remaining-ms']).toMatch(/^\d{1,10}$/);
    expect(carrier['x-deadline-at-ms']).toMatch(/^\d{13}$/);
    expect(carrier.baggage).toMatch(/^deadline\.at_ms=\d{13}$/);
    // The next hop reads it back: the deadline does not disappear on the way.
    const next = getDeadline(new DeadlinePropagator().extract(ROOT_CONTEXT, carrier, defaultTextMapGetter));
    expect(next?.remainingMs()).toBeGreaterThan(MAX_DEADLINE_MS - 60_000);
    deadline.dispose();
  });

  it('clamps what a caller asks for on the wire to the maximum', () => {
    const carrier = { 'x-deadline-remaining-ms': '999999999999999' };
    const extracted = getDeadline(new DeadlinePropagator().extract(ROOT_CONTEXT, carrier, defaultTextMapGetter));
    expect(extracted?.remainingMs()).toBeLessThanOrEqual(MAX_DEADLINE_MS);
  });
});

describe('a default budget no caller can bypass', () => {
  it('caps what a caller asks for at defaultTimeoutMs when maxIncomingMs is not set', () => {
    expect(effectiveMaxIncomingMs(undefined, 1_000)).toBe(1_000);
    expect(effectiveMaxIncomingMs(5_000, 1_000)).toBe(5_000);
    expect(effectiveMaxIncomingMs(undefined, undefined)).toBeUndefined();
    const propagator = new DeadlinePropagator({ maxIncomingMs: effectiveMaxIncomingMs(undefined, 1_000) });
    const extracted = getDeadline(propagator.extract(ROOT_CONTEXT, { 'grpc-timeout': '99999999H' }, defaultTextMapGetter));
    expect(extracted?.remainingMs()).toBeLessThanOrEqual(1_000);
  });

  describe('on a real server with defaultTimeoutMs', () => {
    let otel: TestOtel;
    let instrumentation: DeadlineInstrumentation;
    let server: http.Server;
    const remaining: (number | undefined)[] = [];

    beforeAll(async () => {
      otel = installOtel();
      instrumentation = new DeadlineInstrumentation({ defaultTimeoutMs: 1_000 });
      registerInstrumentations({ instrumentations: [instrumentation] });
      server = http.createServer((_req, res) => {
        remaining.push(getDeadline()?.remainingMs());
        res.end('ok');
      });
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    });
    afterAll(async () => {
      instrumentation.disable();
      await new Promise((resolve) => server.close(resolve));
      await otel.shutdown();
    });

    it.each(['99999999H', '99999999M'])('a caller sending grpc-timeout: %s gets at most the default budget', async (value) => {
      remaining.length = 0;
      const { port } = server.address() as AddressInfo;
      // Sent outside any deadline, so only the hand-written header says how long the caller wants.
      await context.with(ROOT_CONTEXT, () =>
        new Promise<void>((resolve, reject) => {
          http.get({ host: '127.0.0.1', port, headers: { 'grpc-timeout': value } }, (res) => res.resume().once('end', resolve)).once('error', reject);
        }),
      );
      expect(remaining).toHaveLength(1);
      expect(remaining[0]).toBeGreaterThan(0);
      expect(remaining[0]).toBeLessThanOrEqual(1_000);
    });
  });
});
