import diagnosticsChannel from 'node:diagnostics_channel';
import type { Socket } from 'node:net';
import { context, type Context } from '@opentelemetry/api';
import { isTracingSuppressed } from '@opentelemetry/core';
import { getDeadline } from '../../src/context';
import { IGNORED_CALL, type OutgoingCall } from './call';
import { outgoingCallIn } from '../call/wire-context';
import { addMissingDeadlineHeaders, deadlineHeaderValues } from './deadline-headers';
import { stripDeadlineHeadersInList } from './strip-deadline';
import { HEADER_AT_MS } from '../../src/attributes';
import { RequestClassPatcher } from './request-class';
import { checkBeforeNextWrite, clearPendingWrite } from './socket-guard';
import { claimsEarlyReject, rawHeader } from './reply';
import { watchRejectBody } from './reply-watch';
import { undiciRequestUrl } from './undici-target';
import type { ResolvedConfig } from '../config';
import { HEADER_DEADLINE_EXPIRED } from '../names';

/** What we keep on an undici request we have seen. */
interface RequestState {
  /** The guarded call it belongs to, until the request closes. */
  call: OutgoingCall | undefined;
  /** undici's abort for this request on its connection, once it is about to be written. */
  abortWrite: ((reason: unknown) => void) | undefined;
  /** The connection its headers went to, while a last check may be armed on it. */
  socket: Socket | undefined;
}

interface RequestMessage {
  request: object;
}
interface SendHeadersMessage extends RequestMessage {
  socket?: Socket;
}
interface ResponseMessage extends RequestMessage {
  response?: { statusCode?: number; headers?: unknown[] };
}

type UndiciRequest = { headers?: unknown };

/**
 * The contexts new undici connections were opened in. undici publishes
 * `undici:client:beforeConnect` synchronously right before it opens the
 * socket, so the socket, and every callback undici runs from it, keeps the
 * context active there: that of whichever request opened the connection. A
 * request that waited in a dispatcher's queue (a Pool's, an Agent's pools')
 * is created from those callbacks when a connection frees up, in that context
 * and not its caller's; so is a redirect hop. Such a context says nothing
 * about the deadline of the request being created.
 */
const connectionContexts = new WeakSet<Context>();
const onBeforeConnect = (): void => void connectionContexts.add(context.active());

/**
 * The call a request being created belongs to, from the call marker `ctx`
 * holds. In a context a connection was opened in, a marker under the context
 * key may be the call of the request that opened the connection (a fetch,
 * which runs in a context of its own), still waiting for a redirect hop: the
 * request is tied to it only when it carries that call's own cutoff, as the
 * hop does. Another request with the same cutoff would be judged the same.
 */
function callOfRequest(request: UndiciRequest, marker: OutgoingCall | undefined, ctx: Context): OutgoingCall | undefined {
  if (marker === undefined || marker.settled) return undefined;
  if (!connectionContexts.has(ctx)) return marker;
  const atMs = rawHeader(request.headers as unknown[] | undefined, HEADER_AT_MS);
  return atMs === String(Math.floor(marker.deadline.expiresAtMs)) ? marker : undefined;
}

/** The request is over: its call lets go of it, and a last check still armed on its socket is dropped. */
function closeRequest(request: object, state: RequestState): void {
  const { call, socket } = state;
  state.call = undefined;
  state.socket = undefined;
  if (socket !== undefined) clearPendingWrite(socket, request);
  call?.requestClosed();
}

/**
 * Subscribes to the undici diagnostics channels. Node's bundled undici (global
 * fetch) and undici from npm are separate copies, but both publish on these
 * global channel names, so this is the one place that sees every request of
 * either, synchronously, in the caller's async context:
 * - `undici:request:create` adds the deadline headers a request lacks, or takes them out of one to a host off `propagateTo`, and ties the request to its call;
 * - `undici:client:sendHeaders` checks the cutoff before the write (and arms a last check inside it), and marks it as possibly received;
 * - `undici:request:headers` spots an early-reject reply before the span ends;
 * - `undici:request:trailers` / `undici:request:error` close it.
 * Returns the unsubscribe function.
 */
