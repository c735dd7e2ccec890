import { propagation, ROOT_CONTEXT, type Context } from '@opentelemetry/api';
import { describe, expect, it } from 'vitest';
import { getDeadline, openDeadline, setDeadline } from '../src';

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

describe.each([
  ['the API context', () => ROOT_CONTEXT],
  ['another Context implementation', () => new ObjectContext()],
])('setDeadline on %s', (_name, root) => {
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
});
