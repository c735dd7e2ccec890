import type { IncomingMessage } from 'node:http';
import { checkBudget, checkDuration } from '../src/time';
import type { DeadlineInstrumentationConfig, DeadlineMode, IncomingGrpcCallInfo, OutgoingRequestInfo } from './types';

/** The config with defaults applied and every value checked once, up front. */
export interface ResolvedConfig {
  mode: DeadlineMode;
  minUsefulMs: number;
  maxIncomingMs: number | undefined;
  defaultTimeoutMs: number | undefined;
  trustIncoming: ((request: IncomingMessage) => boolean) | undefined;
  rejectStatusCode: number;
  ignoreOutgoingRequest: ((info: OutgoingRequestInfo) => boolean) | undefined;
  /** Per database driver: false leaves it alone. */
  pg: boolean;
  mysql2: boolean;
  ioredis: boolean;
  grpc: boolean;
  trustIncomingGrpc: ((call: IncomingGrpcCallInfo) => boolean) | undefined;
}

const MODES: readonly DeadlineMode[] = ['enforce', 'observe'];

function optionalDuration(name: string, value: unknown): number | undefined {
  return value === undefined ? undefined : checkDuration(name, value);
}

function optionalBudget(name: string, value: unknown): number | undefined {
  return value === undefined ? undefined : checkBudget(name, value);
}

/**
 * The cap on what a caller may ask for. Without `maxIncomingMs`, a set
 * `defaultTimeoutMs` is the cap too: otherwise any caller could bypass the
 * default budget by asking for more (`grpc-timeout: 99999999H`).
 */
export function effectiveMaxIncomingMs(maxIncomingMs: number | undefined, defaultTimeoutMs: number | undefined): number | undefined {
  return maxIncomingMs ?? defaultTimeoutMs;
}

function optionalBoolean(name: string, value: unknown): boolean | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'boolean') throw new TypeError(`${name} must be a boolean`);
  return value;
}

function optionalFunction<T>(name: string, value: unknown): T | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'function') throw new TypeError(`${name} must be a function`);
  return value as T;
}

export function resolveConfig(config: DeadlineInstrumentationConfig): ResolvedConfig {
  const mode = config.mode ?? 'enforce';
  if (!MODES.includes(mode)) throw new TypeError(`mode must be one of ${MODES.join(', ')}, got ${String(mode)}`);
  const status = config.rejectStatusCode ?? 504;
  if (!Number.isInteger(status) || status < 400 || status > 599) {
    throw new RangeError(`rejectStatusCode must be an integer from 400 to 599, got ${String(status)}`);
  }
  const defaultTimeoutMs = optionalBudget('defaultTimeoutMs', config.defaultTimeoutMs);
  return {
    mode,
    minUsefulMs: optionalDuration('minUsefulMs', config.minUsefulMs) ?? 0,
    maxIncomingMs: effectiveMaxIncomingMs(optionalDuration('maxIncomingMs', config.maxIncomingMs), defaultTimeoutMs),
    defaultTimeoutMs,
    trustIncoming: optionalFunction('trustIncoming', config.trustIncoming),
    rejectStatusCode: status,
    ignoreOutgoingRequest: optionalFunction('ignoreOutgoingRequest', config.ignoreOutgoingRequest),
    pg: optionalBoolean('pg', config.pg) ?? true,
    mysql2: optionalBoolean('mysql2', config.mysql2) ?? true,
    ioredis: optionalBoolean('ioredis', config.ioredis) ?? true,
    grpc: optionalBoolean('grpc', config.grpc) ?? true,
    trustIncomingGrpc: optionalFunction('trustIncomingGrpc', config.trustIncomingGrpc),
  };
}
