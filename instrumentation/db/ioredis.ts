import { context } from '@opentelemetry/api';
import type { Deadline } from '../../src/deadline';
import { budgetLeft, mayStart, refusalAt } from '../client/begin';
import type { ClientHost } from '../client/host';
import { isOwnWrapper, isShimmerWrapper, wrapMethod, type MethodPatch } from '../wrap';
import { statementDeadline } from './begin';
import type { DriverSpanSlot } from './driver-span';
import { clampBlockingTimeout, isBlocking } from './redis-blocking';
import { DbStatement, type CutoffHandler } from './statement';

type AnyFunction = (this: unknown, ...args: unknown[]) => unknown;
type Exports = Record<string, unknown>;

interface RedisCommand {
  name: string;
  args: unknown[];
  promise: Promise<unknown>;
  reject(err: unknown): void;
  resolve(value: unknown): void;
  /** Set when the cutoff rejected the command: the error it was rejected with. */
  [CUT_BY_DEADLINE]?: Error;
}

/**
 * Marks a command the cutoff rejected. ioredis sends a command again through
 * sendCommand when its connection comes back (the commands that had no reply
 * yet, with autoResendUnfulfilledCommands, its default, and the offline
 * queue), from its own event handler, outside the deadline's context: nothing
 * would stop it, and a command the caller has already been told failed would
 * run after its cutoff (a BLPOP could pop an element nobody receives).
 */
const CUT_BY_DEADLINE = Symbol('otel-deadline.cut-by-deadline');

/** Guards waiting to put their resolve/reject on top of a wrapper above ours: one microtask for all sent in one turn. */
let settleFirstPending: RedisCommandGuard[] = [];

function settleFirstSoon(guard: RedisCommandGuard): void {
  if (settleFirstPending.length === 0) queueMicrotask(flushSettleFirst);
  settleFirstPending.push(guard);
}

function flushSettleFirst(): void {
  const guards = settleFirstPending;
  settleFirstPending = [];
  for (const guard of guards) guard.settleFirst();
}

/** Commands that only read: one the cutoff reached in flight left nothing half-done. Anything else is a write. */
const READ_COMMANDS = new Set(
  'get mget exists strlen getrange hget hmget hgetall hkeys hvals hlen hexists lrange llen lindex smembers sismember scard zrange zrangebyscore zscore zcard zrank type ttl pttl scan sscan hscan zscan ping echo info dbsize xrange xrevrange xlen xread keys time'.split(
    ' ',
  ),
);

/** What the guard needs to know of a command name, worked out once per distinct name. */
interface CommandKind {
  /** Lower case: what spans, errors and the tables here use. */
  readonly name: string;
  /** Whether its timeout argument is clamped to the time left. */
  readonly blocking: boolean;
}

/** Command names as ioredis was given them → their kind, so that a command costs no new string and no table lookup. Bounded. */
const COMMAND_KINDS = new Map<unknown, CommandKind>();
const COMMAND_KINDS_MAX = 1_024;

