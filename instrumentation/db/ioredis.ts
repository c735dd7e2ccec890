import type { Span } from '@opentelemetry/api';
import { context as contextApi } from '@opentelemetry/api';
import { budgetLeft, mayStart, refusalAt } from '../call/budget';
import type { ClientHost } from '../call/host';
import { isOwnWrapper, isShimmerWrapper, wrapMethod, type MethodPatch } from '../wrap';
import { statementDeadline } from './begin';
import { makeOpensOutsideDeadline } from './connection-context';
import type { DriverSpanSlot } from './driver-span';
import { clampBlockingTimeout, mayBeBlocking } from './redis-blocking';
import { commandKind, CUT_BY_DEADLINE, RedisCommandGuard, type RedisCommand } from './redis-command-guard';
import { isPipelineWrite, makePipelineSendCommand, ownSpanShape, patchAutoPipelinedCalls, queuedGuard, refusesWholeBatch } from './redis-pipeline';
import { cleanupAfterCut, discardInsteadOfExec, sendCleanup } from './redis-session';

type AnyFunction = (this: unknown, ...args: unknown[]) => unknown;
type Exports = Record<string, unknown>;

/**
 * Redis#sendCommand under an active deadline (every command of ioredis 5 and
 * 6 goes through it, `multi`'s commands and pipelines' writes included).
 * Redis cannot cancel a command: one in flight at the cutoff rejects with
 * DeadlineExceededError and its reply is dropped when it comes, and blocking
 * commands get their timeout clamped to the time left so the server itself
 * gives up by the cutoff. Commands queued in a pipeline are judged by their
 * caller's deadline (redis-pipeline.ts).
 */
export function patchIoredis(moduleExports: Exports, host: ClientHost, slot: DriverSpanSlot, owner: object, isActive: () => boolean): MethodPatch[] {
  const Redis = (typeof moduleExports.default === 'function' ? moduleExports.default : moduleExports) as { prototype?: Exports };
  const proto = Redis.prototype;
  if (proto === undefined || typeof proto.sendCommand !== 'function') return [];
  const Pipeline = moduleExports.Pipeline as { prototype?: Exports } | undefined;
  const commander = Object.getPrototypeOf(proto) as Exports | null;
  const patches = [
    wrapMethod(proto, 'sendCommand', owner, isActive, makeSendCommandWrapper(host, slot, owner, isActive), { checksActive: true }),
    // The connection's handshake, its offline-queue flush and its resends run in the context it was opened in.
    wrapMethod(proto, 'connect', owner, isActive, makeOpensOutsideDeadline),
    Pipeline?.prototype === undefined ? undefined : wrapMethod(Pipeline.prototype, 'sendCommand', owner, isActive, makePipelineSendCommand(host, owner, isActive), { checksActive: true }),
    ...(commander === null || commander === Object.prototype ? [] : patchAutoPipelinedCalls(commander, host, owner, isActive)),
  ];
  return patches.filter((patch) => patch !== undefined);
}

