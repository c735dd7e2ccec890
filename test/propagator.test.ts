import { createServer, request, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  context,
  defaultTextMapGetter,
  defaultTextMapSetter,
  propagation,
  ROOT_CONTEXT,
  type Baggage,
  type Context,
  type TextMapGetter,
} from '@opentelemetry/api';
import { CompositePropagator, suppressTracing, W3CBaggagePropagator } from '@opentelemetry/core';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { DeadlinePropagator, getDeadline, openDeadline, setDeadline, type Deadline } from '../src';
import { DEADLINE_OFF_WIRE_KEY } from '../src/context';
import { passedDeadline } from './helpers/clock';
import { captureDiag } from './helpers/diag';
import { installOtel, type TestOtel } from './helpers/otel';

const propagator = new DeadlinePropagator();

function extract(headers: Record<string, string | string[]>, ctx: Context = ROOT_CONTEXT, p = propagator): Deadline | undefined {
  return getDeadline(p.extract(ctx, headers, defaultTextMapGetter));
}

function injected(ctx: Context, p: { inject: DeadlinePropagator['inject'] } = propagator): Record<string, string> {
  const carrier: Record<string, string> = {};
  p.inject(ctx, carrier, defaultTextMapSetter);
  return carrier;
}

let otel: TestOtel;
beforeAll(() => {
  // Needed for propagation.createBaggage and the async context in the round trip.
  otel = installOtel();
});
afterAll(() => otel.shutdown());

