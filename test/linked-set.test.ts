import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { LinkedItem, LinkedSet } from '../src/linked-set';

class Item extends LinkedItem {
  constructor(readonly id: number) {
    super();
  }
}

const ids = (items: Item[]) => items.map((item) => item.id);

describe('LinkedSet (the deadline keeps its watchers and armed children in it)', () => {
  it('behaves as an insertion-ordered Set under any sequence of adds, deletes and drains', () => {
    fc.assert(
      fc.property(
        fc.array(fc.tuple(fc.constantFrom('add', 'delete', 'drain'), fc.integer({ min: 0, max: 7 })), { maxLength: 200 }),
        (ops) => {
          const items = Array.from({ length: 8 }, (_, i) => new Item(i));
          const set = new LinkedSet<Item>();
          const model = new Set<number>();
          for (const [op, i] of ops) {
            if (op === 'add') {
              set.add(items[i]);
              model.add(i);
            } else if (op === 'delete') {
              expect(set.delete(items[i])).toBe(model.delete(i));
            } else {
              expect(ids(set.drain())).toEqual([...model]);
              model.clear();
            }
            expect(set.size).toBe(model.size);
          }
          expect(ids(set.drain())).toEqual([...model]);
          // Drained items carry no links: they can join again, here or elsewhere.
          for (const item of items) expect([item.linkedIn, item.linkPrev, item.linkNext]).toEqual([undefined, undefined, undefined]);
        },
      ),
    );
  });

  it('does not delete an item that sits in another set', () => {
    const a = new LinkedSet<Item>();
    const b = new LinkedSet<Item>();
    const item = new Item(1);
    a.add(item);
    expect(b.delete(item)).toBe(false);
    expect(a.size).toBe(1);
    expect(ids(a.drain())).toEqual([1]);
  });

  it('refuses an item that already sits in another set, leaving both sets as they were', () => {
    const a = new LinkedSet<Item>();
    const b = new LinkedSet<Item>();
    const item = new Item(1);
    a.add(item);
    expect(() => b.add(item)).toThrow(/second LinkedSet/);
    expect([a.size, b.size]).toEqual([1, 0]);
  });
});
