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
 * Marks a command the cutoff rejected. ioredis sends a command again through
 * sendCommand when its connection comes back (the commands that had no reply
 * yet, with autoResendUnfulfilledCommands, its default, and the offline
 * queue), from its own event handler, outside the deadline's context: nothing
 * would stop it, and a command the caller has already been told failed would
 * run after its cutoff (a BLPOP could pop an element nobody receives).
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

/**
 * One command between sendCommand (or its queuing in a pipeline) and its
 * reply; the statement guard is also what stops it at the cutoff. The
 * command is the statement's `subject`.
 */
export class RedisCommandGuard extends DbStatement implements CutoffHandler {
  /**
   * A blocking command whose timeout now ends by the cutoff: the server
   * answers it on its own, at most one event-loop turn late (docs/databases.md),
   * and its reply may carry an element it has already removed (BLPOP), so the
   * reply is awaited past the cutoff and delivered, never dropped.
   */
  deliversLateReply = false;

  /**
   * Set for a command queued in a pipeline (issue 35 §1): it is written when
   * its batch is, the batch is never cut for it, and its caller is released
   * at the cutoff in the way its kind of pipeline allows (see onCutoff).
   */
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
    const batch = this.batch;
    if (batch !== undefined) return this.releaseFromBatch(batch, cutError);
    this.settle(cutError, 'not_possible');
    this.command[CUT_BY_DEADLINE] = cutError;
    this.command.reject(cutError);
    this.afterCut?.();
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

  /**
   * Releases the caller of a command in a batch, never the batch: an
   * auto-pipelined caller's own promise rejects now; the command of an
   * explicit pipeline rejects (its place in the pipeline's results) once it
   * has been written, since the pipeline counts its replies from its flush
   * on. The command itself goes out with its batch and its reply is read
   * and dropped: a write is `unknown`. No resend check: a batch is resent
   * whole.
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
  /** The pipeline (its public `length`: how many commands it holds). */
  readonly pipeline: { readonly length?: unknown };
  /** Auto-pipelining: rejects the promise the caller holds (the batch's own promise answers only when the whole batch has). */
  releaseCaller: ((error: Error) => void) | undefined;
  /** Whether the batch has been written (ioredis counts the pipeline's replies from there). */
  written: boolean;
  /** Armed: watching the deadline. Auto-pipelined commands are armed when called, explicit pipelines' when exec'd. */
  armed: boolean;
  /** An explicit pipeline's command whose cutoff came before its batch was written: released right after the write. */
  releaseWhenWritten: Error | undefined;
}

