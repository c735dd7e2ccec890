/** A real loopback HTTP server on port 0 that counts what reaches it. */
import { once } from 'node:events';
import { createServer, request, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface Fixture {
  url: string;
  /** Requests that reached the handler, in arrival order. */
  arrivals: { path: string; headers: IncomingMessage['headers'] }[];
  close(): Promise<void>;
}

export async function startFixture(
  handler: (req: IncomingMessage, res: ServerResponse) => void = (_req, res) => res.end('ok'),
): Promise<Fixture> {
  const arrivals: Fixture['arrivals'] = [];
  const server = createServer((req, res) => {
    arrivals.push({ path: req.url ?? '', headers: req.headers });
    handler(req, res);
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    arrivals,
    async close() {
      server.closeAllConnections();
      server.close();
      await once(server, 'close');
    },
  };
}

/** Sends one request and resolves with the status once the body is read. */
export function send(
  url: string,
  options: { method?: string; headers?: Record<string, string>; signal?: AbortSignal } = {},
): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method: options.method ?? 'GET', headers: options.headers, signal: options.signal }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
}
