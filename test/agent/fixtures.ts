import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/** One request as a fake dependency saw it: what arrived, never what it said. */
export interface Arrival {
  method: string;
  path: string;
  headers: IncomingMessage['headers'];
  atMs: number;
}

export interface FakeDependency {
  url: string;
  arrivals: Arrival[];
  close(): Promise<void>;
}

/**
 * A real HTTP server on 127.0.0.1, port 0, that records every request before
 * handing it to `handler`. Closing also drops kept-alive sockets so the test
 * process can exit.
 */
export async function startDependency(
  handler: (req: IncomingMessage, res: ServerResponse, arrival: Arrival) => void,
): Promise<FakeDependency> {
  const arrivals: Arrival[] = [];
  const server: Server = createServer((req, res) => {
    const arrival = { method: req.method ?? '', path: req.url ?? '', headers: req.headers, atMs: Date.now() };
    arrivals.push(arrival);
    handler(req, res, arrival);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    arrivals,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** Answers with a small JSON body. */
export function reply(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), ...headers });
  res.end(text);
}

export { watchTimers } from '../helpers/timers';
