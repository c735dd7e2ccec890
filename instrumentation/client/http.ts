import http from 'node:http';
import https from 'node:https';
import { Socket } from 'node:net';
import { context } from '@opentelemetry/api';
import { activeClientSpan, beginCall, recordRefusal } from './begin';
import type { OutgoingCall } from './call';
import type { ClientHost } from '../call/host';
import { checkBeforeNextWrite, clearPendingWrite } from './socket-guard';
import { headersWithDeadline } from './deadline-headers';
import { headersWithoutDeadline } from './strip-deadline';
import { claimsEarlyReject, parseRejectBody } from './reply';
import { errorFromClaim } from '../call/reject-claim';
import { HEADER_DEADLINE_EXPIRED } from '../names';
import type { ResolvedConfig } from '../config';
import { peekBody } from './peek-body';

type AnyFunction = (this: unknown, ...args: unknown[]) => unknown;
type Options = Record<string, unknown>;

/** http.request's three call shapes, `(url)`, `(url, options)`, `(options)`, each with an optional callback. */
interface RequestArgs {
  url: string | URL | undefined;
  options: Options | undefined;
  callback: unknown;
}

function parseArgs(args: unknown[]): RequestArgs | undefined {
  const [first, second, third] = args;
  if (typeof first === 'string' || first instanceof URL) {
    if (typeof second === 'object' && second !== null) return { url: first, options: second as Options, callback: third };
    return { url: first, options: undefined, callback: second };
  }
  if (typeof first === 'object' && first !== null) return { url: undefined, options: first as Options, callback: second };
  return undefined;
}

function buildArgs(parsed: RequestArgs, extra: Options): unknown[] {
  const options = { ...parsed.options, ...extra };
  const args: unknown[] = parsed.url === undefined ? [options] : [parsed.url, options];
  if (parsed.callback !== undefined) args.push(parsed.callback);
  return args;
}

function urlOf(parsed: RequestArgs, protocol: string): string | undefined {
  if (parsed.url !== undefined) return String(parsed.url);
  const o = parsed.options ?? {};
  const host = o.hostname ?? o.host ?? 'localhost';
  return `${String(o.protocol ?? protocol)}//${String(host)}${o.port === undefined ? '' : `:${String(o.port)}`}${String(o.path ?? '/')}`;
}

/** An agent whose one connection fails at once (public `createConnection`): a refused request errors and closes without I/O. */
function refusingAgent(protocol: 'http:' | 'https:', error: Error): http.Agent {
  const agent = protocol === 'https:' ? new https.Agent() : new http.Agent();
  agent.createConnection = () => {
    const socket = new Socket();
    process.nextTick(() => socket.destroy(error));
    return socket;
  };
  return agent;
}

function refusedRequest(protocol: 'http:' | 'https:', parsed: RequestArgs, error: Error, isGet: boolean): http.ClientRequest {
  const request = new (http.ClientRequest as unknown as new (...args: unknown[]) => http.ClientRequest)(
    ...buildArgs(parsed, { agent: refusingAgent(protocol, error) }),
  );
  if (isGet) request.end();
  return request;
}

/**
 * A request destroyed while queued for a pooled socket errors only once some socket frees up: take it out of the queue
 * and run ClientRequest's socket-less destroy now. Private node:http parts (docs/internals.md); exported for its test.
 */
export function failQueuedRequest(request: http.ClientRequest): void {
  const agent = (request as unknown as { agent?: unknown }).agent as (http.Agent & { requests?: Record<string, unknown[]> }) | undefined;
  const queues = agent?.requests;
  if (queues === undefined) return;
  for (const [name, queue] of Object.entries(queues)) {
    const index = queue.indexOf(request);
    if (index < 0) continue;
    queue.splice(index, 1);
    if (queue.length === 0) delete queues[name];
    (request as unknown as { onSocket(socket: null): void }).onSocket(null);
    return;
  }
}

function abortRequest(request: http.ClientRequest, reason: unknown): void {
  // A request that is over may still name a kept-alive socket now serving another: not ours to destroy.
  const socket = request.socket as (Socket & { _httpMessage?: unknown }) | null;
  if (socket != null && socket._httpMessage !== request) return;
  const response = (request as unknown as { res?: http.IncomingMessage | null }).res;
  // The whole response is in: nothing is left on the network, and the caller may still read it.
  if (response?.complete === true) return;
  // Destroying the response first makes a reader of the body see our reason, not a generic "aborted".
  if (response != null) response.destroy(reason as Error);
  request.destroy(reason as Error);
  if (request.socket == null) failQueuedRequest(request);
}

function hasBodyHeaders(request: http.ClientRequest): boolean {
  const length = Number(request.getHeader('content-length'));
  return length > 0 || request.getHeader('transfer-encoding') !== undefined;
}

/**
 * Turns an early-reject reply we believe into its error: 'response' (and 'close') is held while the small body is read;
 * a well-formed claim emits 'error' instead, anything else puts the bytes back and delivers the response as it came.
 */
