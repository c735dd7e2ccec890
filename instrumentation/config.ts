import { safeExecuteInTheMiddle } from '@opentelemetry/instrumentation';
import { checkBudget, checkDuration } from '../src/time';
import { compileHostList, toUrl } from './hosts';
import type { DeadlineInstrumentationConfig, DeadlineMode, OutgoingRequestInfo, PropagateTo, ReplyInfo } from './types';

/** The config with defaults applied and every value checked once, up front. */
export type ResolvedConfig = ReturnType<typeof resolveConfig>;
type PropagatesTo = ((url: string | URL | undefined) => boolean) | undefined;

const MODES: readonly DeadlineMode[] = ['enforce', 'observe'];

function optionalMs(name: string, value: unknown, check: typeof checkDuration): number | undefined {
  return value === undefined ? undefined : check(name, value);
}

/**
 * The cap on what a caller may ask for. Without `maxIncomingMs`, a set
 * `defaultTimeoutMs` is the cap too: otherwise any caller could bypass the
 * default budget by asking for more (`grpc-timeout: 99999999H`).
 */
export function effectiveMaxIncomingMs(maxIncomingMs: number | undefined, defaultTimeoutMs: number | undefined): number | undefined {
  return maxIncomingMs ?? defaultTimeoutMs;
}

/** `value`, unless it is set and not of `type`: a TypeError naming the option. */
function optional<T>(type: 'boolean' | 'function', name: string, value: T | undefined): T | undefined {
  if (value !== undefined && typeof value !== type) throw new TypeError(`${name} must be a ${type}`);
  return value;
}

/** A user hook that throws or returns anything but true says no. */
function saysYes<T>(hook: (value: T) => boolean, value: T): boolean {
  return safeExecuteInTheMiddle(() => hook(value), () => {}, true) === true;
}

/** Undefined: the headers go everywhere. Else whether they may go to this URL (false when it is unknown). */
function resolvePropagateTo(value: PropagateTo | undefined): PropagatesTo {
  if (value === undefined) return undefined;
  if (typeof value !== 'function') return compileHostList(value);
  return (url) => {
    const parsed = toUrl(url);
    return parsed !== undefined && saysYes(value, parsed);
  };
}

/** Whether an early-reject reply from this peer is believed. */
function resolveTrustReply(hook: ((reply: ReplyInfo) => boolean) | undefined, propagatesTo: PropagatesTo): (reply: ReplyInfo) => boolean {
  if (hook !== undefined) return (reply) => saysYes(hook, reply);
  // A host we do not send the deadline to has no reason to speak for it.
  if (propagatesTo !== undefined) return (reply) => propagatesTo(reply.url);
  return () => true;
}

/** `ignoreOutgoingRequest` with the calls of every client transport switched off added. */
function resolveIgnore(config: DeadlineInstrumentationConfig): ((info: OutgoingRequestInfo) => boolean) | undefined {
  const hook = optional('function', 'ignoreOutgoingRequest', config.ignoreOutgoingRequest);
  const off = new Set<OutgoingRequestInfo['transport']>();
  if (optional('boolean', 'fetch', config.fetch) === false) off.add('fetch');
  if (optional('boolean', 'undici', config.undici) === false) off.add('undici');
  if (optional('boolean', 'httpClient', config.httpClient) === false) off.add('http');
  if (off.size === 0) return hook;
  return (info) => off.has(info.transport) || (hook !== undefined && hook(info));
}

export function resolveConfig(config: DeadlineInstrumentationConfig) {
  const mode: DeadlineMode = config.mode ?? 'enforce';
  if (!MODES.includes(mode)) throw new TypeError(`mode must be one of ${MODES.join(', ')}, got ${String(mode)}`);
  const status = config.rejectStatusCode ?? 504;
  if (!Number.isInteger(status) || status < 400 || status > 599) {
    throw new RangeError(`rejectStatusCode must be an integer from 400 to 599, got ${String(status)}`);
  }
  const defaultTimeoutMs = optionalMs('defaultTimeoutMs', config.defaultTimeoutMs, checkBudget);
  const propagatesTo = resolvePropagateTo(config.propagateTo);
  const on = (name: 'httpServer' | 'pg' | 'mysql2' | 'ioredis' | 'grpc') => optional('boolean', name, config[name]) ?? true;
  return {
    mode,
    minUsefulMs: optionalMs('minUsefulMs', config.minUsefulMs, checkDuration) ?? 0,
    maxIncomingMs: effectiveMaxIncomingMs(optionalMs('maxIncomingMs', config.maxIncomingMs, checkDuration), defaultTimeoutMs),
    defaultTimeoutMs,
    trustIncoming: optional('function', 'trustIncoming', config.trustIncoming),
    rejectStatusCode: status,
    ignoreOutgoingRequest: resolveIgnore(config),
    httpServer: on('httpServer'),
    pg: on('pg'),
    mysql2: on('mysql2'),
    ioredis: on('ioredis'),
    grpc: on('grpc'),
    trustIncomingGrpc: optional('function', 'trustIncomingGrpc', config.trustIncomingGrpc),
    propagatesTo,
    trustsReply: resolveTrustReply(optional('function', 'trustReply', config.trustReply), propagatesTo),
  };
}
