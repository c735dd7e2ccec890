import { describe, expect, it } from 'vitest';
import { openDeadline } from '../../src';
import { delegateUnknownMethods, GuardedCall } from '../../instrumentation/grpc/client-call';

// GuardedCall stands between grpc-js's client layer and the call Channel#createCall
// made; a method a later grpc-js 1.x adds to its call interface must still reach the call.
describe('GuardedCall', () => {
  it('passes through methods it does not name, once it has seen a call that has them', () => {
    class FutureCall {
      getPeer() {
        return 'peer';
      }
      getDeadlineInfo(prefix: string) {
        return [`${prefix}: ${this.getPeer()}`];
      }
    }
    const call = new FutureCall();
    const deadline = openDeadline({ operation: 'parent', timeoutMs: 10_000, parent: null });
    const guarded = new GuardedCall(call as never, {
      deadline,
      method: '/a.B/C',
      observe: false,
      clampedByUs: false,
      span: undefined,
      ownSpan: false,
      channel: { getTarget: () => 'target' },
      inject: () => {},
      trustsRefusal: () => true,
      newMetadata: () => ({ get: () => [], set: () => {}, remove: () => {} }),
    }) as unknown as FutureCall;
    expect('getDeadlineInfo' in guarded).toBe(false);
    delegateUnknownMethods(call);
    expect(guarded.getDeadlineInfo('info')).toEqual(['info: peer']);
    deadline.dispose();
  });
});
