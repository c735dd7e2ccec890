import { context } from '@opentelemetry/api';
import { beginCall, recordRefusal } from './begin';
import type { ClientHost } from '../call/host';
import { claimsEarlyReject, parseRejectBody, readSmallBody } from './reply';
import { errorFromClaim, type RejectClaim } from '../call/reject-claim';
import { HEADER_DEADLINE_EXPIRED } from '../names';
import type { ResolvedConfig } from '../config';
import type { OutgoingCall } from './call';
import { fetchHeadersWithDeadline } from './deadline-headers';

type FetchFunction = (input: unknown, init?: Record<string, unknown>) => Promise<FetchResponse>;

interface FetchResponse {
  status: number;
  url?: string;
  headers: { get(name: string): string | null };
  body?: (AsyncIterable<Uint8Array> & { cancel?(): Promise<void> }) | null;
  clone(): FetchResponse;
}

interface RequestLike {
  url?: string;
  method?: string;
  signal?: AbortSignal;
  body?: unknown;
  headers?: unknown;
}

function asRequest(input: unknown): RequestLike | undefined {
  return typeof input === 'object' && input !== null && !(input instanceof URL) && 'method' in input
    ? (input as RequestLike)
    : undefined;
}

/** What an early-reject reply we believe claims; the body is read from a clone, so any other goes back untouched. */
async function rejectClaimOf(settings: ResolvedConfig, call: OutgoingCall, transport: 'fetch' | 'undici', requestUrl: string, response: FetchResponse): Promise<RejectClaim | undefined> {
  const info = () => ({ transport, method: call.method, url: response.url || requestUrl, statusCode: response.status });
  const { headers } = response;
  if (!claimsEarlyReject(settings, response.status, headers.get(HEADER_DEADLINE_EXPIRED), headers.get('content-length'), info)) return undefined;
  const read = await readSmallBody(response.clone().body);
  return read.error === undefined ? parseRejectBody(read.bytes) : undefined;
}

/**
 * Wraps a WHATWG fetch (global fetch, or undici's). Under an active deadline
 * the call is refused before anything is sent, or runs with one signal that
 * aborts at the cutoff or with the caller's own; fetch rejects with that
 * signal's reason, so the error is the deadline's own.
 */
export function makeFetchWrapper(host: ClientHost, transport: 'fetch' | 'undici') {
  return (original: FetchFunction) =>
    function fetch(this: unknown, input: unknown, init?: Record<string, unknown>): Promise<FetchResponse> {
      const ctx = context.active();
      const request = asRequest(input);
      const method = String(init?.method ?? request?.method ?? 'GET').toUpperCase();
      const callerSignal = (init?.signal ?? request?.signal) as AbortSignal | undefined;
      const requestUrl = () => request?.url ?? String(input);
      const decision = beginCall(
        host.settings,
        {
          transport,
          method,
          hasBody: init?.body != null || request?.body != null,
          url: requestUrl,
          callerSignal: callerSignal instanceof AbortSignal ? callerSignal : undefined,
          appendsHeaders: true,
        },
        ctx,
      );
      if (decision.kind === 'pass') return context.with(decision.context ?? ctx, () => original.call(this, input, init));
      if (decision.kind === 'refuse') {
        recordRefusal(host.tracer, ctx, method, decision.error);
        return Promise.reject(decision.error);
      }
      const { call } = decision;
      // Off the propagateTo list, none: the undici channel also takes out any the caller or a propagator set.
      const headers =
        decision.headers === undefined
          ? undefined
          : fetchHeadersWithDeadline(new Headers((init?.headers ?? request?.headers) as ConstructorParameters<typeof Headers>[0]), decision.headers);
      let options: Record<string, unknown> | undefined = headers === undefined ? init : { ...init, headers };
      const controller = call.observe ? undefined : new AbortController();
      if (controller !== undefined) options = { ...options, signal: controller.signal };
      const operation = `${transport} ${method}`;
      const pending = context.with(decision.context, () => original.call(this, input, options));
      // Armed once fetch has returned: Node 20's fetch asserts (and the process dies) if its signal
      // aborts while fetch() is still setting up, and undici's request channel runs in there.
      call.armFor((reason) => controller?.abort(reason));
      return pending.then(
        async (response) => {
          const claim = call.observe ? undefined : await rejectClaimOf(host.settings, call, transport, requestUrl(), response).catch(() => undefined);
          if (claim !== undefined) {
            // The clone was read; the original's body is not needed any more.
            void response.body?.cancel?.().catch(() => {});
            call.recordNotStarted();
            call.apiSettled();
            throw errorFromClaim(operation, call.deadline, claim);
          }
          // An untied request (OutgoingCall#hasTiedRequest): a fetch body does not say when it is all
          // in, so the call stays armed until its cutoff, erroring a body still being read.
          if (call.hasTiedRequest || call.observe || response.body == null) call.apiSettled();
          return response;
        },
        (error: unknown) => {
          call.apiSettled();
          throw error;
        },
      );
    };
}
