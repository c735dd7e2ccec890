import type { Span } from '@opentelemetry/api';
import { markStatementInFlight } from '../../src/processor/statement-in-flight';
import { isBlocking } from './redis-blocking';
import { DbStatement, type CutoffHandler } from './statement';

export interface RedisCommand {
  name: string;
  args: unknown[];
  promise: Promise<unknown>;
  reject(err: unknown): void;
  resolve(value: unknown): void;
  /** Set when the cutoff rejected the command: the error it was rejected with. */
  [CUT_BY_DEADLINE]?: Error;
}

/**
 * Marks a command the cutoff rejected: ioredis resends unanswered commands
 * when its connection comes back, outside the deadline's context, and one the
 * caller was told failed must not run then (a BLPOP would pop for nobody).
 */
export const CUT_BY_DEADLINE = Symbol('otel-deadline.cut-by-deadline');

/** Commands that only read: one the cutoff reached in flight left nothing half-done. Anything else is a write. */
const READ_COMMANDS = new Set(
  'get mget exists strlen getrange hget hmget hgetall hkeys hvals hlen hexists lrange llen lindex smembers sismember scard zrange zrangebyscore zscore zcard zrank type ttl pttl scan sscan hscan zscan ping echo info dbsize xrange xrevrange xlen xread keys time'.split(
    ' ',
  ),
);

/**
 * DISCARD, UNWATCH, RESET end a transaction or restore the connection's
 * session state, which outlives the request: sent whatever the clock says.
 */
const CLEANUP = new Set(['discard', 'unwatch', 'reset']);

/** A command name in lower case (what spans, errors and the tables use), and what the guard does with it. */
export function commandKind(name: unknown): { name: string; blocking: boolean; cleanup: boolean } {
  const lower = String(name).toLowerCase();
  return { name: lower, blocking: isBlocking(lower), cleanup: CLEANUP.has(lower) };
}

/** DISCARD ends a MULTI and drops what it queued (and its WATCH); UNWATCH a WATCH whose MULTI never went. Harmless when nothing is open. */
export const DISCARD_AND_UNWATCH: readonly string[] = ['discard', 'unwatch'];

/** What ends the state a MULTI or WATCH cut in flight may have opened on the server; undefined for any other command. */
export function cleanupAfterCut(name: string): readonly string[] | undefined {
  if (name === 'multi') return DISCARD_AND_UNWATCH;
  if (name === 'watch') return ['unwatch'];
  return undefined;
}

/**
 * Sends `names` below our guard (`send`), now and in order, replies ignored:
 * in place of a refused EXEC, nothing queued is committed and no later
 * command of another request answers QUEUED. `Command` is ioredis's public
 * class of the refused command.
 */
export function sendCleanup(Command: new (name: string) => object, send: (command: object) => unknown, names: readonly string[]): void {
  for (const name of names) {
    const sent = send(new Command(name)) as { promise?: Promise<unknown> } | undefined;
    const reply = sent?.promise ?? sent;
    if (reply instanceof Promise) reply.catch(() => undefined);
  }
}

/** One command (the statement's `subject`) from sendCommand, or its queuing in a pipeline, to its reply. */
export class RedisCommandGuard extends DbStatement implements CutoffHandler {
  /** A blocking command clamped to end by the cutoff: its reply may carry an element the server removed (BLPOP), so it is awaited and delivered. */
  deliversLateReply = false;

  /** A command queued in a pipeline: written with its batch, which is never cut for it; at the cutoff its caller is released. */
  batch: PipelineMember | undefined = undefined;

  /** Set for a MULTI or WATCH sent on its own: ends the state it may have opened on the server when the cutoff rejects it. */
  afterCut: (() => void) | undefined = undefined;

  private get command(): RedisCommand {
    return this.subject as RedisCommand;
  }

  get name(): string {
    return commandKind(this.command.name).name;
  }

  override get operation(): string {
    return `redis.${this.name}`;
  }

  protected override isWrite(): boolean {
    return !READ_COMMANDS.has(this.name);
  }

  /**
   * instrumentation-ioredis ends its span in its own `resolve` wrapper, before
   * the guard settles: the span processor then writes `completed` for a span
   * that ends on its reply. Other outcomes are written before the span ends.
   */
  protected override spanAdopted(span: Span): void {
    if (!this.observe) this.spanEndsCompleted = markStatementInFlight(span);
  }

  onCutoff(): void {
    // The reply settles the guard when it comes; a reply that ends past the cutoff is still `completed`.
    if (this.deliversLateReply) return;
    const cutError = this.errorFor();
    const batch = this.batch;
    if (batch !== undefined) return this.releaseFromBatch(batch, cutError);
    this.settle(cutError, 'not_possible');
    this.command[CUT_BY_DEADLINE] = cutError;
    this.command.reject(cutError);
    this.afterCut?.();
  }

  /**
   * Settles the guard when ioredis resolves or rejects the command, in that
   * call: the promise would settle it a microtask later, after a driver
   * instrumentation's span has ended (docs/internals.md).
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

  /**
   * Releases the caller of a command in a batch, never the batch: an
   * auto-pipelined caller's promise rejects now; an explicit pipeline's command
   * once written (the pipeline counts replies from its flush on). The command
   * still goes out and its reply is dropped.
   */
  releaseFromBatch(batch: PipelineMember, error: Error): void {
    if (batch.releaseCaller === undefined && !batch.written) {
      batch.releaseWhenWritten = error;
      return;
    }
    this.settle(error, 'not_possible');
    if (batch.releaseCaller !== undefined) batch.releaseCaller(error);
    else this.command.reject(error);
  }
}

/** How a command queued in a pipeline stands: see RedisCommandGuard.batch. */
export interface PipelineMember {
  /** Every command queued in the same pipeline, in order: null for one with no deadline. */
  readonly members: (RedisCommandGuard | null)[];
  readonly pipeline: { readonly length?: unknown };
  /** Auto-pipelining: rejects the promise the caller holds. */
  releaseCaller: ((error: Error) => void) | undefined;
  written: boolean;
  /** Auto-pipelined commands are armed when called, explicit pipelines' when written. */
  armed: boolean;
  /** An explicit pipeline's command cut before its batch was written: released right after the write. */
  releaseWhenWritten: Error | undefined;
}