function makeSendCommandWrapper(host: ClientHost, slot: DriverSpanSlot, owner: object, isActive: () => boolean) {
  return (original: AnyFunction): AnyFunction => {
    // An instrumentation-ioredis registered before us wraps the method below
    // ours: fixed for this wrapper's life, since `original` is.
    const instrumentedBelow = isShimmerWrapper(original);

    /** Sends a clean-up command on `client` below our guard (never refused), through an instrumentation below us if any. */
    const sendBelow =
      (client: unknown) =>
      (cleanup: object): unknown =>
        instrumentedBelow ? slot.passThrough(original, client, [cleanup]) : original.call(client, cleanup);

    /**
     * One command of a pipeline's write. Never refused for itself, never left
     * out (the batch would never be written), never judged by the context of
     * the write: by the deadline of the caller that queued it, if any.
     */
    function writeQueued(client: unknown, args: unknown[], stream: object, outerSpan: Span | undefined): unknown {
      const guard = queuedGuard(args[0]);
      const batch = guard?.batch;
      if (guard === undefined || batch === undefined) return instrumentedBelow ? slot.passThrough(original, client, args) : original.apply(client, args);
      if (outerSpan !== undefined) guard.adoptSpan(outerSpan);
      const command = args[0] as RedisCommand;
      const minUsefulMs = host.settings.minUsefulMs;
      if (refusesWholeBatch(stream, batch, minUsefulMs)) {
        // Every command of the batch is refused, so nothing of it is written: rejecting each one answers the pipeline.
        const refusal = refusalAt(guard.deadline, budgetLeft(guard.deadline), guard.operation, minUsefulMs) ?? guard.errorFor();
        if (!guard.settled) guard.refuse(refusal);
        process.nextTick(() => command.reject(refusal));
        return command.promise;
      }
      if (!guard.settled && !guard.observe) {
        const left = budgetLeft(guard.deadline);
        if (guard.deliversLateReply) {
          // Clamped to what is left (1 ms when nothing is), and its reply delivered: it may carry an element.
          clampBlockingTimeout(guard.name, command.args, left);
        } else if (!mayStart(left, minUsefulMs)) {
          // Its caller is released once it is written; the others' batch goes as it is.
          batch.releaseWhenWritten ??= refusalAt(guard.deadline, left, guard.operation, minUsefulMs);
          guard.reason ??= batch.releaseWhenWritten;
        }
      }
      if (!batch.armed && !guard.settled) {
        batch.armed = true;
        guard.arm(guard);
      }
      const sent = instrumentedBelow ? slot.dispatch(guard, original, client, args) : original.apply(client, args);
      batch.written = true;
      const release = batch.releaseWhenWritten;
      if (release !== undefined) process.nextTick(() => guard.releaseFromBatch(batch, release));
      return sent;
    }

    return function sendCommand(this: unknown, ...args: unknown[]): unknown {
      // Disabled: every call passes straight through (wrapMethod's checksActive).
      if (!isActive()) return original.apply(this, args);
      const command = args[0] as RedisCommand | undefined;
      // An instrumentation-ioredis on top of us announced its span for this command through its requestHook a moment ago.
      const outerSpan = slot.take(command?.args);
      if (isPipelineWrite(args[1])) return writeQueued(this, args, args[1], outerSpan);
      const cut = command?.[CUT_BY_DEADLINE];
      if (cut !== undefined) {
        // Sent again after a reconnect: the caller was told at the cutoff; nothing goes out now. A wrapper
        // on top of ours (instrumentation-ioredis) started a span for this send and ends it through reject.
        process.nextTick(() => command!.reject(cut));
        return command!.promise;
      }
      const settings = host.settings;
      const ctx = contextApi.active();
      const deadline = statementDeadline(host, 'ioredis', ctx);
      if (deadline === undefined || command === undefined || typeof command.reject !== 'function' || commandKind(command.name).cleanup) {
        return instrumentedBelow ? slot.passThrough(original, this, args) : original.apply(this, args);
      }
      const observe = settings.mode === 'observe';
      const guard = new RedisCommandGuard(deadline, observe, 'redis', undefined, command);
      if (outerSpan !== undefined) guard.adoptSpan(outerSpan);
      // The one clock read: refusal, the blocking timeout and arming all go by it. Expired or aborted, budgetLeft records the abort.
      const left = budgetLeft(deadline);
      const minUsefulMs = settings.minUsefulMs;
      const refusal = mayStart(left, minUsefulMs) ? undefined : refusalAt(deadline, left, guard.operation, minUsefulMs);
      // Our own span when no other instrumentation makes one for this call: none below us (or the command is
      // refused and never reaches it), and none on top of us, where the method found on the client is ours.
      // That lookup goes up ioredis's prototype chain, so it is made last, only when it decides.
      if (outerSpan === undefined && (!instrumentedBelow || refusal !== undefined) && isOwnWrapper((this as Exports).sendCommand, owner)) {
        guard.startOwnSpan(host.tracer, ctx, ownSpanShape(this as Exports, guard.name));
      }
      if (refusal !== undefined) {
        if (!observe) {
          guard.refuse(refusal);
          if (guard.name === 'exec') {
            // A MULTI sent earlier would stay open on the shared connection, and every later command of every
            // request would answer QUEUED and be committed by the next EXEC: clean up before the caller hears.
            discardInsteadOfExec(command.constructor as new (name: string) => object, sendBelow(this));
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
      const cleanup = cleanupAfterCut(guard.name);
      if (cleanup !== undefined) {
        // A MULTI or WATCH the cutoff rejects in flight may still open its state on the server: end it there too.
        const send = sendBelow(this);
        guard.afterCut = () => sendCleanup(command.constructor as new (name: string) => object, send, cleanup);
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

