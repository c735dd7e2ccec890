/**
 * A settled guard lets go of what stops its call: an HTTP call's guard can outlive its request in a
 * context (a kept-alive socket's, say), and must not keep the request, its controller or its body alive
 * through the function it was armed with; a statement's guard must not keep the driver's query.
 */
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { describe, expect, it } from 'vitest';
import { openDeadline } from '../../src';
import { OutgoingCall } from '../../instrumentation/client/call';
import { DbStatement, type CutoffHandler } from '../../instrumentation/db/statement';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

/** A weak reference to what `make` returns, made in a scope of its own so that only what it was handed holds it. */
function heldOnlyBy<T extends object>(make: () => T): WeakRef<T> {
  return new WeakRef(make());
}

/** Lets the current turn's references go, then collects. */
async function collect(): Promise<void> {
  await new Promise((resolve) => setImmediate(resolve));
  gc();
}

describe('a settled guard', () => {
  it('an HTTP call: drops the function that would stop its transport', async () => {
    const deadline = openDeadline({ operation: 'request', timeoutMs: 10_000, parent: null });
    const call = new OutgoingCall({ deadline, observe: false, transport: 'http', method: 'GET', hasBody: false });
    const held = heldOnlyBy(() => {
      const request = { body: new Uint8Array(1024) };
      call.armFor(() => void request.body.fill(0));
      return request;
    });
    call.apiSettled();
    await collect();
    expect(call.settled).toBe(true);
    expect(held.deref()).toBeUndefined();
    deadline.dispose();
  });

  it("an HTTP call cut by its caller's signal: stops its transport once, then drops it", async () => {
    const deadline = openDeadline({ operation: 'request', timeoutMs: 10_000, parent: null });
    const caller = new AbortController();
    const call = new OutgoingCall({ deadline, observe: false, transport: 'http', method: 'GET', hasBody: false, callerSignal: caller.signal });
    const stopped: unknown[] = [];
    const held = heldOnlyBy(() => {
      const request = { stopped };
      call.armFor((reason) => void request.stopped.push(reason));
      return request;
    });
    caller.abort(new Error('caller gone'));
    await collect();
    expect(stopped).toHaveLength(1);
    expect(held.deref()).toBeUndefined();
    deadline.dispose();
  });

  it('a statement: drops its cutoff handler', async () => {
    const deadline = openDeadline({ operation: 'request', timeoutMs: 10_000, parent: null });
    const statement = new DbStatement(deadline, false, 'pg', false, 'SELECT 1');
    const held = heldOnlyBy(() => {
      const handler: CutoffHandler & { query: Uint8Array } = { query: new Uint8Array(1024), onCutoff: () => {} };
      statement.armFor(handler);
      return handler;
    });
    statement.settle();
    await collect();
    expect(statement.settled).toBe(true);
    expect(held.deref()).toBeUndefined();
    deadline.dispose();
  });
});
