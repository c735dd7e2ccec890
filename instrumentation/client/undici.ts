import { Duplex, Readable } from 'node:stream';
import { context } from '@opentelemetry/api';
import { beginCall, recordRefusal, type Decision } from './begin';
import type { OutgoingCall } from './call';
import type { ClientHost } from '../call/host';
import { claimsEarlyReject, parseRejectBody, readSmallBody } from './reply';
import { errorFromClaim } from '../call/reject-claim';
import { HEADER_DEADLINE_EXPIRED } from '../names';
import type { ReplyInfo } from '../types';
import { replayBody } from './replay-body';
import { dispatcherCallUrl, topLevelCallUrl } from './undici-target';
import { headersWithDeadline } from './deadline-headers';

/** Wrappers for undici's `request`, `stream` and `pipeline`: top-level `(url, opts, handler)` and Dispatcher `(opts, handler, callback)`. */

type AnyFunction = (this: unknown, ...args: unknown[]) => unknown;
type Api = 'request' | 'stream' | 'pipeline';

interface UndiciOptions {
  origin?: unknown;
  path?: unknown;
  method?: unknown;
  body?: unknown;
  signal?: unknown;
  headers?: unknown;
}

interface ResponseData {
  statusCode: number;
  headers: Record<string, unknown>;
  body: AsyncIterable<Uint8Array>;
}

/** A call's options, the arguments after them (handler, factory, callback), and how to put new ones in their place. */
interface CallShape {
  options: UndiciOptions;
  rest: readonly unknown[];
  rebuild(options: UndiciOptions, rest: readonly unknown[]): unknown[];
}

type Guarded = Extract<Decision, { kind: 'guard' }>;

function topLevelShape(args: unknown[]): CallShape {
  const url = args[0];
  const second = args[1];
  const optionsGiven = typeof second === 'object' && second !== null;
  // undici treats an options-like url object as the options when none are given.
  const implicit = typeof url === 'object' && url !== null && !(url instanceof URL) ? (url as UndiciOptions) : {};
  const rest = optionsGiven ? args.slice(2) : args.slice(1).filter((value) => value !== undefined);
  return { options: optionsGiven ? (second as UndiciOptions) : implicit, rest, rebuild: (options, rest) => [url, options, ...rest] };
}

function dispatcherShape(args: unknown[]): CallShape {
  const options = args[0];
  const given = (typeof options === 'object' && options !== null ? options : {}) as UndiciOptions;
  return { options: given, rest: args.slice(1), rebuild: (options, rest) => [options, ...rest] };
}

function failedDuplex(error: Error): Duplex {
  const duplex = new Duplex({ read() {}, write(_chunk, _encoding, callback) { callback(error); } });
  process.nextTick(() => duplex.destroy(error));
  return duplex;
}

/** Reads the small body of a claimed early reject and settles the call: a well-formed claim rejects, anything else resolves with the body replayed. */
async function checkRejectReply(data: ResponseData, call: OutgoingCall, operation: string): Promise<ResponseData> {
  const read = await readSmallBody(data.body);
  // The cutoff passed while the claim was read: the call ends as any call cut at its cutoff does.
  if (read.error !== undefined && call.deadline.aborted && read.error === call.deadline.abortReason) {
    call.apiSettled();
    throw read.error;
  }
  const claim = read.error === undefined ? parseRejectBody(read.bytes) : undefined;
  if (claim !== undefined) {
    call.recordNotStarted();
    call.apiSettled();
    throw errorFromClaim(operation, call.deadline, claim);
  }
  call.apiSettled();
  data.body = replayBody(data.body, read.bytes, read.error, data.headers['content-type']) as unknown as ResponseData['body'];
  return data;
}

/** The call's result is out; an untied request's body (OutgoingCall#hasTiedRequest) stays under the cutoff until it closes. */
function settleWithBody(call: OutgoingCall, body: unknown): void {
  if (call.hasTiedRequest || call.observe || !(body instanceof Readable) || body.closed) return call.apiSettled();
  body.once('close', () => call.apiSettled());
}

/** Calls the API with `options` in the decision's transport context. */
function invoke(original: AnyFunction, self: unknown, shape: CallShape, options: { headers: unknown; signal: unknown }, rest: readonly unknown[], decision: Guarded): unknown {
  try {
    return context.with(decision.context, () => original.apply(self, shape.rebuild({ ...shape.options, ...options }, rest)));
  } catch (error) {
    // Thrown before undici took the request (a bad URL or option): nothing is in flight.
    decision.call.apiSettled();
    throw error;
  }
}

