/**
 * Stand-in OTLP collectors for the register entry's tests, counting what
 * arrives on the wire: an OTLP/HTTP one that accepts any body, a gRPC one
 * (HTTP/2 with an empty Export reply), and one that never answers.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createH2Server, type Http2Server, type ServerHttp2Stream } from 'node:http2';
import type { AddressInfo } from 'node:net';

export interface CountingCollector {
  url: string;
  /** Requests by `path content-type`, e.g. `/v1/traces application/x-protobuf`. */
  arrivals(): Record<string, number>;
  close(): Promise<void>;
}

function count(into: Record<string, number>, key: string): void {
  into[key] = (into[key] ?? 0) + 1;
}

async function listen(server: Server | Http2Server): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

/** OTLP/HTTP: counts each POST and answers 200 with an empty body (a valid empty response in both encodings). */
export async function startHttpCollector(options: { answer: boolean } = { answer: true }): Promise<CountingCollector> {
  const seen: Record<string, number> = {};
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    count(seen, `${req.url} ${req.headers['content-type']}`);
    req.resume();
    // The silent one holds the request open until close() ends it.
    if (options.answer) req.on('end', () => res.writeHead(200, { 'content-type': String(req.headers['content-type']) }).end());
  });
  const url = await listen(server);
  return {
    url,
    arrivals: () => ({ ...seen }),
    close: () => {
      server.closeAllConnections();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}

/** OTLP/gRPC: counts each call by its path and answers with an empty message and grpc-status 0. */
export async function startGrpcCollector(): Promise<CountingCollector> {
  const seen: Record<string, number> = {};
  const sessions = new Set<{ destroy(): void }>();
  const server = createH2Server();
  server.on('session', (session) => {
    sessions.add(session);
    session.once('close', () => sessions.delete(session));
  });
  server.on('stream', (stream: ServerHttp2Stream, headers) => {
    count(seen, `${headers[':path']} ${headers['content-type']}`);
    stream.resume();
    stream.on('end', () => {
      stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
      stream.once('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0' }));
      // One uncompressed, empty message: flag 0, length 0.
      stream.end(Buffer.alloc(5));
    });
  });
  const url = await listen(server);
  return {
    url,
    arrivals: () => ({ ...seen }),
    close: () => {
      for (const session of sessions) session.destroy();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}