describe('inject', () => {
  it('writes nothing without an active deadline', () => {
    expect(injected(ROOT_CONTEXT)).toEqual({});
  });

  it('writes remaining ms (integer, floored), the absolute cutoff and the baggage entry', () => {
    const d = openDeadline({ operation: 'op', timeoutMs: 1_500.9, parent: null });
    const headers = injected(setDeadline(ROOT_CONTEXT, d));
    expect(headers['x-deadline-remaining-ms']).toMatch(/^\d+$/);
    expect(Number(headers['x-deadline-remaining-ms'])).toBeLessThanOrEqual(1_500);
    expect(Number(headers['x-deadline-remaining-ms'])).toBeGreaterThan(1_000);
    expect(headers['x-deadline-at-ms']).toBe(String(Math.floor(d.expiresAtMs)));
    expect(headers.baggage).toBe(`deadline.at_ms=${Math.floor(d.expiresAtMs)}`);
    d.dispose();
  });

  it('writes each deadline its own cutoff when calls under two deadlines interleave (the last cutoff\'s text is reused)', () => {
    const a = openDeadline({ operation: 'a', timeoutMs: 5_000, parent: null });
    const b = openDeadline({ operation: 'b', timeoutMs: 9_000, parent: null });
    const [ctxA, ctxB] = [setDeadline(ROOT_CONTEXT, a), setDeadline(ROOT_CONTEXT, b)];
    for (const [ctx, d] of [[ctxA, a], [ctxA, a], [ctxB, b], [ctxA, a], [ctxB, b]] as const) {
      const headers = injected(ctx);
      expect(headers['x-deadline-at-ms']).toBe(String(Math.floor(d.expiresAtMs)));
      expect(headers.baggage).toBe(`deadline.at_ms=${Math.floor(d.expiresAtMs)}`);
    }
    a.dispose();
    b.dispose();
  });

  it('writes 0, never a negative value, once the deadline has passed', async () => {
    const d = await passedDeadline('op');
    expect(injected(setDeadline(ROOT_CONTEXT, d))['x-deadline-remaining-ms']).toBe('0');
    d.dispose();
  });

  it('writes nothing when tracing is suppressed (exporter traffic)', () => {
    const d = openDeadline({ operation: 'op', timeoutMs: 1_000, parent: null });
    expect(injected(suppressTracing(setDeadline(ROOT_CONTEXT, d)))).toEqual({});
    d.dispose();
  });

  it('writes the headers whatever instrumentation markers the context holds', () => {
    // A transport can run user callbacks in the context of the call that made
    // it; a call made from there through a plain carrier still needs the deadline.
    const d = openDeadline({ operation: 'op', timeoutMs: 1_000, parent: null });
    const marked = setDeadline(ROOT_CONTEXT, d).setValue(Symbol.for('otel-deadline.outgoing-call'), {});
    expect(injected(marked)['x-deadline-at-ms']).toBe(String(Math.floor(d.expiresAtMs)));
    d.dispose();
  });

  it('writes nothing from a context marked off the wire, and everything once the mark is gone', () => {
    const d = openDeadline({ operation: 'op', timeoutMs: 1_000, parent: null });
    const marked = setDeadline(ROOT_CONTEXT, d).setValue(DEADLINE_OFF_WIRE_KEY, true);
    expect(injected(marked)).toEqual({});
    expect(injected(marked.deleteValue(DEADLINE_OFF_WIRE_KEY))['x-deadline-at-ms']).toBe(String(Math.floor(d.expiresAtMs)));
    d.dispose();
  });

  it('never throws, even when the setter does, and says why through diag.debug', () => {
    const d = openDeadline({ operation: 'op', timeoutMs: 1_000, parent: null });
    const boom = new Error('boom');
    const throwing = { set: () => { throw boom; } };
    const logged = captureDiag();
    try {
      expect(() => propagator.inject(setDeadline(ROOT_CONTEXT, d), {}, throwing)).not.toThrow();
    } finally {
      logged.stop();
    }
    expect(logged.debug).toEqual([{ message: expect.stringContaining('inject') as string, error: boom }]);
    d.dispose();
  });

  describe.each([
    ['baggage propagator first', () => [new W3CBaggagePropagator(), new DeadlinePropagator()]],
    ['deadline propagator first', () => [new DeadlinePropagator(), new W3CBaggagePropagator()]],
  ])('composed with W3C baggage, %s', (_name, propagators) => {
    const composite = () => new CompositePropagator({ propagators: propagators() });

    it('keeps the user entries and carries deadline.at_ms', () => {
      const user = propagation.createBaggage({ 'user.tier': { value: 'gold' }, 'tenant id': { value: 'a b' } });
      const outer = propagation.setBaggage(ROOT_CONTEXT, user);
      const d = openDeadline({ operation: 'op', timeoutMs: 1_000, parent: null });
      const headers = injected(setDeadline(outer, d), composite());
      const members = headers.baggage.split(',').map((m) => m.trim());
      expect(members).toContain('user.tier=gold');
      expect(members).toContain(`deadline.at_ms=${Math.floor(d.expiresAtMs)}`);
      expect(members.some((m) => m.startsWith('tenant'))).toBe(true);
      expect(members.filter((m) => m.startsWith('deadline.at_ms='))).toHaveLength(1);
      d.dispose();
    });

    it('carries the child cutoff, not the parent one, after clamping', () => {
      const root = openDeadline({ operation: 'root', timeoutMs: 10_000, parent: null });
      const child = root.child('child', 100);
      const ctx = setDeadline(setDeadline(ROOT_CONTEXT, root), child);
      const headers = injected(ctx, composite());
      expect(headers.baggage).toContain(`deadline.at_ms=${Math.floor(child.expiresAtMs)}`);
      expect(headers['x-deadline-at-ms']).toBe(String(Math.floor(child.expiresAtMs)));
      child.dispose();
      root.dispose();
    });

    it('keeps entries the user adds, changes or removes inside a deadline scope', () => {
      const d = openDeadline({ operation: 'op', timeoutMs: 1_000, parent: null });
      const scoped = setDeadline(ROOT_CONTEXT, d);
      const atMs = `deadline.at_ms=${Math.floor(d.expiresAtMs)}`;
      const withUser = (change: (bag: Baggage) => Baggage) => propagation.setBaggage(scoped, change(propagation.getBaggage(scoped)!));
      const members = (ctx: Context) => injected(ctx, composite()).baggage.split(',').map((m) => m.trim()).sort();

      expect(members(scoped)).toEqual([atMs]);
      expect(members(withUser((bag) => bag.setEntry('user.tier', { value: 'gold' })))).toEqual([atMs, 'user.tier=gold']);
      expect(members(withUser((bag) => bag.setEntry('a', { value: '1' }).setEntry('b', { value: '2' }).removeEntry('a')))).toEqual(['b=2', atMs]);
      // Dropping our entry from the baggage does not drop the cutoff from the wire.
      expect(members(withUser((bag) => bag.removeEntry('deadline.at_ms')))).toEqual([atMs]);
      const bag = propagation.getBaggage(scoped)!;
      bag.getEntry('deadline.at_ms')!.value = 'tampered';
      expect(bag.getEntry('deadline.at_ms')?.value).toBe(String(Math.floor(d.expiresAtMs)));
      expect(bag.getAllEntries()).toEqual([['deadline.at_ms', { value: String(Math.floor(d.expiresAtMs)) }]]);
      d.dispose();
    });

    it('adds nothing without a deadline and leaves user baggage alone', () => {
      const outer = propagation.setBaggage(ROOT_CONTEXT, propagation.createBaggage({ k: { value: 'v' } }));
      expect(injected(outer, composite())).toEqual({ baggage: 'k=v' });
    });
  });
});

