import { connect, createServer, type Server, type Socket } from 'node:net';

/**
 * A loopback TCP proxy in front of a database, to make its cancel connection
 * fail or arrive late while the statement's own connection works normally.
 */
export interface TcpProxy {
  port: number;
  /** New connections from now on wait `ms` before being forwarded. */
  delayNew(ms: number): void;
  /** Stops accepting: new connections are refused, open ones keep working. */
  refuseNew(): Promise<void>;
  close(): Promise<void>;
}

export async function startTcpProxy(targetPort: number): Promise<TcpProxy> {
  const sockets = new Set<Socket>();
  const timers = new Set<ReturnType<typeof setTimeout>>();
  let delayMs = 0;
  const server: Server = createServer((inbound) => {
    sockets.add(inbound);
    inbound.once('close', () => sockets.delete(inbound));
    inbound.pause();
    const forward = () => {
      const outbound = connect(targetPort, '127.0.0.1');
      sockets.add(outbound);
      outbound.once('close', () => sockets.delete(outbound));
      inbound.pipe(outbound).pipe(inbound);
      inbound.resume();
      outbound.on('error', () => inbound.destroy());
      inbound.on('error', () => outbound.destroy());
    };
    if (delayMs === 0) return forward();
    const timer = setTimeout(() => {
      timers.delete(timer);
      forward();
    }, delayMs);
    timers.add(timer);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;
  let listening = true;
  const stopListening = () =>
    new Promise<void>((resolve) => {
      if (!listening) return resolve();
      listening = false;
      server.close(() => resolve());
    });
  return {
    port,
    delayNew(ms) {
      delayMs = ms;
    },
    async refuseNew() {
      // server.close waits for open connections; resolve once it stops listening.
      listening = false;
      server.close();
      await new Promise((resolve) => setImmediate(resolve));
    },
    async close() {
      for (const timer of timers) clearTimeout(timer);
      for (const socket of sockets) socket.destroy();
      await stopListening();
    },
  };
}
