import { ServerResponse } from 'node:http';

/**
 * Answers with `body` and its content-length, as a deadline-aware server's
 * early reject does. It stands for another server's reply: its headers go
 * out through ServerResponse's own writeHead, past the per-response wrapper
 * with which this process's server instrumentation restates an
 * `x-deadline-expired` its handlers send (instrumentation/server/forwarded-marker.ts),
 * as a refusal written by that server's admission would.
 */
export function sendReply(res: ServerResponse, status: number, body: string, headers: Record<string, string> = {}): void {
  ServerResponse.prototype.writeHead.call(res, status, { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)), ...headers });
  res.end(body);
}
