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

type RequestMessage = { request: object };
type SendHeadersMessage = RequestMessage & { socket?: Socket };
type ResponseMessage = RequestMessage & { response?: { statusCode?: number; headers?: unknown[] } };

type UndiciRequest = { headers?: unknown };

/**
 * The contexts new undici connections were opened in (`beforeConnect` runs
 * synchronously before the socket opens, and its callbacks keep that context).
 * A request that waited in a dispatcher's queue, or a redirect hop, is created
 * from those callbacks: such a context says nothing about its deadline.
 */
const connectionContexts = new WeakSet<Context>();
const onBeforeConnect = (): void => void connectionContexts.add(context.active());

/**
 * The call a request being created belongs to, from the call marker `ctx`
 * holds. In a connection's context the marker may be the call that opened it
 * (a fetch waiting for a redirect hop): the request is tied to it only when it
 * carries that call's own cutoff, as the hop does.
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
 * Subscribes to the undici diagnostics channels, where both Node's bundled
 * undici (global fetch) and undici from npm publish every request,
 * synchronously, in the caller's context. Returns the unsubscribe function.
 */
export function subscribeUndiciChannels(settings: () => ResolvedConfig): () => void {
  const states = new WeakMap<object, RequestState>();
  const requestClasses = new RequestClassPatcher({
    // A request can reach its write after its cutoff (a blocked loop kept the timer
    // from running, or fetch dispatched it before its guard was armed): reading
    // `aborted` checks the clock, and the reason returned drops the request unwritten.
    beforeWrite: (request, abort) => {
      const state = states.get(request);
      const call = state?.call;
      if (call === undefined || call.observe) return undefined;
      state!.abortWrite = abort;
      return call.deadline.aborted ? call.deadline.abortReason : undefined;
    },
    // The whole response is in: the call lets go before the end is published, so a
    // later abort cannot destroy a body the caller already holds whole.
    beforeComplete: (request) => {
      const state = states.get(request);
      if (state !== undefined) closeRequest(request, state);
    },
  });

  const onCreate = (message: unknown) => {
    const { request } = message as RequestMessage;
    const ctx = context.active();
    const marker = outgoingCallIn(ctx) as OutgoingCall | typeof IGNORED_CALL | undefined;
    if (marker === IGNORED_CALL) return;
    requestClasses.patchClassOf(request);
    const call = callOfRequest(request as UndiciRequest, marker, ctx);
    // Every request is one hop: a redirect to a host off the list gets no deadline headers.
    const allowed = settings().propagatesTo;
    const involved = allowed !== undefined && (call !== undefined || (!isTracingSuppressed(ctx) && getDeadline(ctx) !== undefined));
    if (involved && !allowed(undiciRequestUrl(request))) {
      if (Array.isArray((request as UndiciRequest).headers)) stripDeadlineHeadersInList((request as UndiciRequest).headers as unknown[]);
    } else if (call !== undefined || !connectionContexts.has(ctx)) {
      // Created in its caller's context; one created from a connection's callbacks gets no deadline from here.
      addMissingDeadlineHeaders(request, () => deadlineHeaderValues(ctx));
    }
    if (call === undefined) return;
    states.set(request, { call, abortWrite: undefined, socket: undefined });
    call.requestOpened();
  };
  // Right before undici writes the headers: the last point the write can be given up.
  const onSendHeaders = (message: unknown) => {
    const { request, socket } = message as SendHeadersMessage;
    const state = states.get(request);
    const call = state?.call;
    if (call === undefined) return;
    const { abortWrite } = state!;
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
  // The transport's span ends before the caller reads the body: an early reject is judged
  // on the body undici receives, so `not_started` lands on that span only when believed.
  const onResponseHeaders = (message: unknown) => {
    const { request, response } = message as ResponseMessage;
    const call = states.get(request)?.call;
    if (call === undefined || call.observe || response === undefined) return;
    const statusCode = Number(response.statusCode);
    if (statusCode !== settings().rejectStatusCode) return;
    const raw = response.headers;
    const info = () => ({ transport: call.transport, method: call.method, url: undiciRequestUrl(request), statusCode });
    if (claimsEarlyReject(settings(), statusCode, rawHeader(raw, HEADER_DEADLINE_EXPIRED), rawHeader(raw, 'content-length'), info)) {
      watchRejectBody(request, () => call.recordNotStarted());
    }
  };
  const onClosed = (message: unknown) => {
    const { request } = message as RequestMessage;
    const state = states.get(request);
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
