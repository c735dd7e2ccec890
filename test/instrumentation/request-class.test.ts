import { describe, expect, it } from 'vitest';
import { RequestClassPatcher } from '../../instrumentation/client/request-class';

/** Stands in for undici's internal Request class: the two methods we hook, plus state. */
function makeRequestClass() {
  return class FakeRequest {
    headers: string[] = [];
    connects = 0;
    addHeader(name: string, value: string): this {
      this.headers.push(name, value);
      return this;
    }
    onConnect(abort: (reason: unknown) => void): void {
      void abort;
      this.connects++;
    }
  };
}

describe('RequestClassPatcher', () => {
  it('hooks the class once, on its prototype, and gives the originals back on restore', () => {
    const FakeRequest = makeRequestClass();
    const originals = { addHeader: FakeRequest.prototype.addHeader, onConnect: FakeRequest.prototype.onConnect };
    const written: object[] = [];
    const patcher = new RequestClassPatcher({ dropHeader: (_request, name) => name === 'x-drop', beforeWrite: (request) => void written.push(request) });
    const first = new FakeRequest();
    patcher.patchClassOf(first);
    const hooked = FakeRequest.prototype.addHeader;
    patcher.patchClassOf(new FakeRequest());
    expect(FakeRequest.prototype.addHeader).toBe(hooked);
    expect(hooked).not.toBe(originals.addHeader);

    first.addHeader('x-drop', '1').addHeader('x-keep', '2');
    first.onConnect(() => {});
    expect(first.headers).toEqual(['x-keep', '2']);
    expect(first.connects).toBe(1);
    expect(written).toEqual([first]);
    // Nothing was put on the request itself: its shape stays the class's.
    expect(Object.keys(first)).toEqual(['headers', 'connects']);

    patcher.restore();
    expect(FakeRequest.prototype.addHeader).toBe(originals.addHeader);
    expect(FakeRequest.prototype.onConnect).toBe(originals.onConnect);
    first.addHeader('x-drop', '3');
    expect(first.headers).toEqual(['x-keep', '2', 'x-drop', '3']);
  });

  it('aborts the request through undici\'s own abort, after onConnect, when beforeWrite returns a reason', () => {
    const FakeRequest = makeRequestClass();
    const patcher = new RequestClassPatcher({ dropHeader: () => false, beforeWrite: () => 'past the cutoff' });
    const request = new FakeRequest();
    patcher.patchClassOf(request);
    const order: string[] = [];
    request.onConnect((reason) => order.push(`abort: ${String(reason)} after ${request.connects} connect`));
    expect(order).toEqual(['abort: past the cutoff after 1 connect']);
    patcher.restore();
  });

  it('stays a pass-through under a wrapper someone added on top, once restored', () => {
    const FakeRequest = makeRequestClass();
    const patcher = new RequestClassPatcher({ dropHeader: () => true, beforeWrite: () => {} });
    const request = new FakeRequest();
    patcher.patchClassOf(request);
    const ours = FakeRequest.prototype.addHeader;
    const theirs = function (this: InstanceType<typeof FakeRequest>, name: string, value: string) {
      return ours.call(this, name, value);
    };
    FakeRequest.prototype.addHeader = theirs;
    patcher.restore();
    expect(FakeRequest.prototype.addHeader).toBe(theirs);
    request.addHeader('x-any', '1');
    expect(request.headers).toEqual(['x-any', '1']);
  });
});
