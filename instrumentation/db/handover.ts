/**
 * Node's pools (pg-pool, mysql2) keep no async context for their waiters: a
 * waiter's callback runs wherever the connection came free, inside another
 * request's release or a socket event, in that request's context and under
 * its deadline. Our pool wrappers give a caller's callback back its own
 * context; for a pool's own statement made with no deadline (pg-pool's
 * `query`, mysql2's pool `query` / `execute`) they do it more cheaply, with
 * this hand-over: the statement the pool's callback makes on the connection
 * it was given is passed through without a context read.
 */
let handedOver: object | undefined;

type ConnectionCallback = (err: unknown, connection?: never, ...rest: never[]) => unknown;

/**
 * `callback`, a pool's own callback for a statement whose caller has no
 * deadline: while it runs, statements on the connection it was given pass
 * through untouched. The pool's callback makes its statement at once, and
 * nothing else, so the hand-over ends when it returns.
 */
export function handsOverUnguarded<C extends ConnectionCallback>(callback: C): C {
  return function handOver(this: unknown, err: unknown, connection?: never, ...rest: never[]): unknown {
    const previous = handedOver;
    handedOver = typeof connection === 'object' && connection !== null ? connection : undefined;
    try {
      return callback.call(this, err, connection, ...rest);
    } finally {
      handedOver = previous;
    }
  } as C;
}

/** True while the pool's callback that was handed `connection` for a statement with no deadline runs. */
export function isHandedOverUnguarded(connection: unknown): boolean {
  return handedOver !== undefined && connection === handedOver;
}
