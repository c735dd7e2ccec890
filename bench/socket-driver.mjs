// Drives the HTTP chain over plain keep-alive sockets: a few lines of code
// whose own cost is small and the same in every mode, where a load generator
// would compete for the cores (and, under callgrind, be counted).
import net from 'node:net';

export const CONNECTIONS = 16;

/**
 * Sends `total` POST requests with the JSON `body` over CONNECTIONS sockets,
 * one at a time on each, each with a budget of `budgetMs`; rejects on any
 * reply but 200.
 */
export function drive(port, total, budgetMs, body) {
  const request = Buffer.from(
    `POST / HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n` +
      `x-deadline-remaining-ms: ${budgetMs}\r\n\r\n${body}`,
  );
  return new Promise((resolve, reject) => {
    let sent = 0;
    let done = 0;
    const sockets = [];
    const fail = (error) => {
      for (const socket of sockets) socket.destroy();
      reject(error);
    };
    for (let i = 0; i < Math.min(CONNECTIONS, total); i++) {
      const socket = net.connect(port, '127.0.0.1');
      sockets.push(socket);
      socket.setNoDelay(true);
      let pending = '';
      const next = () => {
        if (sent < total) {
          sent++;
          socket.write(request);
        } else socket.end();
      };
      socket.on('connect', next);
      socket.on('error', fail);
      socket.on('data', (chunk) => {
        pending += chunk.toString('latin1');
        // A reply is complete once its head and content-length bytes of body are in (JSON, ASCII here).
        for (;;) {
          const headEnd = pending.indexOf('\r\n\r\n');
          if (headEnd < 0) return;
          if (!pending.startsWith('HTTP/1.1 200')) return fail(new Error(`unexpected reply: ${pending.slice(0, 200)}`));
          const length = Number(/\r\ncontent-length: (\d+)/i.exec(pending.slice(0, headEnd))?.[1]);
          if (!(length >= 0)) return fail(new Error(`reply without content-length: ${pending.slice(0, headEnd)}`));
          if (pending.length < headEnd + 4 + length) return;
          pending = pending.slice(headEnd + 4 + length);
          done++;
          if (done === total) resolve();
          next();
        }
      });
    }
  });
}