function commandKind(name: unknown): CommandKind {
  const known = COMMAND_KINDS.get(name);
  if (known !== undefined) return known;
  const lower = String(name).toLowerCase();
  const kind: CommandKind = Object.freeze({ name: lower, blocking: isBlocking(lower) });
  if (COMMAND_KINDS.size < COMMAND_KINDS_MAX && typeof name === 'string') COMMAND_KINDS.set(name, kind);
  return kind;
}

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
  return (original: AnyFunction): AnyFunction => {
    // An instrumentation-ioredis registered before us wraps the method below
    // ours: fixed for this wrapper's life, since `original` is.
    const instrumentedBelow = isShimmerWrapper(original);
    return function sendCommand(this: unknown, ...args: unknown[]): unknown {
      const outerSpan = slot.take();
      const ctx = context.active();
      const deadline = statementDeadline(host, 'ioredis', ctx);
      const command = args[0] as RedisCommand | undefined;
      const cut = command?.[CUT_BY_DEADLINE];
      if (cut !== undefined) {
        // Sent again after a reconnect: the caller was told at the cutoff; nothing goes out now. A wrapper
        // on top of ours (instrumentation-ioredis) started a span for this send and ends it through reject.
        process.nextTick(() => command!.reject(cut));
        return command!.promise;
      }
      if (deadline === undefined || command === undefined || typeof command.reject !== 'function') return original.apply(this, args);
      const kind = commandKind(command.name);
      const name = kind.name;
      const observe = host.settings.mode === 'observe';
      const guard = new RedisCommandGuard(deadline, observe, name, command);
      if (outerSpan !== undefined) guard.adoptSpan(outerSpan);
      const current = (this as Exports).sendCommand;
      // The one clock read: refusal, the blocking timeout and arming all go by it.
      const left = budgetLeft(deadline);
      const minUsefulMs = host.settings.minUsefulMs;
      const refusal = mayStart(left, minUsefulMs) ? undefined : refusalAt(deadline, left, guard.operation, minUsefulMs);
      // No other instrumentation wraps sendCommand, below us or on top.
      const alone = !instrumentedBelow && isOwnWrapper(current, owner);
      if (outerSpan === undefined && (alone || (refusal !== undefined && isOwnWrapper(current, owner)))) {
        const options = (this as { options?: { host?: unknown; port?: unknown } }).options ?? {};
        const attributes: Record<string, string | number> = { 'db.system.name': 'redis', 'db.operation.name': name };
        if (typeof options.host === 'string') attributes['server.address'] = options.host;
        if (typeof options.port === 'number') attributes['server.port'] = options.port;
        guard.startOwnSpan(host.tracer, ctx, { name, attributes });
      }
      if (refusal !== undefined) {
        if (!observe) {
          guard.refuse(refusal);
          // On the next tick: an instrumentation-ioredis wrapped on top of us patches
          // `command.reject` once we return, and ends its span only through it.
          process.nextTick(() => command.reject(refusal));
          return command.promise;
        }
        guard.markWouldReject();
      }
      if (!observe && kind.blocking) clampBlockingTimeout(name, command.args, left);
      guard.arm(guard);
      // ioredis rejects some commands before sendCommand returns (a closed
      // connection, subscriber mode, no offline queue). Only a wrapper already
      // in place sees that, or the guard would hold the deadline armed until
      // its cutoff. With no other instrumentation, the guard's own wrappers go
      // on now and see everything.
      if (alone) guard.settleFirst();
      else guard.settleOnReject();
      // Only an instrumentation below us calls its requestHook (with its span)
      // from inside this call; on top of us it has called it already, and the
      // span is in `outerSpan`.
      const result = instrumentedBelow ? slot.dispatch(guard, original, this, args) : original.apply(this, args);
      if (alone || guard.settled) return result;
      // instrumentation-ioredis patches `resolve`/`reject` once its own call to
      // the method below it returns, and would end its span on a reply before
      // the guard saw it: ours go on top of its. Below us, it has patched by
      // now; on top of us, it patches once we return: a microtask then, before
      // any reply or timer can run.
      if (isOwnWrapper(current, owner)) guard.settleFirst();
      else settleFirstSoon(guard);
      return result;
    };
  };
}

/** One command between sendCommand and its reply; the statement guard is also what stops it at the cutoff. */
class RedisCommandGuard extends DbStatement implements CutoffHandler {
  /** Whether settleOnReject has wrapped the command's reject. */
  private rejectSettles = false;

  constructor(
    deadline: Deadline,
    observe: boolean,
    private readonly name: string,
    private readonly command: RedisCommand,
  ) {
    super(deadline, observe, 'redis', undefined);
  }

  /** `redis.get`: built only when an error or a refusal needs it. */
  override get operation(): string {
    return `redis.${this.name}`;
  }

  protected override isWrite(): boolean {
    return !READ_COMMANDS.has(this.name);
  }

  onCutoff(): void {
    const cutError = this.errorFor();
    this.settle(cutError, 'not_possible');
    this.command[CUT_BY_DEADLINE] = cutError;
    this.command.reject(cutError);
  }

  /**
   * Settles the statement the moment ioredis resolves or rejects the command,
   * synchronously: before instrumentation-ioredis (which patches
   * `resolve`/`reject`: while we call it when below us, right after we return
   * when on top, hence a microtask then) ends its span, and with no gap in which
   * the cutoff could still call a resolved command unknown. Closures, not
   * shared functions that find the guard through `this`: instrumentation-ioredis
   * calls the functions it wrapped unbound.
   *
   * A reject wrapper put on before the command was sent stays where it is,
   * under instrumentation-ioredis's: a rejected command's settle records
   * nothing on the span (the cutoff's own reject settles first, in onCutoff),
   * so its place in the chain changes no attribute, and a second wrapper
   * would cost a closure per command.
   */
  settleFirst(): void {
    const { command } = this;
    const { resolve } = command;
    command.resolve = (value: unknown) => {
      this.settle();
      resolve.call(command, value);
    };
    if (!this.rejectSettles) this.settleOnReject();
  }

  /** The reject half of settleFirst: what a command rejected inside sendCommand goes through. */
  settleOnReject(): void {
    this.rejectSettles = true;
    const { command } = this;
    const { reject } = command;
    command.reject = (err: unknown) => {
      this.settle(err);
      reject.call(command, err);
    };
  }
}
