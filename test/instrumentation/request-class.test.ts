import { describe, expect, it } from 'vitest';
import { RequestClassPatcher } from '../../instrumentation/client/request-class';

/** Stands in for undici's internal Request class: the method we hook, plus state. */
function makeRequestClass() {
  return class FakeRequest {
    connects = 0;
    onConnect(abort: (reason: unknown) => void): void {
      void abort;
      this.connects++;
    }
  };
}

describe('RequestClassPatcher', () => {
  it('hooks the class once, on its prototype, and gives the originals back on restore', () => {
    const FakeRequest = makeRequestClass();
    const original = FakeRequest.prototype.onConnect;
    const written: object[] = [];
    const patcher = new RequestClassPatcher({ beforeWrite: (request) => void written.push(request) });
    const first = new FakeRequest();
    patcher.patchClassOf(first);
    const hooked = FakeRequest.prototype.onConnect;
    patcher.patchClassOf(new FakeRequest());
    expect(FakeRequest.prototype.onConnect).toBe(hooked);
    expect(hooked).not.toBe(original);

    first.onConnect(() => {});
    expect(first.connects).toBe(1);
    expect(written).toEqual([first]);
    // Nothing was put on the request itself: its shape stays the class's.
    expect(Object.keys(first)).toEqual(['connects']);

    patcher.restore();
    expect(FakeRequest.prototype.onConnect).toBe(original);
    first.onConnect(() => {});
    expect(written).toEqual([first]);
  });

  it('aborts the request through undici\'s own abort, after onConnect, when beforeWrite returns a reason', () => {
    const FakeRequest = makeRequestClass();
    const patcher = new RequestClassPatcher({ beforeWrite: () => 'past the cutoff' });
    const request = new FakeRequest();
    patcher.patchClassOf(request);
    const order: string[] = [];
    request.onConnect((reason) => order.push(`abort: ${String(reason)} after ${request.connects} connect`));
    expect(order).toEqual(['abort: past the cutoff after 1 connect']);
    patcher.restore();
  });

  it('stays a pass-through under a wrapper someone added on top, once restored', () => {
    const FakeRequest = makeRequestClass();
    const written: object[] = [];
    const patcher = new RequestClassPatcher({ beforeWrite: (request) => void written.push(request) });
    const request = new FakeRequest();
    patcher.patchClassOf(request);
    const ours = FakeRequest.prototype.onConnect;
    const theirs = function (this: InstanceType<typeof FakeRequest>, abort: (reason: unknown) => void) {
      return ours.call(this, abort);
    };
    FakeRequest.prototype.onConnect = theirs;
    patcher.restore();
    expect(FakeRequest.prototype.onConnect).toBe(theirs);
    request.onConnect(() => {});
    expect(request.connects).toBe(1);
    expect(written).toEqual([]);
  });
});
