import { diag, DiagLogLevel, type DiagLogger } from '@opentelemetry/api';

export interface DiagCapture {
  /** Our debug messages logged so far (`otel-deadline:`), with the error logged next to each, if any. */
  debug: { message: string; error: unknown }[];
  warn: string[];
  stop(): void;
}

/** Installs a diag logger at DEBUG that records what it is told; `stop` removes it. */
export function captureDiag(): DiagCapture {
  const debug: DiagCapture['debug'] = [];
  const warn: string[] = [];
  const ignore = () => {};
  const logger: DiagLogger = {
    error: ignore,
    info: ignore,
    verbose: ignore,
    warn: (message: string) => void (message.startsWith('otel-deadline') && warn.push(message)),
    debug: (message: string, ...args: unknown[]) => void (message.startsWith('otel-deadline') && debug.push({ message, error: args[0] })),
  };
  diag.setLogger(logger, { logLevel: DiagLogLevel.DEBUG, suppressOverrideMessage: true });
  return { debug, warn, stop: () => diag.disable() };
}