export function makeUndiciWrapper(host: ClientHost, api: Api, topLevel: boolean) {
  return (original: AnyFunction) =>
    function (this: unknown, ...args: unknown[]): unknown {
      const shape = topLevel ? topLevelShape(args) : dispatcherShape(args);
      const ctx = context.active();
      const method = String(shape.options.method ?? 'GET').toUpperCase();
      const callerSignal = shape.options.signal;
      const callUrl = () => (topLevel ? topLevelCallUrl(args[0]) : dispatcherCallUrl(this, shape.options));
      const decision = beginCall(
        host.settings,
        {
          transport: 'undici',
          method,
          hasBody: shape.options.body != null,
          url: callUrl,
          callerSignal: callerSignal instanceof AbortSignal ? callerSignal : undefined,
          appendsHeaders: true,
        },
        ctx,
      );
      if (decision.kind === 'pass') return context.with(decision.context ?? ctx, () => original.apply(this, args));

      // request(opts, callback) and stream(opts, factory, callback) report through a callback when given one.
      const callbackIndex = api === 'request' ? 0 : api === 'stream' ? 1 : -1;
      const callback = callbackIndex >= 0 ? shape.rest[callbackIndex] : undefined;
      const hasCallback = typeof callback === 'function';
      const rest = hasCallback ? shape.rest.slice(0, callbackIndex) : shape.rest;

      if (decision.kind === 'refuse') {
        recordRefusal(host.tracer, ctx, method, decision.error);
        if (api === 'pipeline') return failedDuplex(decision.error);
        if (hasCallback) return void process.nextTick(callback as AnyFunction, decision.error);
        return Promise.reject(decision.error);
      }

      const { call } = decision;
      // Set here, in the caller's context: a request queued in a Pool is created later, in another.
      const headers = decision.headers === undefined ? shape.options.headers : headersWithDeadline(shape.options.headers, decision.headers);
      // undici fails a queued request only once it is dispatched, so an abort settles our
      // promise (or destroys the pipeline) itself; the request is dropped unwritten later.
      let failNow: ((reason: unknown) => void) | undefined;
      // Observe mode never aborts: the caller's own signal goes as it is.
      const controller = call.observe ? undefined : new AbortController();
      call.armFor((reason) => {
        controller?.abort(reason);
        failNow?.(reason);
      });
      const options = { headers, signal: controller?.signal ?? callerSignal };

      if (api === 'pipeline') {
        const duplex = invoke(original, this, shape, options, rest, decision) as Duplex;
        failNow = (reason) => duplex.destroy(reason as Error);
        duplex.once('close', () => call.apiSettled());
        return duplex;
      }
      let resolveCall!: (result: unknown) => void;
      let rejectCall!: (error: unknown) => void;
      const promise = new Promise<unknown>((resolve, reject) => {
        resolveCall = resolve;
        rejectCall = reject;
      });
      const fail = (error: unknown) => {
        call.apiSettled();
        rejectCall(error);
      };
      failNow = fail;
      const onReply = (error: unknown, result: unknown): void => {
        if (error != null) return fail(error);
        try {
          const data = result as ResponseData;
          if (api === 'request' && !call.observe) {
            const info = (): ReplyInfo => ({ transport: 'undici', method, url: callUrl(), statusCode: data.statusCode });
            if (claimsEarlyReject(host.settings, data.statusCode, data.headers[HEADER_DEADLINE_EXPIRED], data.headers['content-length'], info)) {
              return void checkRejectReply(data, call, `undici ${method}`).then(resolveCall, fail);
            }
          }
        } catch (error) {
          return fail(error);
        }
        settleWithBody(call, api === 'request' ? (result as ResponseData | undefined)?.body : undefined);
        resolveCall(result);
      };
      (invoke(original, this, shape, options, rest, decision) as Promise<unknown>).then((result) => onReply(null, result), fail);
      if (!hasCallback) return promise;
      promise.then(
        (result) => (callback as AnyFunction)(null, result),
        (error: unknown) => (callback as AnyFunction)(error),
      );
      return undefined;
    };
}
