import type { Span } from '@opentelemetry/api';
import { contextApi } from '../../src/otel-api';
import { markStatementInFlight, spanStartLook } from '../../src/processor/statement-in-flight';
import { budgetLeft, mayStart, refusalAt } from '../client/begin';
import type { ClientHost } from '../client/host';
import { isOwnWrapper, isShimmerWrapper, wrapMethod, type MethodPatch } from '../wrap';
import { statementDeadline } from './begin';
import { makeOpensOutsideDeadline } from './connection-context';
import type { DriverSpanSlot } from './driver-span';
import { clampBlockingTimeout, isBlocking, mayBeBlocking } from './redis-blocking';
import { discardInsteadOfExec, isSessionCleanup } from './redis-session';
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
  /** DISCARD, UNWATCH, RESET: never refused, delayed or cut (redis-session.ts). */
  readonly cleanup: boolean;
}

/** Command names as ioredis was given them → their kind, so that a command costs no new string. Bounded. */
const COMMAND_KINDS = new Map<unknown, CommandKind>();
const COMMAND_KINDS_MAX = 1_024;

function commandKind(name: unknown): CommandKind {
  const known = COMMAND_KINDS.get(name);
  if (known !== undefined) return known;
  const lower = String(name).toLowerCase();
  const kind: CommandKind = Object.freeze({ name: lower, blocking: isBlocking(lower), cleanup: isSessionCleanup(lower) });
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
  const patches = [
    wrapMethod(proto, 'sendCommand', owner, isActive, makeSendCommandWrapper(host, slot, owner, isActive), { checksActive: true }),
    // The connection's handshake, its offline-queue flush and its resends run in the context it was opened in.
    wrapMethod(proto, 'connect', owner, isActive, makeOpensOutsideDeadline),
  ];
  return patches.filter((patch) => patch !== undefined);
}

function makeSendCommandWrapper(host: ClientHost, slot: DriverSpanSlot, owner: object, isActive: () => boolean) {
  return (original: AnyFunction): AnyFunction => {
    // An instrumentation-ioredis registered before us wraps the method below
    // ours: fixed for this wrapper's life, since `original` is.
    const instrumentedBelow = isShimmerWrapper(original);
    return function sendCommand(this: unknown, ...args: unknown[]): unknown {
      // Disabled: every call passes straight through (wrapMethod's checksActive).
      if (!isActive()) return original.apply(this, args);
      const command = args[0] as RedisCommand | undefined;
      // An instrumentation-ioredis on top of us announced its span for this command through its requestHook a moment ago.
      const outerSpan = slot.take(command?.args);
      const cut = command?.[CUT_BY_DEADLINE];
      if (cut !== undefined) {
        // Sent again after a reconnect: the caller was told at the cutoff; nothing goes out now. A wrapper
        // on top of ours (instrumentation-ioredis) started a span for this send and ends it through reject.
        process.nextTick(() => command!.reject(cut));
        return command!.promise;
      }
      const settings = host.settings;
      // A DeadlineSpanProcessor looked at the deadline as the outer span started, in this same
      // synchronous step and context: that look is ours (see spanStartLook). Otherwise we look.
      const look = outerSpan === undefined ? undefined : spanStartLook(outerSpan);
      const seen = look?.deadline;
      const ctx = seen === undefined ? contextApi.active() : undefined;
      const deadline = ctx === undefined ? (settings.ioredis ? seen : undefined) : statementDeadline(host, 'ioredis', ctx);
      if (deadline === undefined || command === undefined || typeof command.reject !== 'function' || commandKind(command.name).cleanup) {
        return instrumentedBelow ? slot.passThrough(original, this, args) : original.apply(this, args);
      }
      const observe = settings.mode === 'observe';
      const guard = new RedisCommandGuard(deadline, observe, 'redis', undefined, command);
      if (outerSpan !== undefined) guard.adoptSpan(outerSpan);
      // The one clock read (the processor's, when it found budget left): refusal, the blocking timeout
      // and arming all go by it. Expired or aborted at that look, budgetLeft records the abort.
      const seenLeft = ctx === undefined ? look!.startBudgetLeftMs : undefined;
      const left = seenLeft !== undefined && seenLeft > 0 ? seenLeft : budgetLeft(deadline);
      const minUsefulMs = settings.minUsefulMs;
      const refusal = mayStart(left, minUsefulMs) ? undefined : refusalAt(deadline, left, guard.operation, minUsefulMs);
      // Our own span when no other instrumentation makes one for this call: none below us (or the command is
      // refused and never reaches it), and none on top of us, where the method found on the client is ours.
      // That lookup goes up ioredis's prototype chain, so it is made last, only when it decides.
      if (outerSpan === undefined && (!instrumentedBelow || refusal !== undefined) && isOwnWrapper((this as Exports).sendCommand, owner)) {
        const name = guard.name;
        const options = (this as { options?: { host?: unknown; port?: unknown } }).options ?? {};
        const attributes: Record<string, string | number> = { 'db.system.name': 'redis', 'db.operation.name': name };
        if (typeof options.host === 'string') attributes['server.address'] = options.host;
        if (typeof options.port === 'number') attributes['server.port'] = options.port;
        // No outer span, so no look but ours: ctx is the context read above.
        guard.startOwnSpan(host.tracer, ctx!, { name, attributes });
      }
      if (refusal !== undefined) {
        if (!observe) {
          guard.refuse(refusal);
          if (guard.name === 'exec' && args[1] === undefined) {
            // A MULTI sent earlier would stay open on the shared connection, and every later command of every
            // request would answer QUEUED and be committed by the next EXEC: clean up before the caller hears.
            const send = (cleanup: object) => (instrumentedBelow ? slot.passThrough(original, this, [cleanup]) : original.call(this, cleanup));
            discardInsteadOfExec(command.constructor as new (name: string) => object, send);
          }
          // On the next tick: an instrumentation-ioredis wrapped on top of us patches
          // `command.reject` once we return, and ends its span only through it.
          process.nextTick(() => command.reject(refusal));
          return command.promise;
        }
        guard.markWouldReject();
      }
      if (!observe && mayBeBlocking(command.name) && commandKind(command.name).blocking) {
        guard.deliversLateReply = clampBlockingTimeout(guard.name, command.args, left);
      }
      guard.arm(guard);
      // Before the send: ioredis rejects some commands inside sendCommand (a
      // closed connection, subscriber mode, no offline queue), and only a
      // wrapper already in place sees that, or the guard would hold the
      // deadline armed until its cutoff. An instrumentation-ioredis, below or on
      // top of us, puts its own wrappers on top of these.
      guard.settleOnReply();
      // Only an instrumentation below us calls its requestHook (with its span)
      // from inside this call; on top of us it has called it already, and the
      // span is in `outerSpan`.
      return instrumentedBelow ? slot.dispatch(guard, original, this, args) : original.apply(this, args);
    };
  };
}

