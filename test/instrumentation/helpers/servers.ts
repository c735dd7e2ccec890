import diagnosticsChannel from 'node:diagnostics_channel';
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

export interface Arrival {
  method: string;
  url: string;
  /** Every header line as received, names lower-cased, repeats kept. */
  headers: [string, string][];
  atEpochMs: number;
}

export interface CountingServer {
  url: string;
  port: number;
  /** TCP connections accepted. */
  connections: number;
  /** Requests whose headers arrived. */
  arrivals: Arrival[];
  /** How many times `name` arrived on request `index`. */
  headerCount(index: number, name: string): number;
  close(): Promise<void>;
}

export type Handler = (req: IncomingMessage, res: ServerResponse) => void;

/**
 * A loopback server on port 0 that counts connections and requests, so a test
 * can prove that nothing reached it. Arrivals are counted from Node's
 * `http.server.request.start` channel, before any 'request' listener (and so
 * before any server-side admission) runs.
 */
export async function startCountingServer(handler: Handler = (_req, res) => res.end('ok')): Promise<CountingServer> {
  const sockets = new Set<Socket>();
  const state = { connections: 0, arrivals: [] as Arrival[] };
  const server = http.createServer(handler);
  const onStart = (message: unknown) => {
    const { request: req, server: from } = message as { request: IncomingMessage; server: http.Server };
    if (from !== server) return;
    const headers: [string, string][] = [];
    for (let i = 0; i + 1 < req.rawHeaders.length; i += 2) headers.push([req.rawHeaders[i].toLowerCase(), req.rawHeaders[i + 1]]);
    state.arrivals.push({ method: req.method ?? '', url: req.url ?? '', headers, atEpochMs: Date.now() });
  };
  diagnosticsChannel.subscribe('http.server.request.start', onStart);
  server.on('connection', (socket: Socket) => {
    state.connections++;
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    get connections() {
      return state.connections;
    },
    arrivals: state.arrivals,
    headerCount(index, name) {
      return state.arrivals[index].headers.filter(([key]) => key === name).length;
    },
    async close() {
      diagnosticsChannel.unsubscribe('http.server.request.start', onStart);
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** Reads a node:http response body to a string. */
export function readBody(res: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    let body = '';
    res.setEncoding('utf8');
    res.on('data', (chunk: string) => (body += chunk));
    res.once('end', () => resolve(body));
    res.once('error', reject);
  });
}

/** Resolves with the error a node:http request emits, or rejects if it gets a response instead. */
export function requestError(req: http.ClientRequest): Promise<Error> {
  return new Promise((resolve, reject) => {
    req.once('error', resolve);
    req.once('response', (res) => {
      res.resume();
      reject(new Error(`unexpected response ${res.statusCode}`));
    });
  });
}

/** Resolves with the response of a node:http request, or rejects with its error. */
export function response(req: http.ClientRequest): Promise<IncomingMessage> {
  return new Promise((resolve, reject) => {
    req.once('error', reject);
    req.once('response', resolve);
  });
}