describe('extract', () => {
  const at = (offsetMs: number) => String(Date.now() + offsetMs);
  // Header builders run at test time, so absolute values are fresh even on a slow machine.
  const accepted: [string, () => Record<string, string | string[]>, number][] = [
    ['x-deadline-remaining-ms', () => ({ 'x-deadline-remaining-ms': '800' }), 800],
    ['x-deadline-at-ms', () => ({ 'x-deadline-at-ms': at(800) }), 800],
    ['baggage deadline.at_ms', () => ({ baggage: `k=v, deadline.at_ms=${at(800)};meta=1` }), 800],
    // gRPC metadata getters return a list: the usual one-value list, and lists the short path must leave to the full parse.
    ['baggage as a one-value list', () => ({ baggage: [`deadline.at_ms=${at(800)}`] }), 800],
    ['baggage as a one-value list with metadata', () => ({ baggage: [`deadline.at_ms=${at(800)};meta=1`] }), 800],
    ['baggage as a one-value list, our entry second', () => ({ baggage: [`k=v,deadline.at_ms=${at(800)}`] }), 800],
    ['smallest in a two-value baggage list', () => ({ baggage: [`deadline.at_ms=${at(900)}`, `deadline.at_ms=${at(400)}`] }), 400],
    ['grpc-timeout millis', () => ({ 'grpc-timeout': '250m' }), 250],
    ['grpc-timeout seconds', () => ({ 'grpc-timeout': '3S' }), 3_000],
    ['grpc-timeout minutes', () => ({ 'grpc-timeout': '2M' }), 120_000],
    ['grpc-timeout hours', () => ({ 'grpc-timeout': '1H' }), 3_600_000],
    ['grpc-timeout micros', () => ({ 'grpc-timeout': '500000u' }), 500],
    ['grpc-timeout nanos', () => ({ 'grpc-timeout': '90000000n' }), 90],
    ['connect-timeout-ms', () => ({ 'connect-timeout-ms': '1500' }), 1_500],
    ['x-run-deadline-ms', () => ({ 'x-run-deadline-ms': '700' }), 700],
    ['earliest of several sources', () => ({ 'x-run-deadline-ms': '700', 'grpc-timeout': '300m', 'x-deadline-at-ms': at(900) }), 300],
    ['smallest of an array', () => ({ 'x-deadline-remaining-ms': ['500', '200'] }), 200],
    ['smallest of a comma-joined value', () => ({ 'x-deadline-remaining-ms': '500, 200 ,900' }), 200],
    ['valid value among bad ones', () => ({ 'x-deadline-remaining-ms': ['abc', '-3', '300'] }), 300],
    ['good header beside a bad one', () => ({ 'x-deadline-remaining-ms': 'NaN', 'connect-timeout-ms': '400' }), 400],
    ['zero', () => ({ 'x-deadline-remaining-ms': '0' }), 0],
  ];
  it.each(accepted)('accepts %s', (_name, headers, expectedMs) => {
    // Date.now() reads whole milliseconds. Read once when the header is written and once when it is
    // read, the two truncations can take up to 1 ms more off an absolute value than the time that
    // really passed, so the bound below would fail whenever a millisecond turned between them.
    // Holding the wall clock still for the write and the read makes that difference exactly zero;
    // the time that passes is then measured on the one monotonic clock the deadline counts down on.
    const wallClock = vi.spyOn(Date, 'now').mockReturnValue(Date.now());
    const start = performance.now();
    let d: Deadline | undefined;
    try {
      d = extract(headers());
    } finally {
      wallClock.mockRestore();
    }
    expect(d).toBeDefined();
    expect(d!.source).toBe('remote');
    const left = d!.remainingMs();
    const elapsed = performance.now() - start;
    expect(left).toBeLessThanOrEqual(expectedMs);
    // The time that passed since just before extract, and no more, has come off the budget (one clock, however long a pause).
    expect(left).toBeGreaterThanOrEqual(Math.max(0, expectedMs - elapsed));
    expect(Number.isFinite(d!.expiresAtMs)).toBe(true);
  });

  const ignored: [string, Record<string, unknown>][] = [
    ['no headers', {}],
    ['letters', { 'x-deadline-remaining-ms': 'abc' }],
    ['negative', { 'x-deadline-remaining-ms': '-5' }],
    ['empty', { 'x-deadline-remaining-ms': '' }],
    ['blank', { 'x-deadline-remaining-ms': '   ' }],
    ['exponent', { 'x-deadline-remaining-ms': '1e3' }],
    ['fraction', { 'connect-timeout-ms': '1.5' }],
    ['NaN', { 'x-deadline-at-ms': 'NaN' }],
    ['Infinity', { 'x-deadline-at-ms': 'Infinity' }],
    ['hex', { 'x-run-deadline-ms': '0x10' }],
    ['non-ASCII digits', { 'x-deadline-remaining-ms': '١٢٣' }],
    ['full-width digits', { 'x-deadline-remaining-ms': '５００' }],
    ['too many digits', { 'x-deadline-remaining-ms': '9999999999999999999' }],
    ['huge value', { 'x-deadline-remaining-ms': '1'.repeat(2_000_000) }],
    ['grpc without unit', { 'grpc-timeout': '250' }],
    ['grpc with 9 digits', { 'grpc-timeout': '123456789m' }],
    ['grpc negative', { 'grpc-timeout': '-1S' }],
    ['grpc fraction', { 'grpc-timeout': '1.5S' }],
    ['grpc unknown unit', { 'grpc-timeout': '5d' }],
    ['baggage without our key', { baggage: 'deadline.at=5,x=1' }],
    ['baggage with a bad value', { baggage: 'deadline.at_ms=soon' }],
    ['baggage list with a bad value', { baggage: ['deadline.at_ms=soon'] }],
    ['baggage list of a non-string', { baggage: [5] }],
    ['a number instead of a string', { 'x-deadline-remaining-ms': 500 }],
    ['an array of non-strings', { 'x-deadline-remaining-ms': [500, null] }],
    ['an empty array', { 'x-deadline-remaining-ms': [] }],
  ];
  it.each(ignored)('ignores %s', (_name, headers) => {
    const ctx = propagator.extract(ROOT_CONTEXT, headers, defaultTextMapGetter);
    expect(ctx).toBe(ROOT_CONTEXT);
  });

  it('never throws when the getter throws, and says why through diag.debug', () => {
    const boom = new Error('boom');
    const throwing: TextMapGetter = { get: () => { throw boom; }, keys: () => [] };
    const logged = captureDiag();
    try {
      expect(propagator.extract(ROOT_CONTEXT, {}, throwing)).toBe(ROOT_CONTEXT);
    } finally {
      logged.stop();
    }
    expect(logged.debug).toEqual([{ message: expect.stringContaining('read') as string, error: boom }]);
  });

  it('keeps a context it cannot add to as it was, and says why through diag.debug', () => {
    const boom = new Error('broken context');
    const broken = { getValue: () => { throw boom; }, setValue: () => broken, deleteValue: () => broken } as unknown as Context;
    const logged = captureDiag();
    try {
      expect(propagator.extract(broken, { 'x-deadline-remaining-ms': '500' }, defaultTextMapGetter)).toBe(broken);
    } finally {
      logged.stop();
    }
    expect(logged.debug).toEqual([{ message: expect.stringContaining('extract') as string, error: boom }]);
  });

  it('builds an expired deadline for a cutoff already passed, so the server can refuse it', () => {
    const d = extract({ 'x-deadline-at-ms': at(-5_000) })!;
    expect(d.expired).toBe(true);
    expect(d.remainingMs()).toBe(0);
    expect(d.budgetMs).toBe(0);
  });

  it('records what arrived as the budget', () => {
    expect(extract({ 'x-deadline-remaining-ms': '900' })!.budgetMs).toBe(900);
  });

  it('caps what a caller can ask for with maxIncomingMs', () => {
    const capped = new DeadlinePropagator({ maxIncomingMs: 1_000 });
    const d = extract({ 'x-deadline-remaining-ms': String(10 * 365 * 24 * 3600 * 1000) }, ROOT_CONTEXT, capped)!;
    expect(d.remainingMs()).toBeLessThanOrEqual(1_000);
    expect(d.budgetMs).toBe(1_000);
  });

  it('never extends a deadline already active in the context', () => {
    const active = openDeadline({ operation: 'local', timeoutMs: 200, parent: null });
    const ctx = setDeadline(ROOT_CONTEXT, active);
    expect(propagator.extract(ctx, { 'x-deadline-remaining-ms': '60000' }, defaultTextMapGetter)).toBe(ctx);
    const shorter = extract({ 'x-deadline-remaining-ms': '50' }, ctx)!;
    expect(shorter.expiresAtMs).toBeLessThan(active.expiresAtMs);
    expect(shorter.parent).toBe(active);
    active.dispose();
  });

  it('keeps the disagreement between relative and absolute values as wire skew', () => {
    const before = Date.now();
    const d = extract({ 'x-deadline-remaining-ms': '1000', 'x-deadline-at-ms': at(31_000) })!;
    // 30 s of disagreement, less the wall-clock time between writing the header and reading it.
    expect(d.wireSkewMs).toBeGreaterThanOrEqual(30_000 - (Date.now() - before) - 1);
    expect(d.wireSkewMs).toBeLessThanOrEqual(30_000 + 1);
    expect(d.remainingMs()).toBeLessThanOrEqual(1_000);
  });

  it('follows the clock policy', () => {
    const headers = { 'x-deadline-remaining-ms': '1000', 'x-deadline-at-ms': at(400) };
    expect(extract(headers)!.remainingMs()).toBeLessThanOrEqual(400);
    const start = performance.now();
    const relative = extract(headers, ROOT_CONTEXT, new DeadlinePropagator({ clock: 'relative' }))!.remainingMs();
    // The 1,000 ms header, less the time since just before extract (one clock, however long a pause): not the 400 ms cutoff.
    expect(relative).toBeGreaterThanOrEqual(1_000 - (performance.now() - start));
    expect(extract(headers, ROOT_CONTEXT, new DeadlinePropagator({ clock: 'absolute' }))!.remainingMs()).toBeLessThanOrEqual(400);
    expect(extract({ 'x-deadline-at-ms': at(400) }, ROOT_CONTEXT, new DeadlinePropagator({ clock: 'relative' }))).toBeUndefined();
  });

  it('rejects bad configuration with a clear error', () => {
    expect(() => new DeadlinePropagator({ clock: 'wall' as never })).toThrow(/clock must be one of min, relative, absolute/);
    expect(() => new DeadlinePropagator({ maxIncomingMs: -1 })).toThrow(/maxIncomingMs must not be negative/);
  });
});

