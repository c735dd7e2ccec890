// What a process holds: active handles, pending timers (deadline timers are
// unref'd, so process.getActiveResourcesInfo() does not list them; they are
// counted by wrapping the timer globals, which the build calls at run time),
// and the heap after gc. Needs node --expose-gc.

/** Every pending timer: its callback and when it is due, to say what a leftover timer is. */
const liveTimers = new Map();

/**
 * Wraps setTimeout / clearTimeout so that every pending timer, ref'd or not, is
 * counted. Call first. Returns a function that reads the current count.
 */
export function trackTimers() {
  const realSetTimeout = globalThis.setTimeout;
  const realClearTimeout = globalThis.clearTimeout;
  globalThis.setTimeout = function setTimeout(fn, ms, ...args) {
    const handle = realSetTimeout(
      (...a) => {
        liveTimers.delete(handle);
        fn(...a);
      },
      ms,
      ...args,
    );
    liveTimers.set(handle, { fn, dueAtMs: performance.now() + (Number(ms) || 0) });
    return handle;
  };
  globalThis.clearTimeout = function clearTimeout(handle) {
    liveTimers.delete(handle);
    realClearTimeout(handle);
  };
  return () => liveTimers.size;
}

/**
 * Handles (sockets, servers, pipes, ref'd timers) by type. Requests in flight
 * (a CloseReq while a pipe closes, a WriteWrap) are left out: they are
 * operations that finish on their own, not something held.
 */
export function activeResources() {
  const counts = {};
  for (const name of process.getActiveResourcesInfo()) {
    if (/Req|WriteWrap|ShutdownWrap/.test(name)) continue;
    counts[name] = (counts[name] ?? 0) + 1;
  }
  return counts;
}

function sameCounts(a, b) {
  const keys = new Set([...Object.keys(a), ...Object.keys(b)]);
  return [...keys].every((key) => (a[key] ?? 0) === (b[key] ?? 0));
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Waits, bounded, until the active resources equal `target` (sockets close a
 * moment after their peer's), calling `nudge` on every round: a server closes
 * its idle connections there, since a connection still replying on the first
 * round only becomes idle later.
 */
export async function settleResources(target, nudge = () => {}, maxMs = 10_000) {
  const until = performance.now() + maxMs;
  for (;;) {
    nudge();
    if (sameCounts(activeResources(), target) || performance.now() > until) return activeResources();
    await sleep(20);
  }
}

/** A deadline's own timer: DeadlineNode schedules `() => this.onTimer()`. */
const isDeadlineTimer = ({ fn }) => String(fn).includes('onTimer');

function describeTimer({ fn, dueAtMs }) {
  return `${isDeadlineTimer({ fn }) ? 'deadline' : 'other'} timer due in ${Math.round(dueAtMs - performance.now())} ms: ${String(fn).replace(/\s+/g, ' ').slice(0, 80)}`;
}

/**
 * Handles, pending timers (with what each one is) and heap after a full gc.
 * A timer some other code set that is due within the next five seconds (a
 * library's short timeout that the end of the work started) is let fire first; deadline
 * timers are counted as they are, since none may outlive its work.
 */
export async function snapshot() {
  // Let pending close callbacks run, then collect in rounds with a turn of the loop in between:
  // FinalizationRegistry callbacks (Node's fetch registers one per request) only run after a gc.
  await sleep(50);
  // Five seconds, not one: undici's parser timeouts run on its own coarse timer wheel, and the
  // timer of a connection closed a moment ago stays pending until its slot comes round (seen up
  // to 2.8 s after the close under load). Deadline timers never get this grace.
  const until = performance.now() + 5_000;
  while ([...liveTimers.values()].some((t) => !isDeadlineTimer(t) && t.dueAtMs <= until) && performance.now() < until) await sleep(20);
  for (let i = 0; i < 4; i++) {
    globalThis.gc();
    await new Promise((resolve) => setImmediate(resolve));
  }
  globalThis.gc();
  return {
    heapBytes: process.memoryUsage().heapUsed,
    resources: activeResources(),
    timers: liveTimers.size,
    timerSources: [...liveTimers.values()].map(describeTimer),
  };
}

export { sameCounts };
