import { connect, createServer, type Socket } from 'node:net';

/**
 * A loopback TCP proxy in front of MariaDB that can add latency to the
 * connections opened from some moment on: every chunk a client sends on
 * them reaches the server `ms` later, in order. The statement connections a
 * test opens first stay fast; the KILL connection the guard opens at its
 * first cutoff is slow on every KILL it sends, so a statement that ends
 * near its cutoff ends before its KILL lands.
 */
export interface LatencyProxy {
  port: number;
  /** Connections accepted from now on carry `ms` of latency towards the server. */
  slowNew(ms: number): void;
  close(): Promise<void>;
}

export async function startLatencyProxy(targetPort: number): Promise<LatencyProxy> {
  const sockets = new Set<Socket>();
  const timers = new Set<ReturnType<typeof setTimeout>>();
  let latencyMs = 0;
  const track = (socket: Socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
    socket.on('error', () => socket.destroy());
  };
  const server = createServer((inbound) => {
    const outbound = connect(targetPort, '127.0.0.1');
    track(inbound);
    track(outbound);
    inbound.once('close', () => outbound.destroy());
    outbound.once('close', () => inbound.destroy());
    outbound.pipe(inbound);
    const delay = latencyMs;
    inbound.on('data', (chunk: Buffer) => {
      if (delay === 0) return void outbound.write(chunk);
      const timer = setTimeout(() => {
        timers.delete(timer);
        outbound.write(chunk);
      }, delay);
      timers.add(timer);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as { port: number }).port,
    slowNew(ms) {
      latencyMs = ms;
    },
    async close() {
      for (const timer of timers) clearTimeout(timer);
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
