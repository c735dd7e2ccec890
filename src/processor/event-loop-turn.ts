/**
 * A number that changes once per turn of the event loop. Two spans that end
 * under the same number ended on one event: the server span on a response's
 * `finish` and express's middleware span on its `close`, emitted from there
 * on the next tick. Only the first read in a turn schedules the change, and
 * the immediate is unref'd: it never keeps the process alive.
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
