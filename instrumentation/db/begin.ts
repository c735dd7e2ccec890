import type { Context } from '@opentelemetry/api';
import { deadlineIn } from '../../src/context';
import { isTracingSuppressed as tracingSuppressed } from '@opentelemetry/core';
import type { Deadline } from '../../src/deadline';
import type { ClientHost } from '../call/host';

export type DbDriver = 'pg' | 'mysql2' | 'ioredis';

/** The deadline a driver call made in `ctx` must respect; undefined (left untouched) with none, the driver switched off, or tracing suppressed. */
export function statementDeadline(host: ClientHost, driver: DbDriver, ctx: Context): Deadline | undefined {
  const deadline = deadlineIn(ctx);
  if (deadline === undefined || !host.settings[driver] || tracingSuppressed(ctx)) return undefined;
  return deadline;
}
