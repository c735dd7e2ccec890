import { context } from '@opentelemetry/api';
import { refusalFor } from '../client/begin';
import type { ClientHost } from '../client/host';
import { isOwnWrapper, wrapMethod, type MethodPatch } from '../wrap';
import { statementDeadline } from './begin';
import { driverInstrumented, type DriverSpanSlot } from './driver-span';
import { clampBlockingTimeout } from './redis-blocking';
import { DbStatement } from './statement';

type AnyFunction = (this: unknown, ...args: unknown[]) => unknown;
type Exports = Record<string, unknown>;

interface RedisCommand {
  name: string;
  args: unknown[];
  promise: Promise<unknown>;
  reject(err: unknown): void;
  resolve(value: unknown): void;
}

/** Commands that only read: one the cutoff reached in flight left nothing half-done. Anything else is a write. */
const READ_COMMANDS = new Set(
  'get mget exists strlen getrange hget hmget hgetall hkeys hvals hlen hexists lrange llen lindex smembers sismember scard zrange zrangebyscore zscore zcard zrank type ttl pttl scan sscan hscan zscan ping echo info dbsize xrange xrevrange xlen xread keys time'.split(
    ' ',
  ),
);

/**
 * Redis#sendCommand under an active deadline (every command of ioredis 5 and
 * 6 goes through it, `multi`'s commands included; pipelines write on their
 * own and are not covered). Redis cannot cancel a command: one in flight at
 * the cutoff rejects with DeadlineExceededError and its reply is dropped when
 * it comes, and blocking commands get their timeout clamped to the time left
 * so the server itself gives up at the cutoff.
 */
export function patchIoredis(moduleExports: Exports, host: ClientHost, slot: DriverSpanSlot, owner: object, isActive: () => boolean): MethodPatch[] {
  const Redis = (typeof moduleExports.default === 'function' ? moduleExports.default : moduleExports) as { prototype?: Exports };
  const proto = Redis.prototype;
  if (proto === undefined || typeof proto.sendCommand !== 'function') return [];
  const patch = wrapMethod(proto, 'sendCommand', owner, isActive, makeSendCommandWrapper(host, slot, owner));
  return patch === undefined ? [] : [patch];
}

function makeSendCommandWrapper(host: ClientHost, slot: DriverSpanSlot, owner: object) {
  return (original: AnyFunction): AnyFunction =>
    function sendCommand(this: unknown, ...args: unknown[]): unknown {
      const outerSpan = slot.take();
      const ctx = context.active();
      const deadline = statementDeadline(host, 'ioredis', ctx);
      const command = args[0] as RedisCommand | undefined;
      if (deadline === undefined || command === undefined || typeof command.reject !== 'function') return original.apply(this, args);
      const name = String(command.name).toLowerCase();
      const observe = host.settings.mode === 'observe';
      const statement = new DbStatement({ deadline, observe, write: !READ_COMMANDS.has(name), operation: `redis.${name}` });
      if (outerSpan !== undefined) statement.adoptSpan(outerSpan);
      const current = (this as Exports).sendCommand;
      const refusal = refusalFor(deadline, `redis.${name}`, host.settings.minUsefulMs);
      if (outerSpan === undefined && (!driverInstrumented(original, current, owner) || (refusal !== undefined && isOwnWrapper(current, owner)))) {
        const options = (this as { options?: { host?: unknown; port?: unknown } }).options ?? {};
        const attributes: Record<string, string | number> = { 'db.system.name': 'redis', 'db.operation.name': name };
        if (typeof options.host === 'string') attributes['server.address'] = options.host;
        if (typeof options.port === 'number') attributes['server.port'] = options.port;
        statement.startOwnSpan(host.tracer, ctx, { name, attributes });
      }
      if (refusal !== undefined) {
        if (!observe) {
          statement.refuse(refusal);
          // On the next tick: an instrumentation-ioredis wrapped on top of us patches
          // `command.reject` once we return, and ends its span only through it.
          process.nextTick(() => command.reject(refusal));
          return command.promise;
        }
        statement.markWouldReject();
      }
      if (!observe) clampBlockingTimeout(name, command.args, deadline.remainingMs());
      statement.arm(() => {
        const cutError = statement.errorFor();
        statement.settle({ error: cutError, cancel: 'not_possible' });
        command.reject(cutError);
      });
      const result = slot.dispatch(statement, () => original.apply(this, args));
      settleFirst(command, statement);
      return result;
    };
}

/**
 * Settles the statement the moment ioredis resolves or rejects the command,
 * synchronously: before an instrumentation-ioredis below us (which patched
 * `resolve`/`reject` as we called it) ends its span, and with no gap in which
 * the cutoff could still call a resolved command unknown.
 */
function settleFirst(command: RedisCommand, statement: DbStatement): void {
  const { resolve, reject } = command;
  command.resolve = (value: unknown) => {
    statement.settle({});
    resolve.call(command, value);
  };
  command.reject = (err: unknown) => {
    statement.settle({ error: err });
    reject.call(command, err);
  };
}
