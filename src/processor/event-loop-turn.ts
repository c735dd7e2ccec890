/**
 * A number that changes once per event-loop turn: spans ending under one number ended on one
 * event (a response's `finish` and express's `close` on the next tick). The immediate is unref'd.
 */
let turn = 0;
let advancing = false;

function advance(): void {
  turn++;
  advancing = false;
}

export function currentTurn(): number {
  if (!advancing) {
    advancing = true;
    setImmediate(advance).unref();
  }
  return turn;
}
