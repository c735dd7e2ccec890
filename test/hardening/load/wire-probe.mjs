// Watches the moment each request of the load chain leaves this process: the
// socket write that carries its request line and headers, or, for a socket
// still connecting (node:http queues the write), the moment it connects. A
// request that leaves after its deadline's cutoff was sent late, whatever
// happens to it later. This is the sender's side of "no request reaches the
// next hop after its cutoff", measured where the bytes go to the kernel
// rather than where the receiver's event loop gets round to them.
//
// Judged on one clock, against the exact cutoff: the monotonic cutoff of the
// deadline the request was made under (read from OTel context when the
// transport creates the request), compared with performance.now() at the
// write. An earlier probe compared timeOrigin + performance.now() with the
// whole-ms x-deadline-at-ms header, which comes from Date.now(): the two
// clocks drift apart by milliseconds, and sends in time were counted late.
import diagnosticsChannel from 'node:diagnostics_channel';
import net from 'node:net';
import { context } from '@opentelemetry/api';
import { getDeadline } from '../../../dist/esm/index.mjs';

const REQUEST_LINE = /^(GET|POST) \/load\?/;

/** Requests seen leaving, late ones among them, and the latest, in ms after its cutoff. */
export const sends = { checked: 0, late: 0, latestMs: 0 };

/** undici Request → the monotonic cutoff of the deadline it was created under. */
const cutoffs = new WeakMap();
/** undici socket → the cutoff of the request whose headers it is about to write. */
const nextWrite = new WeakMap();

function remember({ request }) {
  const cutoff = getDeadline(context.active())?.cutoffMono;
  if (typeof cutoff === 'number') cutoffs.set(request, cutoff);
}

function check(socket, cutoffMono, atMono) {
  // Destroyed by then: the instrumentation stopped it before the bytes left.
  if (socket.destroyed) return;
  sends.checked++;
  const lateByMs = atMono - cutoffMono;
  if (lateByMs > 0) {
    sends.late++;
    sends.latestMs = Math.max(sends.latestMs, lateByMs);
  }
}

/** Installs the probe. Call once, before any request. */
export function watchSends() {
  diagnosticsChannel.subscribe('undici:request:create', remember);
  // Published by undici right before it writes a request's headers on `socket`.
  diagnosticsChannel.subscribe('undici:client:sendHeaders', ({ request, socket }) => {
    const cutoff = cutoffs.get(request);
    if (cutoff !== undefined) nextWrite.set(socket, cutoff);
  });
  const write = net.Socket.prototype.write;
  net.Socket.prototype.write = function (chunk, ...rest) {
    // The clock first, before this probe allocates anything a garbage collection could stall on.
    const atMono = performance.now();
    const head = typeof chunk === 'string' ? chunk.slice(0, 64) : Buffer.isBuffer(chunk) ? chunk.toString('latin1', 0, 64) : '';
    if (REQUEST_LINE.test(head)) {
      // undici: noted at sendHeaders, since its writes may run in another request's context.
      // node:http: written in the caller's own async context (inside request(), or on the
      // next tick once the agent hands over a socket; the hops' agents never queue).
      const cutoff = this._httpMessage != null ? getDeadline(context.active())?.cutoffMono : nextWrite.get(this);
      nextWrite.delete(this);
      if (typeof cutoff === 'number') {
        // Registered before net's own 'connect' listener (added by the write below), which sends the queued bytes.
        if (this.connecting) this.once('connect', () => check(this, cutoff, performance.now()));
        else check(this, cutoff, atMono);
      }
    }
    return write.call(this, chunk, ...rest);
  };
}
