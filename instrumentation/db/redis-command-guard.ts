import { isBlocking } from './redis-blocking';
import { DbStatement, type CutoffHandler } from './statement';

export interface RedisCommand {
  name: string;
  args: unknown[];
  promise: Promise<unknown>;
  reject(err: unknown): void;
  resolve(value: unknown): void;
  [CUT_BY_DEADLINE]?: Error;
}

/** Marks a command the cutoff rejected (with its error): ioredis resends unanswered commands on reconnect, and a BLPOP would then pop for nobody. */
export const CUT_BY_DEADLINE = Symbol('otel-deadline.cut-by-deadline');

/** Commands that only read: one the cutoff reached in flight left nothing half-done. Anything else is a write. */
const READ_COMMANDS = new Set(
  'get mget exists strlen getrange hget hmget hgetall hkeys hvals hlen hexists lrange llen lindex smembers sismember scard zrange zrangebyscore zscore zcard zrank type ttl pttl scan sscan hscan zscan ping echo info dbsize xrange xrevrange xlen xread keys time'.split(
    ' ',
  ),
);

/** They end a transaction or restore session state, which outlives the request: sent whatever the clock says. */
const CLEANUP = new Set(['discard', 'unwatch', 'reset']);

/** A command name in lower case, and what the guard does with it. */
export function commandKind(name: unknown): { name: string; blocking: boolean; cleanup: boolean } {
  const lower = String(name).toLowerCase();
  return { name: lower, blocking: isBlocking(lower), cleanup: CLEANUP.has(lower) };
}

/** DISCARD ends a MULTI (and its WATCH); UNWATCH a WATCH whose MULTI never went. Harmless when nothing is open. */
export const DISCARD_AND_UNWATCH: readonly string[] = ['discard', 'unwatch'];

/** What ends the state a MULTI or WATCH cut in flight may have opened on the server. */
export function cleanupAfterCut(name: string): readonly string[] | undefined {
  if (name === 'multi') return DISCARD_AND_UNWATCH;
  if (name === 'watch') return ['unwatch'];
  return undefined;
}

/** Sends `names` below our guard, in order, replies ignored, with ioredis's public `Command` class: after a refused EXEC no later command answers QUEUED. */
export function sendCleanup(Command: new (name: string) => object, send: (command: object) => unknown, names: readonly string[]): void {
  for (const name of names) {
    const sent = send(new Command(name)) as { promise?: Promise<unknown> } | undefined;
    const reply = sent?.promise ?? sent;
    if (reply instanceof Promise) reply.catch(() => undefined);
  }
}

/** One command (the `subject`) from sendCommand, or its queuing in a pipeline, to its reply. */
export class RedisCommandGuard extends DbStatement implements CutoffHandler {
  /** A blocking command clamped to end by the cutoff: its reply may carry an element the server removed (BLPOP), so it is delivered. */
  deliversLateReply = false;

  /** Queued in a pipeline: written with its batch, never cut for it; at the cutoff its caller is released. */
  batch: PipelineMember | undefined = undefined;

  /** For a MULTI or WATCH sent on its own: ends the state it may have opened when the cutoff rejects it. */
  afterCut: (() => void) | undefined = undefined;

  /** The command's name in lower case, and what the guard does with it. */
  readonly kind = commandKind(this.command.name);

  private get command(): RedisCommand {
    return this.subject as RedisCommand;
  }

  get name(): string {
    return this.kind.name;
  }

  override get operation(): string {
    return `redis.${this.name}`;
  }

  protected override isWrite(): boolean {
    return !READ_COMMANDS.has(this.name);
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

  /** Settles the guard in ioredis's resolve/reject call: the promise would be a microtask late, after a driver instrumentation's span ended (docs/internals.md). */
  settleOnReply(): void {
    const { command } = this;
    const settleThen = (original: (value: unknown) => void, failed: boolean) => (value: unknown) => {
      if (this.deliversLateReply) this.reason = undefined;
      this.settle(failed ? value : undefined);
      original.call(command, value);
    };
    command.resolve = settleThen(command.resolve, false);
    command.reject = settleThen(command.reject, true);
  }

  /**
   * Releases the caller of a command in a batch, never the batch: an auto-pipelined caller's promise rejects now; an
   * explicit pipeline's command once written (the pipeline counts replies from its flush). Its reply is dropped.
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
  /** Every command queued in the pipeline, in order: null for one with no deadline. */
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

