/**
 * How the register entry flushes telemetry at exit without changing how the
 * application stops:
 * - when the event loop empties (`beforeExit`), it shuts the SDK down and waits
 *   at most `timeoutMs`; past that the process exits as it would have, with its
 *   own exit code (an exporter retrying a missing collector would otherwise
 *   hold it for about 10 s);
 * - on SIGTERM or SIGINT with no handler of the application's, it flushes for
 *   at most `timeoutMs`, then ends the process by the same signal, as Node
 *   would have at once; an application's own handler alone decides.
 * Spans that were not delivered are reported in one line on stderr.
 */

export interface ExitFlush {
  /** Shuts the SDK down (exports what is buffered). */
  shutdown(): Promise<void>;
  /** The dropped-spans line for this reason, or undefined when every span was delivered. */
  droppedLine(why: string): string | undefined;
  /** The most the exit waits for `shutdown`, in ms. */
  timeoutMs: number;
}

export function flushOnExit(flush: ExitFlush): void {
  let stopping: Promise<boolean> | undefined;
  const finish = async (): Promise<boolean> => {
    stopping ??= flush.shutdown().then(() => true, () => true);
    let timer: NodeJS.Timeout | undefined;
    // Not unref'd: in beforeExit nothing else may hold the loop open to let it fire.
    const timedOut = new Promise<boolean>((settle) => (timer = setTimeout(() => settle(false), flush.timeoutMs)));
    const finished = await Promise.race([stopping, timedOut]);
    clearTimeout(timer);
    const line = flush.droppedLine(finished ? 'the exporter failed' : `no answer within ${flush.timeoutMs} ms`);
    if (line !== undefined) process.stderr.write(`${line}\n`);
    return finished;
  };
  process.once('beforeExit', () => {
    void finish().then((finished) => {
      // The application had ended; only an exporter still retrying keeps the loop open.
      if (!finished) process.exit();
    });
  });
  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    process.once(signal, () => {
      // This listener is already removed: what is left is the application's own.
      if (process.listenerCount(signal) > 0) return;
      void finish().then(() => process.kill(process.pid, signal));
    });
  }
}