describe('fields', () => {
  it('lists every header read or written', () => {
    expect(propagator.fields().sort()).toEqual(
      ['baggage', 'connect-timeout-ms', 'grpc-timeout', 'x-deadline-at-ms', 'x-deadline-remaining-ms', 'x-run-deadline-ms'].sort(),
    );
  });
});

describe('round trip through a real HTTP request', () => {
  it('rebuilds the same cutoff on the server with no more time than the sender had', async () => {
    const seen: { headers: IncomingHttpHeaders; deadline: Deadline | undefined }[] = [];
    const server = createServer((req, res) => {
      const ctx = propagation.extract(ROOT_CONTEXT, req.headers, defaultTextMapGetter);
      seen.push({ headers: req.headers, deadline: getDeadline(ctx) });
      res.end('ok');
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as AddressInfo;
    const d = openDeadline({ operation: 'client', timeoutMs: 2_000, parent: null });
    const headers: Record<string, string> = {};
    propagation.inject(setDeadline(context.active(), d), headers);
    const senderRemaining = d.remainingMs();
    await new Promise<void>((resolve, reject) => {
      const req = request({ host: '127.0.0.1', port, headers }, (res) => {
        res.resume();
        res.on('end', resolve);
      });
      req.on('error', reject);
      req.end();
    });
    server.close();
    expect(seen).toHaveLength(1);
    const remote = seen[0].deadline!;
    expect(remote.source).toBe('remote');
    expect(remote.remainingMs()).toBeLessThanOrEqual(senderRemaining);
    expect(Math.abs(remote.expiresAtMs - d.expiresAtMs)).toBeLessThanOrEqual(1);
    d.dispose();
  });
});
