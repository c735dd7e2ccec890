import { spawn } from 'node:child_process';
import { resolve } from 'node:path';

export const root = resolve(__dirname, '..', '..');

export interface Run {
  code: number | null;
  /** The signal that ended the process, if one did. */
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

export interface RunOptions {
  /** Sends the signal once stdout holds the text (an app saying it is ready). */
  signalWhen?: { stdout: string; signal: NodeJS.Signals };
}

/**
 * Runs `node <args>` from the repository root with only PATH and `env`, so
 * no OTEL_* variable of this process leaks in. Killed after 60 s: the apps
 * finish in about a second on an idle machine (over 20 s on a loaded 2-core
 * one), and a hung one must fail the test, not stall it.
 * OTLP goes as JSON by default: the receiver these tests run reads only that
 * (the SDK's own default is http/protobuf). Of auto-instrumentations-node
 * (a devDependency here, so the register entry loads it) only http and
 * undici run unless a test says otherwise: the spans of an app without it;
 * and of its resource detectors only NodeSDK's own five, not the cloud ones,
 * whose metadata lookups fail with a warning on a machine with no network.
 */
export function node(args: string[], env: Record<string, string>, options: RunOptions = {}): Promise<Run> {
  return new Promise((done, fail) => {
    const child = spawn(process.execPath, args, {
      cwd: root,
      env: {
        PATH: process.env.PATH ?? '',
        OTEL_BSP_SCHEDULE_DELAY: '50',
        OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
        OTEL_NODE_ENABLED_INSTRUMENTATIONS: 'http,undici',
        OTEL_NODE_RESOURCE_DETECTORS: 'env,host,os,process,serviceinstance',
        ...env,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    let signalled = false;
    child.stdout.on('data', (chunk: Buffer) => {
      stdout += chunk;
      const when = options.signalWhen;
      if (when !== undefined && !signalled && stdout.includes(when.stdout)) {
        signalled = true;
        child.kill(when.signal);
      }
    });
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk));
    const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
    child.once('error', fail);
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      done({ code, signal, stdout, stderr });
    });
  });
}
