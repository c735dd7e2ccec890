import { defaultTextMapSetter, propagation, ROOT_CONTEXT, type Context } from '@opentelemetry/api';
import { CompositePropagator, W3CBaggagePropagator } from '@opentelemetry/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DeadlinePropagator, openDeadline, setDeadline } from '../../src';
import { withDeadlineOffWire, withDeadlineOnWire, withDeadlineWritten } from '../../instrumentation/call/wire-context';
import { installOtel, type TestOtel } from '../helpers/otel';

// The propagators an app registers: what a propagator inside a transport would write from each context.
const propagators = new CompositePropagator({ propagators: [new W3CBaggagePropagator(), new DeadlinePropagator()] });

function written(ctx: Context): Record<string, string> {
  const carrier: Record<string, string> = {};
  propagators.inject(ctx, carrier, defaultTextMapSetter);
  return carrier;
}

let otel: TestOtel;
beforeAll(() => {
  otel = installOtel();
});
afterAll(() => otel.shutdown());

describe('the contexts a guarded call runs its transport in', () => {
  const deadline = openDeadline({ operation: 'call', timeoutMs: 60_000, parent: null });
  const atMs = String(Math.floor(deadline.expiresAtMs));
  const withUserBaggage = setDeadline(propagation.setBaggage(ROOT_CONTEXT, propagation.createBaggage({ 'user.tier': { value: 'gold' } })), deadline);
  afterAll(() => deadline.dispose());

  it('written by the guard: no propagator writes the deadline or the baggage again', () => {
    expect(written(withUserBaggage)).toMatchObject({ 'x-deadline-at-ms': atMs, baggage: expect.stringContaining('user.tier=gold') });
    expect(written(withDeadlineWritten(withUserBaggage))).toEqual({});
    expect(written(withDeadlineWritten(setDeadline(ROOT_CONTEXT, deadline)))).toEqual({});
  });

  it('back on the wire: the deadline and the caller\'s own baggage, held aside, are written again', () => {
    for (const offWire of [withDeadlineWritten(withUserBaggage), withDeadlineOffWire(withUserBaggage)]) {
      const headers = written(withDeadlineOnWire(offWire));
      expect(headers['x-deadline-at-ms']).toBe(atMs);
      expect(headers.baggage?.split(',').sort()).toEqual([`deadline.at_ms=${atMs}`, 'user.tier=gold']);
    }
  });

  it('off the wire for an unlisted host: the user\'s baggage still goes, the deadline does not', () => {
    expect(written(withDeadlineOffWire(withUserBaggage))).toEqual({ baggage: 'user.tier=gold' });
  });
});
