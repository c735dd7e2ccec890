// Watches the moment each request of the load chain leaves this process: the
// socket write that carries its request line and headers, or, for a socket
// still connecting (node:http queues the write), the moment it connects. A
// request that leaves after the cutoff written in its own x-deadline-at-ms
// header was sent late, whatever happens to it later. This is the sender's
// side of "no request reaches the last hop after its cutoff", measured where
// the bytes go to the kernel rather than where the receiver's event loop gets
// round to them.
import net from 'node:net';

const REQUEST_LINE = /^(GET|POST) \/load\?/;
const AT_MS = /\r\nx-deadline-at-ms: *(\d+)/i;

/** Requests seen leaving, late ones among them, and the latest, in ms after its cutoff. */
export const sends = { checked: 0, late: 0, latestMs: 0 };

/**
 * Judged on one clock, the wall clock the header was written from. The sender
 * opened its deadline at a whole-ms Date.now() reading, so its true cutoff
 * lies in [expiresAtMs, expiresAtMs + 1), and the header holds expiresAtMs
 * rounded down: the cutoff is before atMs + 2. A whole-ms reading of at least
 * atMs + 2 is therefore surely past it; anything less cannot be told apart
 * from a send in time. (An earlier probe read performance.timeOrigin +
 * performance.now(), a second clock whose offset from Date.now() drifts by
 * milliseconds, and counted sends that were in time as late.)
 */
function check(socket, atMs) {
  // Destroyed by then: the instrumentation stopped it before the bytes left.
  if (socket.destroyed) return;
  sends.checked++;
  const lateByMs = Date.now() - (atMs + 1);
  if (lateByMs > 0) {
    sends.late++;
    sends.latestMs = Math.max(sends.latestMs, lateByMs);
  }
}

/** Installs the probe on net.Socket.prototype.write. Call once, before any request. */
export function watchSends() {
  const write = net.Socket.prototype.write;
  net.Socket.prototype.write = function (chunk, ...rest) {
    const head = typeof chunk === 'string' ? chunk.slice(0, 2048) : Buffer.isBuffer(chunk) ? chunk.toString('latin1', 0, 2048) : '';
    if (REQUEST_LINE.test(head)) {
      const atMs = Number(AT_MS.exec(head)?.[1]);
      if (Number.isFinite(atMs)) {
        // Registered before net's own 'connect' listener (added by the write below), which sends the queued bytes.
        if (this.connecting) this.once('connect', () => check(this, atMs));
        else check(this, atMs);
      }
    }
    return write.call(this, chunk, ...rest);
  };
}
