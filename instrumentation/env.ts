import { compileHostList, splitHostList } from './hosts';
import type { DeadlineSpanProcessorConfig } from '../src/processor/DeadlineSpanProcessor';
import type { DeadlineInstrumentationConfig } from './types';

/** A startup configuration error; its message names the environment variable. */
export class DeadlineEnvError extends Error {
  override name = 'DeadlineEnvError';
}

const MS_PATTERN = /^\d{1,15}(\.\d{1,6})?$/;

export function readMs(env: NodeJS.ProcessEnv, name: string): number | undefined {
  const text = env[name]?.trim();
  if (text === undefined || text === '') return undefined;
  if (!MS_PATTERN.test(text)) throw new DeadlineEnvError(`${name} must be a non-negative number of milliseconds, got ${JSON.stringify(env[name]!.slice(0, 64))}`);
  return Number(text);
}

/** OTEL_DEADLINE_<NAME>_ENABLED: `false` leaves that transport side or database driver alone. */
const SWITCHES = [
  ['fetch', 'OTEL_DEADLINE_FETCH_ENABLED'],
  ['undici', 'OTEL_DEADLINE_UNDICI_ENABLED'],
  ['httpClient', 'OTEL_DEADLINE_HTTP_CLIENT_ENABLED'],
  ['httpServer', 'OTEL_DEADLINE_HTTP_SERVER_ENABLED'],
  ['pg', 'OTEL_DEADLINE_PG_ENABLED'],
  ['mysql2', 'OTEL_DEADLINE_MYSQL2_ENABLED'],
  ['ioredis', 'OTEL_DEADLINE_IOREDIS_ENABLED'],
  ['grpc', 'OTEL_DEADLINE_GRPC_ENABLED'],
] as const;

/** One of two words, in any case; unset or blank is undefined. */
function readChoice<T extends string>(env: NodeJS.ProcessEnv, name: string, choices: readonly [T, T]): T | undefined {
  const text = env[name]?.trim().toLowerCase();
  if (text === undefined || text === '') return undefined;
  if (text === choices[0] || text === choices[1]) return text as T;
  throw new DeadlineEnvError(`${name} must be "${choices[0]}" or "${choices[1]}", got ${JSON.stringify(env[name]!.slice(0, 64))}`);
}

/** A comma-separated host list (see hosts.ts); unset or blank is no list. */
function readHostList(env: NodeJS.ProcessEnv, name: string): string[] | undefined {
  const raw = env[name];
  if (raw === undefined || raw.trim() === '') return undefined;
  const list = splitHostList(raw);
  try {
    compileHostList(list);
  } catch (error) {
    throw new DeadlineEnvError(`${name}: ${(error as Error).message}`);
  }
  return list;
}

/** DeadlineInstrumentation options from OTEL_DEADLINE_* variables. Throws DeadlineEnvError on a bad value. */
export function configFromEnv(env: NodeJS.ProcessEnv): DeadlineInstrumentationConfig {
  const config: DeadlineInstrumentationConfig = {};
  const mode = readChoice(env, 'OTEL_DEADLINE_MODE', ['enforce', 'observe']);
  if (mode !== undefined) config.mode = mode;
  const durations = {
    maxIncomingMs: readMs(env, 'OTEL_DEADLINE_MAX_INCOMING_MS'),
    minUsefulMs: readMs(env, 'OTEL_DEADLINE_MIN_USEFUL_MS'),
    defaultTimeoutMs: readMs(env, 'OTEL_DEADLINE_DEFAULT_TIMEOUT_MS'),
  };
  for (const [option, ms] of Object.entries(durations)) if (ms !== undefined) config[option as keyof typeof durations] = ms;
  for (const [option, name] of SWITCHES) {
    const enabled = readChoice(env, name, ['true', 'false']);
    if (enabled !== undefined) config[option] = enabled === 'true';
  }
  const propagateTo = readHostList(env, 'OTEL_DEADLINE_PROPAGATE_TO');
  if (propagateTo !== undefined) config.propagateTo = propagateTo;
  // The span processor's variable (processorConfigFromEnv), checked here too: the register entry reads this first, so a bad value stops it before anything starts.
  processorConfigFromEnv(env);
  return config;
}

/** DeadlineSpanProcessor options from OTEL_DEADLINE_* variables (the stop allowance). Throws DeadlineEnvError on a bad value. */
export function processorConfigFromEnv(env: NodeJS.ProcessEnv): DeadlineSpanProcessorConfig {
  const lateGraceMs = readMs(env, 'OTEL_DEADLINE_LATE_GRACE_MS');
  return lateGraceMs === undefined ? {} : { lateGraceMs };
}
