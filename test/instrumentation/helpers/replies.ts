import type { ServerResponse } from 'node:http';

/** Answers with `body` and its content-length, as a deadline-aware server's early reject does. */
export function sendReply(res: ServerResponse, status: number, body: string, headers: Record<string, string> = {}): void {
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)), ...headers });
  res.end(body);
}
