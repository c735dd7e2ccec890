import diagnosticsChannel from 'node:diagnostics_channel';
import { context } from '@opentelemetry/api';
import { isTracingSuppressed } from '@opentelemetry/core';
import { getDeadline } from '../../src/context';
import { CALL_KEY, IGNORED_CALL, type OutgoingCall } from './call';
import { isDeadlineHeaderName, repeatsDeadlineHeader, settleUndiciRequestHeaders } from './headers';
import { RequestClassPatcher } from './request-class';
import { isRejectReplyRaw } from './reply';

/** What we keep on an undici request we have seen. */
interface RequestState {
  /** Its deadline headers are final: later subscribers may not add them again. */
  headersSettled: boolean;
  /** The guarded call it belongs to, until the request closes. */
  call: OutgoingCall | undefined;
  /** undici's abort for this request on its connection, once it is about to be written. */
  abortWrite: ((reason: unknown) => void) | undefined;
}

interface RequestMessage {
  request: object;
}
interface ResponseMessage extends RequestMessage {
  response?: { headers?: unknown[] };
}

type UndiciRequest = { headers?: unknown };

/** True while a guarded call (ours, with the deadline headers in its options) is being dispatched. */
function inGuardedCall(): boolean {
  const marker = context.active().getValue(CALL_KEY) as OutgoingCall | typeof IGNORED_CALL | undefined;
  return marker !== undefined && marker !== IGNORED_CALL && !marker.settled;
}

/**
 * Subscribes to the undici diagnostics channels. Node's bundled undici (global
 * fetch) and undici from npm are separate copies, but both publish on these
 * global channel names, so this is the one place that sees every request of
 * either, synchronously, in the caller's async context:
 * - `undici:request:create` makes the deadline headers appear once and ties the request to its call;
 * - `undici:client:sendHeaders` checks the cutoff one last time before the write, and marks it as possibly received;
 * - `undici:request:headers` spots an early-reject reply before the span ends;
 * - `undici:request:trailers` / `undici:request:error` close it.
 * Returns the unsubscribe function.
 */
export function subscribeUndiciChannels(): () => void {
  // Per request, kept on the request object under a key of this subscription's
  // own: a WeakMap entry per request costs more in garbage collection.
  const stateKey = Symbol('otel-deadline.undici-request');
  type Tracked = { [key: symbol]: RequestState | undefined };
  const stateOf = (request: object) => (request as Tracked)[stateKey];
  const callOf = (request: object) => stateOf(request)?.call;
  const requestClasses = new RequestClassPatcher({
    dropHeader: (request, name, value) => {
      if (!isDeadlineHeaderName(name)) return false;
      if (stateOf(request)?.headersSettled === true) return true;
      // A subscriber ahead of ours (instrumentation-undici registered before
      // us) injects through a global propagator while the request is being
      // created: for a guarded call, whose options carried the headers, that
      // is a repeat. Dropped now, the list needs no rewrite in onCreate.
      return inGuardedCall() && repeatsDeadlineHeader((request as UndiciRequest).headers, name, value);
    },
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
  });

  const onCreate = (message: unknown) => {
    const { request } = message as RequestMessage;
    const ctx = context.active();
    const marker = ctx.getValue(CALL_KEY) as OutgoingCall | typeof IGNORED_CALL | undefined;
    if (marker === IGNORED_CALL) return;
    requestClasses.patchClassOf(request);
    const contextFor = () => (isTracingSuppressed(ctx) || getDeadline(ctx) === undefined ? undefined : ctx);
    const headersSettled = settleUndiciRequestHeaders(request, contextFor);
    const call = marker !== undefined && !marker.settled ? marker : undefined;
    if (!headersSettled && call === undefined) return;
    (request as Tracked)[stateKey] = { headersSettled, call, abortWrite: undefined };
    call?.requestOpened();
  };
  // Published synchronously right before undici writes the headers: the last
  // point at which the write can still be given up. The cutoff may have passed
  // since onConnect (a GC pause, a slow header build); if so, undici's abort
  // destroys the socket, and the write that follows puts nothing on the wire.
  const onSendHeaders = (message: unknown) => {
    const state = stateOf((message as RequestMessage).request);
    const call = state?.call;
    if (call === undefined) return;
    if (!call.observe && state!.abortWrite !== undefined && call.deadline.aborted) return state!.abortWrite(call.deadline.abortReason);
    call.sent = true;
  };
  const onResponseHeaders = (message: unknown) => {
    const { request, response } = message as ResponseMessage;
    const call = callOf(request);
    if (call !== undefined && isRejectReplyRaw(response?.headers)) call.markRejectedByServer();
  };
  const onClosed = (message: unknown) => {
    const state = stateOf((message as RequestMessage).request);
    if (state?.call === undefined) return;
    const { call } = state;
    state.call = undefined;
    call.requestClosed();
  };

  const subscriptions: [string, (message: unknown) => void][] = [
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
