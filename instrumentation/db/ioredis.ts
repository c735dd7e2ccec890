import { context, type Span } from '@opentelemetry/api';
import { budgetLeft, mayStart, refusalAt, refusalFor } from '../call/budget';
import type { ClientHost } from '../call/host';
import { wrapMethod, type MethodPatch } from '../wrap';
import { type AnyFunction, type Exports, makeOpensOutsideDeadline, statementDeadline } from './driver-call';
import { needsOwnSpan, type DriverSpanSlot } from './driver-span';
import { clampBlockingTimeout } from './redis-blocking';
import { cleanupAfterCut, commandKind, CUT_BY_DEADLINE, DISCARD_AND_UNWATCH, RedisCommandGuard, sendCleanup, type RedisCommand } from './redis-command-guard';
import { isPipelineWrite, makePipelineSendCommand, ownSpanShape, patchAutoPipelinedCalls, queuedGuard, refusesWholeBatch } from './redis-pipeline';

/**
 * Redis#sendCommand (every ioredis 5/6 command goes through it). Redis cannot cancel a command: one in flight at the
 * cutoff rejects and its reply is dropped; blocking commands get their timeout clamped. Pipelines: redis-pipeline.ts.
 */
export function patchIoredis(moduleExports: Exports, host: ClientHost, slot: DriverSpanSlot, owner: object, isActive: () => boolean): MethodPatch[] {
  const Redis = (typeof moduleExports.default === 'function' ? moduleExports.default : moduleExports) as { prototype?: Exports };
  const proto = Redis.prototype;
  if (proto === undefined || typeof proto.sendCommand !== 'function') return [];
  const Pipeline = moduleExports.Pipeline as { prototype?: Exports } | undefined;
  const commander = Object.getPrototypeOf(proto) as Exports | null;
  const patches = [
    wrapMethod(proto, 'sendCommand', owner, isActive, makeSendCommandWrapper(host, slot, owner)),
    // The connection's handshake, its offline-queue flush and its resends run in the context it was opened in.
    wrapMethod(proto, 'connect', owner, isActive, makeOpensOutsideDeadline),
    Pipeline?.prototype === undefined ? undefined : wrapMethod(Pipeline.prototype, 'sendCommand', owner, isActive, makePipelineSendCommand(host, owner)),
    ...(commander === null || commander === Object.prototype ? [] : patchAutoPipelinedCalls(commander, host, owner, isActive)),
  ];
  return patches.filter((patch) => patch !== undefined);
}

function makeSendCommandWrapper(host: ClientHost, slot: DriverSpanSlot, owner: object) {
  return (original: AnyFunction): AnyFunction => {
    const cleanUp = (client: unknown, command: RedisCommand, names: readonly string[]) =>
      sendCleanup(command.constructor as new (name: string) => object, (cleanup) => slot.passThrough(original, client, [cleanup]), names);

    /** One command of a pipeline's write: never refused or left out for itself. */
    function writeQueued(client: unknown, args: unknown[], stream: object, outerSpan: Span | undefined): unknown {
      const guard = queuedGuard(args[0]);
      const batch = guard?.batch;
      if (guard === undefined || batch === undefined) return slot.passThrough(original, client, args);
      if (outerSpan !== undefined) guard.adoptSpan(outerSpan);
      const command = args[0] as RedisCommand;
      const minUsefulMs = host.settings.minUsefulMs;
      if (refusesWholeBatch(stream, batch, minUsefulMs)) {
        // Nothing of the batch is written: rejecting each command answers the pipeline.
        const refusal = refusalFor(guard.deadline, guard.operation, minUsefulMs) ?? guard.errorFor();
        if (!guard.settled) guard.refuse(refusal);
        process.nextTick(() => command.reject(refusal));
        return command.promise;
      }
      if (!guard.settled && !guard.observe) {
        const left = budgetLeft(guard.deadline);
        if (guard.deliversLateReply) {
          // Clamped to what is left (1 ms when nothing is), and its reply delivered: it may carry an element.
          clampBlockingTimeout(guard.name, command.args, left);
        } else {
          // Its caller is released once it is written; the others' batch goes as it is.
          batch.releaseWhenWritten ??= refusalAt(guard.deadline, left, guard.operation, minUsefulMs);
          guard.reason ??= batch.releaseWhenWritten;
        }
      }
      if (!batch.armed && !guard.settled) {
        batch.armed = true;
        guard.armFor(guard);
      }
      const sent = slot.dispatch(guard, original, client, args);
      batch.written = true;
      const release = batch.releaseWhenWritten;
      if (release !== undefined) process.nextTick(() => guard.releaseFromBatch(batch, release));
      return sent;
    }

    return function sendCommand(this: unknown, ...args: unknown[]): unknown {
      const command = args[0] as RedisCommand | undefined;
      const outerSpan = slot.take(command?.args);
      if (isPipelineWrite(args[1])) return writeQueued(this, args, args[1], outerSpan);
      const cut = command?.[CUT_BY_DEADLINE];
      if (cut !== undefined) {
        // Resent after a reconnect: the caller was told at the cutoff; nothing goes out now.
        process.nextTick(() => command!.reject(cut));
        return command!.promise;
      }
      const settings = host.settings;
      const ctx = context.active();
      const deadline = statementDeadline(host, 'ioredis', ctx);
      if (deadline === undefined || command === undefined || typeof command.reject !== 'function' || commandKind(command.name).cleanup) {
        return slot.passThrough(original, this, args);
      }
      const observe = settings.mode === 'observe';
      const guard = new RedisCommandGuard(deadline, observe, 'redis', undefined, command);
      if (outerSpan !== undefined) guard.adoptSpan(outerSpan);
      const left = budgetLeft(deadline);
      const refusal = mayStart(left, settings.minUsefulMs) ? undefined : refusalAt(deadline, left, guard.operation, settings.minUsefulMs);
      // Our own span unless instrumentation-ioredis makes one: below us (if the command reaches it), or on top.
      if (needsOwnSpan(outerSpan, original, (this as Exports).sendCommand, owner, refusal !== undefined)) {
        guard.startOwnSpan(host.tracer, ctx, ownSpanShape(this as Exports, guard.name));
      }
      if (refusal !== undefined) {
        if (!observe) {
          guard.refuse(refusal);
          if (guard.name === 'exec') {
            // A MULTI left open would make every later command on the connection answer QUEUED.
            cleanUp(this, command, DISCARD_AND_UNWATCH);
          }
          // On the next tick: an instrumentation-ioredis on top of us wraps `command.reject` once we return.
          process.nextTick(() => command.reject(refusal));
          return command.promise;
        }
        guard.markWouldReject();
      }
      if (!observe && guard.kind.blocking) {
        guard.deliversLateReply = clampBlockingTimeout(guard.name, command.args, left);
      }
      const cleanup = cleanupAfterCut(guard.name);
      // A MULTI or WATCH the cutoff rejects in flight may still open its state on the server: end it there too.
      if (cleanup !== undefined) guard.afterCut = () => cleanUp(this, command, cleanup);
      guard.armFor(guard);
      // Before the send: ioredis rejects some commands inside sendCommand (closed connection, subscriber mode).
      guard.settleOnReply();
      return slot.dispatch(guard, original, this, args);
    };
  };
}