function convertRejectReplies(request: http.ClientRequest, call: OutgoingCall, operation: string, settings: ResolvedConfig, url: string | undefined): void {
  const emit = request.emit;
  let state: 'idle' | 'reading' | 'done' = 'idle';
  let closeHeld = false;
  request.emit = function (this: http.ClientRequest, event: string | symbol, ...args: unknown[]): boolean {
    if (event === 'response' && state === 'idle') {
      const response = args[0] as http.IncomingMessage;
      const statusCode = response.statusCode ?? 0;
      const info = () => ({ transport: 'http' as const, method: call.method, url, statusCode });
      if (claimsEarlyReject(settings, statusCode, response.headers[HEADER_DEADLINE_EXPIRED], response.headers['content-length'], info)) {
        state = 'reading';
        peekBody(response, Number(response.headers['content-length']), (bytes, putBack) => {
          const claim = parseRejectBody(bytes);
          state = 'done';
          if (claim === undefined) {
            putBack();
            emit.call(this, 'response', response);
          } else {
            call.recordNotStarted();
            response.resume();
            emit.call(this, 'error', errorFromClaim(operation, call.deadline, claim));
          }
          if (closeHeld) emit.call(this, 'close');
        });
        return true;
      }
    }
    if (event === 'close' && state === 'reading') {
      closeHeld = true;
      return false;
    }
    return emit.call(this, event, ...args);
  } as typeof request.emit;
}

function guardRequest(request: http.ClientRequest, call: OutgoingCall, operation: string, settings: ResolvedConfig, url: string | undefined): void {
  request.once('socket', (socket: Socket) => {
    const markSent = (connected: boolean) => {
      if (!call.hasBody) call.hasBody = hasBodyHeaders(request);
      if (call.observe) return void (call.sent = true);
      // Reading `aborted` checks the clock (the timer may not have run yet): past the cutoff it aborts now, unwritten.
      if (call.deadline.aborted) return;
      call.sent = true;
      // Corked since the socket was assigned: the bytes go now, right after that look.
      if (connected) socket.uncork();
      // On a socket it already had, node:http builds the headers before socket.write: look once more in there.
      else checkBeforeNextWrite(socket, { owner: request, deadline: call.deadline, abort: (reason) => abortRequest(request, reason), refused: () => (call.sent = false) });
    };
    if (socket.connecting) {
      // node:http writes to a connecting socket at once and net sends the bytes on 'connect':
      // corked, they stay in the socket until the look in this listener lets them go.
      if (!call.observe) socket.cork();
      socket.once('connect', () => markSent(true));
    } else markSent(false);
  });
  // One 'close' listener per request: it also drops a last-write check still armed on the socket.
  request.once('close', () => {
    if (request.socket != null) clearPendingWrite(request.socket, request);
    call.settle();
  });
  if (!call.observe) convertRejectReplies(request, call, operation, settings, url);
  call.armFor((reason) => abortRequest(request, reason));
}

/** Set while our wrapper runs the original synchronously, so a nested call through another of our wrappers passes. */
let depth = 0;

/**
 * Wraps node:http / node:https `request` or `get`: under a deadline the call is refused with a request that fails
 * without a connection, or gets the deadline headers and is destroyed at the cutoff wherever it is.
 */
export function makeHttpWrapper(host: ClientHost, protocol: 'http:' | 'https:', isGet: boolean) {
  return (original: AnyFunction) =>
    function (this: unknown, ...args: unknown[]): unknown {
      const parsed = depth > 0 ? undefined : parseArgs(args);
      if (parsed === undefined) return original.apply(this, args);
      const ctx = context.active();
      const method = String(parsed.options?.method ?? 'GET').toUpperCase();
      const decision = beginCall(
        host.settings,
        { transport: 'http', method, hasBody: false, url: () => urlOf(parsed, protocol) },
        ctx,
      );
      if (decision.kind === 'pass') {
        if (decision.context === undefined) return original.apply(this, args);
        // An excluded call: deadline headers an http instrumentation outside ours injected come out.
        const headers = parsed.options?.headers;
        const callArgs = headers === undefined ? args : buildArgs(parsed, { headers: headersWithoutDeadline(headers) });
        return context.with(decision.context, () => original.apply(this, callArgs));
      }
      if (decision.kind === 'refuse') {
        recordRefusal(host.tracer, ctx, method, decision.error);
        return refusedRequest(protocol, parsed, decision.error, isGet);
      }
      const { call } = decision;
      // An http instrumentation wrapping outside us has its client span active here.
      const covering = activeClientSpan(ctx);
      if (covering !== undefined) call.addSpan(covering);
      // Off the propagateTo list: none, and out with any an http instrumentation wrapping outside ours injected.
      const headers = parsed.options?.headers;
      const callArgs = buildArgs(parsed, { headers: decision.headers === undefined ? headersWithoutDeadline(headers) : headersWithDeadline(headers, decision.headers) });
      let request: http.ClientRequest;
      depth++;
      try {
        request = context.with(decision.context, () => original.apply(this, callArgs)) as http.ClientRequest;
      } finally {
        depth--;
      }
      guardRequest(request, call, `http ${method}`, host.settings, urlOf(parsed, protocol));
      return request;
    };
}