/**
 * One command between sendCommand and its reply; the statement guard is also
 * what stops it at the cutoff. No constructor and no fields of its own (the
 * command is the statement's `subject`): V8 then builds it with DbStatement's
 * constructor alone, one class level, where an own constructor cost a second
 * construct call per command (TurboFan's inlining budget runs out in
 * sendCommand before it reaches the base constructor).
 */
class RedisCommandGuard extends DbStatement implements CutoffHandler {
  /**
   * A blocking command whose timeout now ends by the cutoff: the server
   * answers it on its own, at most one event-loop turn late (docs/databases.md),
   * and its reply may carry an element it has already removed (BLPOP), so the
   * reply is awaited past the cutoff and delivered, never dropped.
   */
  deliversLateReply = false;

  private get command(): RedisCommand {
    return this.subject as RedisCommand;
  }

  /** The command's name in lower case, as spans, errors and the tables here use it: looked up only when one of them needs it. */
  get name(): string {
    return commandKind(this.command.name).name;
  }

  /** `redis.get`: built only when an error or a refusal needs it. */
  override get operation(): string {
    return `redis.${this.name}`;
  }

  protected override isWrite(): boolean {
    return !READ_COMMANDS.has(this.name);
  }

  /**
   * Tells the span processor the command is in flight on this span: the span
   * then reads `completed` if it ends on the reply, however the reply and the
   * span's end fall around the cutoff instant, and the guard writes nothing
   * when the command completes. instrumentation-ioredis ends its span in its
   * own `resolve` wrapper, on top of ours, before the guard settles; the
   * guard's other outcomes are written before the span ends (a cutoff settles
   * the guard and then rejects the command), and a written outcome wins.
   * Observe mode writes no `completed`, so it marks nothing.
   */
  protected override spanAdopted(span: Span): void {
    if (!this.observe) this.spanEndsCompleted = markStatementInFlight(span);
  }

  onCutoff(): void {
    // The reply settles the guard when it comes; a reply that ends past the cutoff is still `completed`.
    if (this.deliversLateReply) return;
    const cutError = this.errorFor();
    this.settle(cutError, 'not_possible');
    this.command[CUT_BY_DEADLINE] = cutError;
    this.command.reject(cutError);
  }

  /**
   * Settles the statement when ioredis resolves or rejects the command.
   * Closures, not shared functions that find the guard through `this`:
   * instrumentation-ioredis calls the functions it wrapped unbound.
   */
  settleOnReply(): void {
    const { command } = this;
    const { resolve, reject } = command;
    command.resolve = (value: unknown) => {
      // A late reply of a blocking command (see deliversLateReply) is the command's result.
      if (this.deliversLateReply) this.reason = undefined;
      this.settle();
      resolve.call(command, value);
    };
    command.reject = (err: unknown) => {
      if (this.deliversLateReply) this.reason = undefined;
      this.settle(err);
      reject.call(command, err);
    };
  }
}
