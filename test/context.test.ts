import { createContextKey, propagation, ROOT_CONTEXT, type Context } from '@opentelemetry/api';
import { describe, expect, it } from 'vitest';
import { getDeadline, openDeadline, setDeadline } from '../src';
import { DELETE_BAGGAGE, isDeadlineOnlyBaggage, OUTGOING_CALL_KEY, outgoingCallOf, setValueAndBaggage, withOutgoingCall, withoutOutgoingCall } from '../src/context';

/** A Context that is not the API's: values in a plain object, one copy per change. */
class ObjectContext implements Context {
  constructor(private readonly values: Record<symbol, unknown> = {}) {}
  getValue(key: symbol): unknown {
    return this.values[key];
  }
  setValue(key: symbol, value: unknown): Context {
    return new ObjectContext({ ...this.values, [key]: value });
  }
  deleteValue(key: symbol): Context {
    const copy = { ...this.values };
    delete copy[key];
    return new ObjectContext(copy);
  }
}

const KEY = createContextKey('context-test.key');

describe.each([
  ['the API context', () => ROOT_CONTEXT],
  ['another Context implementation', () => new ObjectContext()],
])('setDeadline and setValueAndBaggage on %s', (_name, root) => {
  it('sets the deadline and its baggage entry in a new context, leaving the given one as it was', () => {
    const user = propagation.setBaggage(root(), propagation.createBaggage({ tier: { value: 'gold' } }));
    const d = openDeadline({ operation: 'op', timeoutMs: 1_000, parent: null });
    const scoped = setDeadline(user, d);
    expect(getDeadline(scoped)).toBe(d);
    expect(propagation.getBaggage(scoped)?.getEntry('deadline.at_ms')?.value).toBe(String(Math.floor(d.expiresAtMs)));
    expect(propagation.getBaggage(scoped)?.getEntry('tier')?.value).toBe('gold');
    expect(getDeadline(user)).toBeUndefined();
    expect(propagation.getBaggage(user)?.getAllEntries()).toEqual([['tier', { value: 'gold' }]]);
    d.dispose();
  });

  it('keeps baggage that already holds the same cutoff as it is (what a W3C baggage extract from the caller gives)', () => {
    const d = openDeadline({ operation: 'op', timeoutMs: 1_000, parent: null });
    const atMs = String(Math.floor(d.expiresAtMs));
    const extracted = propagation.createBaggage({ tier: { value: 'gold' }, 'deadline.at_ms': { value: atMs } });
    const scoped = setDeadline(propagation.setBaggage(root(), extracted), d);
    expect(getDeadline(scoped)).toBe(d);
    expect(propagation.getBaggage(scoped)).toBe(extracted);
    const stale = propagation.createBaggage({ 'deadline.at_ms': { value: String(Number(atMs) + 5) } });
    expect(propagation.getBaggage(setDeadline(propagation.setBaggage(root(), stale), d))?.getEntry('deadline.at_ms')?.value).toBe(atMs);
    d.dispose();
  });

  it('replaces an entry that only reads as the same number (a leading zero, a sign, a space, a fraction, empty)', () => {
    const d = openDeadline({ operation: 'op', timeoutMs: 1_000, parent: null });
    const atMs = String(Math.floor(d.expiresAtMs));
    for (const lookalike of [`0${atMs}`, `+${atMs}`, ` ${atMs}`, `${atMs} `, `${atMs}.0`, `${atMs}.4`, `${atMs}e0`, '']) {
      const bag = propagation.createBaggage({ tier: { value: 'gold' }, 'deadline.at_ms': { value: lookalike } });
      const scoped = propagation.getBaggage(setDeadline(propagation.setBaggage(root(), bag), d));
      expect(scoped, lookalike).not.toBe(bag);
      expect(scoped?.getEntry('deadline.at_ms')?.value, lookalike).toBe(atMs);
      expect(scoped?.getEntry('tier')?.value).toBe('gold');
    }
    d.dispose();
  });

  it('gives a context with no baggage the entry as text, however it is read', () => {
    const d = openDeadline({ operation: 'op', timeoutMs: 1_000, parent: null });
    const atMs = String(Math.floor(d.expiresAtMs));
    const bag = propagation.getBaggage(setDeadline(root(), d))!;
    expect(bag.getAllEntries()).toEqual([['deadline.at_ms', { value: atMs }]]);
    expect(bag.getEntry('deadline.at_ms')).toEqual({ value: atMs });
    expect(bag.setEntry('tier', { value: 'gold' }).getAllEntries()).toEqual([
      ['deadline.at_ms', { value: atMs }],
      ['tier', { value: 'gold' }],
    ]);
    d.dispose();
  });

  it("gives a call's transport the call and no deadline-only baggage, in one baggage when the context has no call yet", () => {
    const d = openDeadline({ operation: 'op', timeoutMs: 1_000, parent: null });
    const outer = { name: 'outer' };
    const inner = { name: 'inner' };
    const scoped = setDeadline(root(), d);
    const transport = withOutgoingCall(scoped, outer);
    expect(outgoingCallOf(transport)).toBe(outer);
    expect(transport.getValue(OUTGOING_CALL_KEY)).toBeUndefined();
    const bag = propagation.getBaggage(transport)!;
    expect(bag.getAllEntries()).toEqual([]);
    expect(bag.getEntry('deadline.at_ms')).toBeUndefined();
    expect(isDeadlineOnlyBaggage(bag)).toBe(true);
    expect(getDeadline(transport)).toBe(d);
    expect(outgoingCallOf(scoped)).toBeUndefined();
    // A user's change is an ordinary baggage; the deadline entry comes back as setDeadline makes it.
    expect(bag.setEntry('tier', { value: 'gold' }).getAllEntries()).toEqual([['tier', { value: 'gold' }]]);
    expect(bag.clear().getAllEntries()).toEqual([]);
    const again = setDeadline(transport, d);
    expect(propagation.getBaggage(again)?.getEntry('deadline.at_ms')?.value).toBe(String(Math.floor(d.expiresAtMs)));
    // A call made from inside the first one's transport: the newer call wins, in both orders of making them.
    const nested = withOutgoingCall(transport, inner);
    expect(outgoingCallOf(nested)).toBe(inner);
    expect(outgoingCallOf(withOutgoingCall(setDeadline(nested, d), outer))).toBe(outer);
    // Without any call: neither the key nor the baggage standing for it.
    expect(outgoingCallOf(withoutOutgoingCall(nested))).toBeUndefined();
    expect(outgoingCallOf(withoutOutgoingCall(transport))).toBeUndefined();
    expect(getDeadline(withoutOutgoingCall(transport))).toBe(d);
    d.dispose();
  });

  it("keeps the user's baggage in a call's transport, the call under its key", () => {
    const d = openDeadline({ operation: 'op', timeoutMs: 1_000, parent: null });
    const call = { name: 'call' };
    const scoped = setDeadline(propagation.setBaggage(root(), propagation.createBaggage({ tier: { value: 'gold' } })), d);
    const transport = withOutgoingCall(scoped, call);
    expect(outgoingCallOf(transport)).toBe(call);
    expect(transport.getValue(OUTGOING_CALL_KEY)).toBe(call);
    expect(propagation.getBaggage(transport)).toBe(propagation.getBaggage(scoped));
    d.dispose();
  });

  it('sets a value and removes the baggage, leaving the given context as it was', () => {
    const bag = propagation.createBaggage({ tier: { value: 'gold' } });
    const before = propagation.setBaggage(root(), bag);
    const after = setValueAndBaggage(before, KEY, 42, DELETE_BAGGAGE);
    expect(after.getValue(KEY)).toBe(42);
    expect(propagation.getBaggage(after)).toBeUndefined();
    expect(before.getValue(KEY)).toBeUndefined();
    expect(propagation.getBaggage(before)).toBe(bag);
  });
});
