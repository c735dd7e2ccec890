import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { appendFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { isOtlpRequest, spansFromOtlp, type OtlpRequest } from './otlp';
import type { LineageSpan } from './model';

/** A minimal OTLP/HTTP JSON trace receiver on loopback, optionally appending each request as a JSON line to a file. */

export interface OtlpReceiverOptions {
  host?: string;
  port?: number;
  /** Append every request as a JSON line to this file. */
  file?: string;
  /** Called with the spans of every accepted request, in arrival order. */
  onSpans?: (spans: LineageSpan[]) => void;
  /** Requests larger than this are refused with 413. Default 16 MiB. */
  maxBodyBytes?: number;
}

export interface OtlpReceiver {
  /** Base URL, e.g. `http://127.0.0.1:43125`: what `OTEL_EXPORTER_OTLP_ENDPOINT` takes. */
  url: string;
  /** The traces endpoint, `${url}/v1/traces`. */
  tracesUrl: string;
  requests: OtlpRequest[];
  spans(): LineageSpan[];
  close(): Promise<void>;
}

function reply(res: ServerResponse, status: number, body: object): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

function readBody(req: IncomingMessage, limit: number): Promise<Buffer | undefined> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size <= limit) return void chunks.push(chunk);
      resolve(undefined);
      req.destroy();
    });
    req.on('end', () => resolve(Buffer.concat(chunks)));
    req.on('error', reject);
  });
}

export async function startOtlpReceiver(options: OtlpReceiverOptions = {}): Promise<OtlpReceiver> {
  const limit = options.maxBodyBytes ?? 16 * 1024 * 1024;
  const requests: OtlpRequest[] = [];
  const server = createServer((req, res) => {
    handle(req, res).catch(() => {
      if (!res.headersSent) reply(res, 500, { message: 'receiver error' });
      else res.destroy();
    });
  });

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    if (req.method !== 'POST' || req.url?.split('?')[0] !== '/v1/traces') {
      return reply(res, 404, { message: 'only POST /v1/traces is served' });
    }
    const type = String(req.headers['content-type'] ?? '');
    if (!type.includes('json')) {
      req.resume();
      return reply(res, 415, { message: 'only OTLP/JSON is accepted: set OTEL_EXPORTER_OTLP_PROTOCOL=http/json' });
    }
    const body = await readBody(req, limit);
    if (body === undefined) return reply(res, 413, { message: `request larger than ${limit} bytes` });
    let doc: unknown;
    try {
      doc = JSON.parse(body.toString('utf8'));
    } catch {
      return reply(res, 400, { message: 'body is not valid JSON' });
    }
    if (!isOtlpRequest(doc)) return reply(res, 400, { message: 'body has no resourceSpans' });
    requests.push(doc);
    if (options.file !== undefined) appendFileSync(options.file, `${JSON.stringify(doc)}\n`);
    options.onSpans?.(spansFromOtlp(doc));
    reply(res, 200, {});
  }

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, options.host ?? '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const { address, port } = server.address() as AddressInfo;
  const host = address.includes(':') ? `[${address}]` : address;
  const url = `http://${host}:${port}`;
  return {
    url,
    tracesUrl: `${url}/v1/traces`,
    requests,
    spans: () => requests.flatMap(spansFromOtlp),
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
