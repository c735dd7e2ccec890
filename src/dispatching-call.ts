/**
 * @internal The outgoing call whose transport is dispatching its request
 * synchronously right now, set by runInCallTransport. A module of its own
 * because both src/context.ts (outgoingCallOf) and DeadlineOnlyBaggage read it.
 */
let dispatching: object | undefined;

/**
 * @internal Runs `dispatch`, a transport's synchronous dispatch of `call`'s
 * request, in the caller's own context, with the call visible to what runs
 * inside it (outgoingCallOf) as a transport context would make it. For a
 * transport whose hooks all run synchronously inside the dispatch: undici
 * creates the request, and instrumentation-undici and our channel subscriber
 * see it, before its dispatch returns. A transport context costs a copy of
 * the whole context and a context-manager frame for it, which async
 * resources created inside keep (a connection's TCP handle holds the frame,
 * and through it the call, of the request that opened it); docs/internals.md
 * gives what that cost on the bench chain. Only for a context with no call in
 * it already: see mayDispatchInline in src/context.ts.
 */
export function runInCallTransport<T>(call: object, dispatch: () => T): T {
  const outer = dispatching;
  dispatching = call;
  try {
    return dispatch();
  } finally {
    dispatching = outer;
  }
}

/** @internal The call runInCallTransport is dispatching, if any. */
export function dispatchingCall(): object | undefined {
  return dispatching;
}
