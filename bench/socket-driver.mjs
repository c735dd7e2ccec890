// Drives the bench chain from its own process over plain keep-alive sockets:
// no load generator competes for the cores, and the driver's own cost is the
// same for every configuration.
import net from 'node:net';

export const CONNECTIONS = 16;

/**
 * Sends `total` requests over CONNECTIONS sockets, one at a time on each, each
 * with a budget of `budgetMs`; rejects on any non-200 reply. `onReply(done)`,
 * if given, is called after each reply with the number of replies so far.
 */
export function drive(port, total, budgetMs = 5000, onReply = undefined) {
  const request = Buffer.from(`GET / HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nx-deadline-remaining-ms: ${budgetMs}\r\n\r\n`);
  return new Promise((resolve, reject) => {
    let sent = 0;
    let done = 0;
    const sockets = [];
    const fail = (error) => {
      for (const socket of sockets) socket.destroy();
      reject(error);
    };
    for (let i = 0; i < CONNECTIONS; i++) {
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
        // Each reply is small and complete once its body `front+back` is in.
        for (let end = pending.indexOf('front+back'); end >= 0; end = pending.indexOf('front+back')) {
          if (!pending.startsWith('HTTP/1.1 200')) return fail(new Error(`unexpected reply: ${pending.slice(0, 40)}`));
          pending = pending.slice(end + 'front+back'.length);
          done++;
          onReply?.(done);
          if (done === total) resolve();
          next();
        }
        if (pending.startsWith('HTTP/1.1 ') && !pending.startsWith('HTTP/1.1 200')) fail(new Error(`unexpected reply: ${pending.slice(0, 40)}`));
      });
    }
  });
}

