/**
 * ioredis pipelines and auto-pipelining. A batch is written from `exec()` or a `setImmediate` in nobody's context: each
 * command is judged by the deadline where its caller queued it, and a batch is never refused, delayed or cut for one member.
 */
import { context, type Context } from '@opentelemetry/api';
import { withoutDeadline } from '../../src/context';
import type { Deadline } from '../../src/deadline';
import { budgetLeft, mayStart, refusalFor } from '../call/budget';
import type { ClientHost } from '../call/host';
import { isOwnWrapper, isShimmerWrapper, unwrappedBy, wrapMethod, type MethodPatch } from '../wrap';
import { type AnyFunction, type Exports, statementDeadline } from './driver-call';
import { dbSpanShape } from './driver-span';
import type { SpanShape } from './statement';
import { blockingTimeoutIndex } from './redis-blocking';
import { commandKind, RedisCommandGuard, type PipelineMember, type RedisCommand } from './redis-command-guard';

interface ClientLike {
  isPipeline?: unknown;
  options?: { enableAutoPipelining?: unknown; host?: unknown; port?: unknown };
  sendCommand?: unknown;
}

/** Commands queued under a deadline → their guard, until they are written (and after: ioredis may write them again). */
const queued = new WeakMap<object, RedisCommandGuard>();

/** A pipeline write (the `stream` ioredis gives Redis#sendCommand) → whether its whole batch is refused. */
const batchRefused = new WeakMap<object, boolean>();

/** What the current Pipeline#sendCommand queued under a deadline: how an auto-pipelined call finds its command. */
let lastQueued: RedisCommandGuard | undefined;

/** The deadline and context of the auto-pipelined call now queuing its command (it runs without the deadline). */
let queuingCaller: { deadline: Deadline; ctx: Context } | undefined;

export function isPipelineWrite(stream: unknown): stream is object {
  return typeof stream === 'object' && stream !== null && (stream as { isPipeline?: unknown }).isPipeline === true;
}

export function queuedGuard(command: unknown): RedisCommandGuard | undefined {
  return typeof command === 'object' && command !== null ? queued.get(command) : undefined;
}

/** Our own span for a command, as instrumentation-ioredis names its spans. */
export function ownSpanShape(client: ClientLike, name: string): SpanShape {
  return dbSpanShape(name, 'redis', name, undefined, client.options?.host, client.options?.port);
}

/** Whether instrumentation-ioredis makes the spans of `client`'s commands, below or on top of our wrapper. */
function instrumentedElsewhere(client: ClientLike, owner: object): boolean {
  const current = client.sendCommand;
  if (typeof current !== 'function' || !isOwnWrapper(current, owner)) return true;
  return isShimmerWrapper(unwrappedBy(current as AnyFunction, owner));
}

/** Whether every member's deadline refuses the batch now: decided once per write, at its first command. */
export function refusesWholeBatch(stream: object, batch: PipelineMember, minUsefulMs: number): boolean {
  const known = batchRefused.get(stream);
  if (known !== undefined) return known;
  const { members, pipeline } = batch;
  const whole =
    members.length === pipeline.length &&
    members.every((member) => member !== null && !member.observe && (member.settled || !mayStart(budgetLeft(member.deadline), minUsefulMs)));
  batchRefused.set(stream, whole);
  return whole;
}

/** Pipeline#sendCommand: queues a command in its caller's context, with a guard if a deadline is active there. */
export function makePipelineSendCommand(host: ClientHost, owner: object) {
  return (original: AnyFunction): AnyFunction =>
    function sendCommand(this: unknown, ...args: unknown[]): unknown {
      const pipeline = this as { length?: unknown; redis?: ClientLike };
      const command = args[0] as RedisCommand | undefined;
      const caller = queuingCaller;
      queuingCaller = undefined;
      const ctx = caller?.ctx ?? context.active();
      const deadline = caller !== undefined ? caller.deadline : statementDeadline(host, 'ioredis', ctx);
      const members = membersOf(pipeline);
      if (deadline === undefined || command === undefined || typeof command.reject !== 'function' || commandKind(command.name).cleanup) {
        members.push(null);
        return original.apply(this, args);
      }
      const guard = new RedisCommandGuard(deadline, host.settings.mode === 'observe', 'redis', undefined, command);
      guard.batch = { members, pipeline, releaseCaller: undefined, written: false, armed: false, releaseWhenWritten: undefined };
      members.push(guard);
      queued.set(command, guard);
      // Parented where its caller queued it, unless instrumentation-ioredis makes a span when it is written.
      if (!instrumentedElsewhere(pipeline.redis ?? {}, owner)) guard.startOwnSpan(host.tracer, ctx, ownSpanShape(pipeline.redis ?? {}, guard.name));
      // A blocking command (BLPOP in a batch) is never released before its reply: that reply may carry an element.
      guard.deliversLateReply = !guard.observe && guard.kind.blocking && blockingTimeoutIndex(guard.name, command.args) >= 0;
      guard.settleOnReply();
      lastQueued = guard;
      return original.apply(this, args);
    };
}

