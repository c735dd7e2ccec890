import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { freePort } from '../../../scripts/jaeger.mjs';
import { join } from 'node:path';

/**
 * A real Prometheus (Debian's package) for one test: loopback only, 1 s scrape
 * and rule evaluation, storage in the test's temporary directory.
 */
export interface TestPrometheus {
  url: string;
  /** GETs a Prometheus API path and returns its `data`. */
  api<T>(path: string): Promise<T>;
  stop(): Promise<void>;
}

export async function startPrometheus(options: {
  dir: string;
  ruleFiles: string[];
  targets: Record<string, string>;
}): Promise<TestPrometheus> {
  const config = [
    'global:',
    '  scrape_interval: 1s',
    '  scrape_timeout: 900ms',
    '  evaluation_interval: 1s',
    'rule_files:',
    ...options.ruleFiles.map((file) => `  - ${JSON.stringify(file)}`),
    'scrape_configs:',
    ...Object.entries(options.targets).flatMap(([job, target]) => [
      `  - job_name: ${JSON.stringify(job)}`,
      '    static_configs:',
      `      - targets: [${JSON.stringify(target)}]`,
    ]),
    '',
  ].join('\n');
  const configFile = join(options.dir, 'prometheus.yml');
  writeFileSync(configFile, config);
  const data = join(options.dir, 'prometheus-data');
  mkdirSync(data, { recursive: true });
  // The port is picked free here and bound by Prometheus a moment later; in between a test running
  // beside this one can be handed it. Only that failure is retried, with a new port, at most three times.
  for (let attempt = 1; ; attempt++) {
    try {
      return await startOnce(configFile, data);
    } catch (err) {
      if (attempt === 3 || !(err instanceof PortTakenError)) throw err;
    }
  }
}

/** Prometheus could not bind the port picked as free: someone else took it in between. */
class PortTakenError extends Error {}

async function startOnce(configFile: string, data: string): Promise<TestPrometheus> {
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const child: ChildProcess = spawn(
    'prometheus',
    [`--config.file=${configFile}`, `--storage.tsdb.path=${data}`, `--web.listen-address=127.0.0.1:${port}`, '--log.level=warn'],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  let log = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    log = (log + chunk.toString()).slice(-4000);
  });
  const exited = new Promise<number | null>((done) => child.once('exit', (code) => done(code)));

  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
    await exited;
    clearTimeout(timer);
  };

  // Ready when /-/ready answers 200; give up after 30 s or if the process dies.
  const started = Date.now();
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) {
      const ErrorType = /address already in use/.test(log) ? PortTakenError : Error;
      throw new ErrorType(`prometheus exited with ${child.exitCode ?? child.signalCode}: ${log}`);
    }
    // By its text: a server of another test handed the same port could answer 200 too.
    const ok = await fetch(`${url}/-/ready`).then(
      async (r) => r.ok && (await r.text()).includes('Prometheus'),
      () => false,
    );
    if (ok) break;
    if (Date.now() - started > 30_000) {
      await stop();
      throw new Error(`prometheus not ready after 30 s: ${log}`);
    }
    await new Promise((r) => setTimeout(r, 200));
  }

  return {
    url,
    async api<T>(path: string): Promise<T> {
      const res = await fetch(`${url}${path}`);
      const body = (await res.json()) as { status: string; data: T; error?: string };
      if (body.status !== 'success') throw new Error(`${path}: ${body.error}`);
      return body.data;
    },
    stop,
  };
}

/** Polls `probe` every 250 ms until it returns a value other than undefined, or fails after `timeoutMs`. */
export async function waitFor<T>(what: string, timeoutMs: number, probe: () => Promise<T | undefined>): Promise<T> {
  const started = Date.now();
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() - started > timeoutMs) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}
