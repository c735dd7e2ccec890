// Watches the moment each request of the load chain is handed to its socket:
// the socket write that carries its request line and headers, or, for a
// socket still connecting (node:http queues the write), the moment it
// connects. A request handed over after its deadline's cutoff was sent late,
// whatever happens to it later. This is the sender's side of "no request
// reaches the next hop after its cutoff", measured where the bytes go to the
// kernel rather than where the receiver's event loop gets round to them.
//
// Judged on one clock, against the exact cutoff: the monotonic cutoff of the
// deadline the request was made under (read from OTel context when the
// transport creates the request), compared with performance.now(). An earlier
// probe compared timeOrigin + performance.now() with the whole-ms
// x-deadline-at-ms header, which comes from Date.now(): the two clocks drift
// apart by milliseconds, and sends in time were counted late.
//
// And judged at the right moment: when socket.write is called, before the
// instrumentation's last look at the clock, which sits inside it (its wrapper
// of the socket's own `write`), or, on a socket still connecting, when it
// connects, before the instrumentation's 'connect' listener looks. A request
// counts as late when the clock had passed the cutoff by then and the bytes
// still went: the instrumentation could have known, and did not stop them.
// The previous probe read the clock inside the instrumentation's wrapper,
// after its look: a garbage collection or a preemption in those few
// statements made a send the instrumentation had rightly judged in time look
// late. Nothing in JavaScript can close that window (every function between
// the last clock read and the kernel's write can pause), so such sends are
// counted apart, as `crossedAfterCheck`, and reported, not judged.
import diagnosticsChannel from 'node:diagnostics_channel';
import net from 'node:net';
import { context } from '@opentelemetry/api';
import { getDeadline } from '../../../dist/esm/index.mjs';

const REQUEST_LINE = /^(GET|POST) \/load\?/;

/**
 * Requests seen leaving, late ones among them, and the latest, in ms after its cutoff;
 * `crossedAfterCheck`: in time when the write was asked for, past the cutoff by the time
 * it reached the socket's own write (after the instrumentation's last look).
 */
export const sends = { checked: 0, late: 0, latestMs: 0, crossedAfterCheck: 0, latestCrossedMs: 0 };

/** Zeroes the figures, after warm-up. */
export function resetSends() {
  Object.assign(sends, { checked: 0, late: 0, latestMs: 0, crossedAfterCheck: 0, latestCrossedMs: 0 });
}

/** One sender's figures in words, for a failed check's message. */
export function describeSends(s) {
  return (
    `${s.late} of ${s.checked} late, latest by ${s.latestMs.toFixed(3)} ms; ` +
    `${s.crossedAfterCheck} crossed the cutoff after the last look, latest by ${s.latestCrossedMs.toFixed(3)} ms`
  );
}

/** undici Request → the monotonic cutoff of the deadline it was created under. */
const cutoffs = new WeakMap();
/** undici socket → the cutoff of the request whose headers it is about to write. */
const nextWrite = new WeakMap();

/** The `write` an instrumentation set on a socket, which the probe calls inside its own. */
const SET_WRITE = Symbol('wire-probe.set-write');
/** Set while the probe runs the socket's write: the inner call goes to the stream's own write. */
const INSIDE = Symbol('wire-probe.inside');
/** The clock when the bytes reached the stream's own write, after any instrumentation's look. */
const REACHED_AT = Symbol('wire-probe.reached-at');

function remember({ request }) {
  const cutoff = getDeadline(context.active())?.cutoffMono;
  if (typeof cutoff === 'number') cutoffs.set(request, cutoff);
}

/** A request write that went out: `askedAt` is judged, `reachedAt` only reported. */
function check(socket, cutoffMono, askedAt, reachedAt) {
  // Destroyed by then: the instrumentation stopped it before the bytes left.
  if (socket.destroyed) return;
  sends.checked++;
  const lateByMs = askedAt - cutoffMono;
  if (lateByMs > 0) {
    sends.late++;
    sends.latestMs = Math.max(sends.latestMs, lateByMs);
  } else if (reachedAt > cutoffMono) {
    sends.crossedAfterCheck++;
    sends.latestCrossedMs = Math.max(sends.latestCrossedMs, reachedAt - cutoffMono);
  }
}

function requestCutoff(socket, chunk) {
  const head = typeof chunk === 'string' ? chunk.slice(0, 64) : Buffer.isBuffer(chunk) ? chunk.toString('latin1', 0, 64) : '';
  if (!REQUEST_LINE.test(head)) return undefined;
  // undici: noted at sendHeaders, since its writes may run in another request's context.
  // node:http: written in the caller's own async context (inside request(), or on the
  // next tick once the agent hands over a socket; the hops' agents never queue).
  const cutoff = socket._httpMessage != null ? getDeadline(context.active())?.cutoffMono : nextWrite.get(socket);
  nextWrite.delete(socket);
  return typeof cutoff === 'number' ? cutoff : undefined;
}

/**
 * A socket still connecting sends the queued bytes once it connects: the
 * instrumentation holds them until its own 'connect' listener has looked at
 * the clock. Judged at the start of that event, before any listener (the
 * instrumentation's included) runs; whether they went is known once all have.
 * (Crossings after the look are measured on the socket.write path only.)
 */
function checkAtConnect(socket, cutoff) {
  socket.prependOnceListener('connect', () => {
    const at = performance.now();
    process.nextTick(() => check(socket, cutoff, at, at));
  });
}

/** Installs the probe. Call once, before any request. */
export function watchSends() {
  diagnosticsChannel.subscribe('undici:request:create', remember);
  // Published by undici right before it writes a request's headers on `socket`.
  diagnosticsChannel.subscribe('undici:client:sendHeaders', ({ request, socket }) => {
    const cutoff = cutoffs.get(request);
    if (cutoff !== undefined) nextWrite.set(socket, cutoff);
  });
  const streamWrite = net.Socket.prototype.write;
  function write(chunk) {
    // Called back from an instrumentation's wrapper, past its last look: the stream's own write.
    if (this[INSIDE] === true) {
      this[REACHED_AT] = performance.now();
      return streamWrite.apply(this, arguments);
    }
    // The clock first, before this probe allocates anything a garbage collection could stall on.
    const askedAt = performance.now();
    this[REACHED_AT] = undefined;
    const cutoff = requestCutoff(this, chunk);
    if (cutoff !== undefined && this.connecting) checkAtConnect(this, cutoff);
    const inner = this[SET_WRITE];
    let written;
    if (inner === undefined) {
      this[REACHED_AT] = askedAt;
      written = streamWrite.apply(this, arguments);
    } else {
      this[INSIDE] = true;
      try {
        written = inner.apply(this, arguments);
      } finally {
        this[INSIDE] = false;
      }
    }
    if (cutoff !== undefined && !this.connecting) check(this, cutoff, askedAt, this[REACHED_AT] ?? askedAt);
    return written;
  }
  // An accessor, so that the probe stays outside a `write` an instrumentation sets on a
  // socket (instrumentation/client/socket-guard.ts wraps the one it reads there, which is
  // this one): the probe's clock is read before the instrumentation's last look.
  Object.defineProperty(net.Socket.prototype, 'write', {
    configurable: true,
    enumerable: true,
    get: () => write,
    set(value) {
      this[SET_WRITE] = value === write ? undefined : value;
    },
  });
}