const BATCH_MEMBERS = new WeakMap<object, (RedisCommandGuard | null)[]>();

function membersOf(pipeline: object): (RedisCommandGuard | null)[] {
  let members = BATCH_MEMBERS.get(pipeline);
  if (members === undefined) BATCH_MEMBERS.set(pipeline, (members = []));
  return members;
}

const NOT_COMMANDS = new Set(['constructor', 'getBuiltinCommands', 'createBuiltinCommand', 'defineCommand', 'sendCommand']);

/** Every command method of ioredis's Commander, for auto-pipelined calls only: at the cutoff the caller's promise is rejected, not the batch. */
export function patchAutoPipelinedCalls(commanderProto: Exports, host: ClientHost, owner: object, isActive: () => boolean): MethodPatch[] {
  return Object.getOwnPropertyNames(commanderProto).flatMap((method) => {
    if (NOT_COMMANDS.has(method) || typeof Object.getOwnPropertyDescriptor(commanderProto, method)?.value !== 'function') return [];
    return wrapMethod(commanderProto, method, owner, isActive, (original) => makeAutoPipelinedCall(original, method, host)) ?? [];
  });
}

function makeAutoPipelinedCall(original: AnyFunction, method: string, host: ClientHost): AnyFunction {
  return function autoPipelinedCall(this: unknown, ...args: unknown[]): unknown {
    const client = this as ClientLike;
    if (client.isPipeline === true || client.options?.enableAutoPipelining !== true) return original.apply(this, args);
    const ctx = context.active();
    const deadline = statementDeadline(host, 'ioredis', ctx);
    if (deadline === undefined) return original.apply(this, args);
    const callback = typeof args[args.length - 1] === 'function' ? (args.pop() as (err: unknown, value?: unknown) => void) : undefined;
    const observe = host.settings.mode === 'observe';
    const name = method === 'call' || method === 'callBuffer' ? String(args[0]) : method.replace(/Buffer$/, '');
    const refusal = observe ? undefined : refusalFor(deadline, `redis.${name.toLowerCase()}`, host.settings.minUsefulMs);
    if (refusal !== undefined) {
      // Nothing is queued, so nothing is sent: a refusal on a span of ours (no other instrumentation sees this call).
      const guard = new RedisCommandGuard(deadline, false, 'redis', undefined, { name, args });
      guard.startOwnSpan(host.tracer, ctx, ownSpanShape(client, guard.name));
      guard.refuse(refusal);
      return withCallback(Promise.reject(refusal), callback);
    }
    const outer = lastQueued;
    lastQueued = undefined;
    let result: unknown;
    let guard: RedisCommandGuard | undefined;
    try {
      // Without the deadline: the batch's setImmediate keeps this context, and the whole batch would run under it.
      queuingCaller = { deadline, ctx };
      result = context.with(withoutDeadline(ctx), () => original.apply(this, args));
    } finally {
      queuingCaller = undefined;
      guard = lastQueued as RedisCommandGuard | undefined;
      lastQueued = outer;
    }
    const batch = guard?.batch;
    // Sent directly (a command ioredis never auto-pipelines): Redis#sendCommand guarded it.
    if (guard === undefined || batch === undefined || !(result instanceof Promise)) return withCallback(result, callback);
    const released = new Promise((resolve, reject) => {
      batch.releaseCaller = reject;
      (result as Promise<unknown>).then(resolve, reject);
    });
    batch.armed = true;
    guard.armFor(guard);
    return withCallback(released, callback);
  };
}

/** A Node-style callback on `result`, as ioredis's standard-as-callback does. */
function withCallback(result: unknown, callback: ((err: unknown, value?: unknown) => void) | undefined): unknown {
  if (callback !== undefined && result instanceof Promise) {
    result.then(
      (value: unknown) => process.nextTick(callback, null, value),
      (error: unknown) => process.nextTick(callback, error),
    );
  }
  return result;
}