export function subscribeUndiciChannels(settings: () => ResolvedConfig): () => void {
  const states = new WeakMap<object, RequestState>();
  const stateOf = (request: object) => states.get(request);
  const requestClasses = new RequestClassPatcher({
    // undici calls a request's `onConnect` right before writing it. A request
    // can get there after its cutoff: it waited for a busy connection while a
    // blocked event loop kept the abort timer from running, or global fetch
    // dispatched it inside the fetch() call, before the call's guard was
    // armed. Reading the deadline's clock here aborts the deadline at once,
    // and the reason returned makes undici drop the request unwritten.
    beforeWrite: (request, abort) => {
      const state = stateOf(request);
      const call = state?.call;
      if (call === undefined || call.observe) return undefined;
      state!.abortWrite = abort;
      return call.deadline.aborted ? call.deadline.abortReason : undefined;
    },
    // The whole response has arrived: nothing is left on the network to cut.
    // The call lets go here, before undici publishes the end of the request:
    // a span ended by that message may read the deadline, and an abort
    // reaching the call then would destroy a body the caller already holds
    // whole (and may have finished reading, leaving no 'error' listener).
    beforeComplete: (request) => {
      const state = stateOf(request);
      if (state === undefined) return;
      closeRequest(request, state);
    },
  });

  const onCreate = (message: unknown) => {
    const { request } = message as RequestMessage;
    const ctx = context.active();
    const marker = outgoingCallIn(ctx) as OutgoingCall | typeof IGNORED_CALL | undefined;
    if (marker === IGNORED_CALL) return;
    requestClasses.patchClassOf(request);
    const call = callOfRequest(request as UndiciRequest, marker, ctx);
    // Every request is one hop: a redirect to a host off the list gets no deadline headers. Taking
    // them out is safe whichever context this is: a redirect hop copies its first hop's headers.
    const allowed = settings().propagatesTo;
    const involved = allowed !== undefined && (call !== undefined || (!isTracingSuppressed(ctx) && getDeadline(ctx) !== undefined));
    if (involved && !allowed(undiciRequestUrl(request))) {
      if (Array.isArray((request as UndiciRequest).headers)) stripDeadlineHeadersInList((request as UndiciRequest).headers as unknown[]);
    } else if (call !== undefined || !connectionContexts.has(ctx)) {
      // Created in its caller's context (its own call's dispatch always is). One created from a
      // connection's callbacks carries what its own options gave it, and no deadline from here.
      addMissingDeadlineHeaders(request, () => deadlineHeaderValues(ctx));
    }
    if (call === undefined) return;
    states.set(request, { call, abortWrite: undefined, socket: undefined });
    call.requestOpened();
  };
  // Published synchronously right before undici writes the headers: the last
  // point at which the write can still be given up. The cutoff may have passed
  // since onConnect (a GC pause, a slow header build); if so, undici's abort
  // destroys the socket, and the write that follows puts nothing on the wire.
  const onSendHeaders = (message: unknown) => {
    const { request, socket } = message as SendHeadersMessage;
    const state = stateOf(request);
    const call = state?.call;
    if (call === undefined) return;
    const abortWrite = state!.abortWrite;
    if (!call.observe && abortWrite !== undefined) {
      if (call.deadline.aborted) return abortWrite(call.deadline.abortReason);
      // undici still builds the header string before it writes: look once more inside the write.
      if (socket !== undefined) {
        state!.socket = socket;
        checkBeforeNextWrite(socket, { owner: request, deadline: call.deadline, abort: abortWrite, refused: () => (call.sent = false) });
      }
    }
    call.sent = true;
  };
  // The transport's span ends in the trailers channel, before the caller reads
  // the body: an early reject is judged on the body undici receives, so that
  // `not_started` lands on that span only when the reply is believed.
  const onResponseHeaders = (message: unknown) => {
    const { request, response } = message as ResponseMessage;
    const call = stateOf(request)?.call;
    if (call === undefined || call.observe || response === undefined) return;
    const statusCode = Number(response.statusCode);
    // Before scanning the raw header list twice: almost no reply has the refusal status.
    if (statusCode !== settings().rejectStatusCode) return;
    const raw = response.headers;
    const info = () => ({ transport: call.transport, method: call.method, url: undiciRequestUrl(request), statusCode });
    if (claimsEarlyReject(settings(), statusCode, rawHeader(raw, HEADER_DEADLINE_EXPIRED), rawHeader(raw, 'content-length'), info)) {
      watchRejectBody(request, () => call.recordNotStarted());
    }
  };
  const onClosed = (message: unknown) => {
    const { request } = message as RequestMessage;
    const state = stateOf(request);
    if (state !== undefined) closeRequest(request, state);
  };

  const subscriptions: [string, (message: unknown) => void][] = [
    ['undici:client:beforeConnect', onBeforeConnect],
    ['undici:request:create', onCreate],
    ['undici:client:sendHeaders', onSendHeaders],
    ['undici:request:headers', onResponseHeaders],
    ['undici:request:trailers', onClosed],
    ['undici:request:error', onClosed],
  ];
  for (const [name, handler] of subscriptions) diagnosticsChannel.subscribe(name, handler);
  return () => {
    for (const [name, handler] of subscriptions) diagnosticsChannel.unsubscribe(name, handler);
    requestClasses.restore();
  };
}
