import { context } from '@opentelemetry/api';
import { beginCall, recordRefusal } from './begin';
import type { OutgoingCall } from './call';
import type { ClientHost } from './host';
import { errorFromReply, isRejectValue, MAX_REPLY_BODY_BYTES } from './reply';
import { HEADER_DEADLINE_EXPIRED } from '../names';

type FetchFunction = (input: unknown, init?: Record<string, unknown>) => Promise<FetchResponse>;

interface FetchResponse {
  headers: { get(name: string): string | null };
  text(): Promise<string>;
  body?: { cancel(): Promise<void> } | null;
}

interface RequestLike {
  url?: string;
  method?: string;
  signal?: AbortSignal;
  body?: unknown;
}

function asRequest(input: unknown): RequestLike | undefined {
  return typeof input === 'object' && input !== null && !(input instanceof URL) && 'method' in input
    ? (input as RequestLike)
    : undefined;
}

async function rejectReplyError(response: FetchResponse, call: OutgoingCall, operation: string): Promise<Error> {
  const length = Number(response.headers.get('content-length'));
  let body: string | undefined;
  if (Number.isFinite(length) && length <= MAX_REPLY_BODY_BYTES) body = await response.text().catch(() => undefined);
  else await response.body?.cancel().catch(() => {});
  return errorFromReply(operation, call.deadline, body);
}

/**
 * Wraps a WHATWG fetch (global fetch, or undici's). Under an active deadline
 * the call is refused before anything is sent, or runs with one signal that
 * aborts at the cutoff or when the caller's own signal aborts, whichever comes
 * first. fetch rejects with the signal's reason as is, so the rejection (and
 * a body read interrupted later) is the DeadlineExceededError itself, not its
 * `cause`. The headers are set in the undici channel, not here.
 */
export function makeFetchWrapper(host: ClientHost, transport: 'fetch' | 'undici') {
  return (original: FetchFunction) =>
    function fetch(this: unknown, input: unknown, init?: Record<string, unknown>): Promise<FetchResponse> {
      const ctx = context.active();
      const request = asRequest(input);
      const method = String(init?.method ?? request?.method ?? 'GET').toUpperCase();
      const callerSignal = (init?.signal ?? request?.signal) as AbortSignal | undefined;
      const decision = beginCall(
        host.settings,
        {
          transport,
          method,
          hasBody: init?.body != null || request?.body != null,
          url: () => (request?.url ?? String(input)),
          callerSignal: callerSignal instanceof AbortSignal ? callerSignal : undefined,
        },
        ctx,
      );
      if (decision.kind === 'pass') {
        if (decision.context === undefined) return original.call(this, input, init);
        return context.with(decision.context, () => original.call(this, input, init));
      }
      if (decision.kind === 'refuse') {
        recordRefusal(host.tracer, ctx, method, decision.error);
        return Promise.reject(decision.error);
      }
      const { call } = decision;
      let options = init;
      if (!call.observe) {
        const controller = new AbortController();
        call.arm((reason) => controller.abort(reason));
        options = { ...init, signal: controller.signal };
      }
      const operation = `${transport} ${method}`;
      return context.with(decision.context, () => original.call(this, input, options)).then(
        async (response) => {
          if (!call.observe && isRejectValue(response.headers.get(HEADER_DEADLINE_EXPIRED))) {
            call.markRejectedByServer();
            const error = await rejectReplyError(response, call, operation);
            call.apiSettled();
            throw error;
          }
          call.apiSettled();
          return response;
        },
        (error: unknown) => {
          call.apiSettled();
          throw error;
        },
      );
    };
}
