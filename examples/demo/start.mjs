// Starts the demo on loopback: an OTLP/JSON receiver, then the four services
// as child processes exporting their spans to it (or to another OTLP/HTTP
// endpoint such as Jaeger's). Used by run.mjs and by the end-to-end tests,
// which point a real Prometheus or Jaeger at the services.
import { fork } from 'node:child_process';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startOtlpReceiver } from '../../dist/cjs/src/lineage/index.js';

const SERVICE_ENTRY = fileURLToPath(new URL('./service.mjs', import.meta.url));
export const SERVICE_NAMES = ['gateway', 'agent', 'tools', 'worker'];
const READY_TIMEOUT_MS = 20_000;

function startService(name, env, execArgv) {
  const child = fork(SERVICE_ENTRY, [], {
    env: { ...process.env, ...env, DEMO_SERVICE: name, OTEL_SERVICE_NAME: name },
    execArgv,
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
  const ready = new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${name} did not start within ${READY_TIMEOUT_MS} ms`)), READY_TIMEOUT_MS);
    child.on('message', (message) => {
      if (message?.type !== 'ready') return;
      clearTimeout(timer);
      resolve(message.port);
    });
    exited.then(({ code }) => {
      clearTimeout(timer);
      reject(new Error(`${name} exited with code ${code} before it was ready`));
    });
  });
  return { name, child, ready, exited };
}

/**
 * `telemetry: 'self'` (default) sets the SDK up in examples/demo/telemetry.mjs;
 * `'register'` starts each service with `node --import otel-deadline/register`,
 * the package's own entry (transport instrumentation included), as
 * docker-compose.yml does.
 * `otlpEndpoint` sends the spans to that OTLP/HTTP endpoint (Jaeger's, say)
 * instead of the embedded receiver, which then is not started: no file, no onSpans.
 * @param {{ outDir?: string, budgetMs?: number, telemetry?: 'self' | 'register', onSpans?: (spans: object[]) => void, otlpEndpoint?: string }} [options]
 */
export async function startDemo({
  outDir = process.cwd(),
  budgetMs = 1_500,
  telemetry = process.env.DEMO_TELEMETRY === 'register' ? 'register' : 'self',
  onSpans,
  otlpEndpoint,
} = {}) {
  let tracesFile;
  let receiver;
  if (otlpEndpoint === undefined) {
    tracesFile = join(outDir, 'demo-traces.json');
    rmSync(tracesFile, { force: true });
    receiver = await startOtlpReceiver({ file: tracesFile, onSpans });
  }
  const env = {
    OTEL_EXPORTER_OTLP_ENDPOINT: otlpEndpoint ?? receiver.url,
    OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
    DEMO_BUDGET_MS: String(budgetMs),
  };
  let execArgv = [];
  if (telemetry === 'register') {
    // Resolved here, inside the package, so it works whatever the working directory.
    execArgv = ['--import', import.meta.resolve('otel-deadline/register')];
    Object.assign(env, {
      DEMO_TELEMETRY: 'register',
      OTEL_METRICS_EXPORTER: 'none',
      OTEL_LOGS_EXPORTER: 'none',
      // This repository has auto-instrumentations-node (a devDependency), which the entry would
      // load: the demo shows the entry as installed without it (http and undici spans, no cloud
      // resource lookups).
      OTEL_NODE_ENABLED_INSTRUMENTATIONS: 'http,undici',
      OTEL_NODE_RESOURCE_DETECTORS: 'env,host,os,process,serviceinstance',
    });
  } else {
    env.DEMO_TELEMETRY = 'self';
  }
  const started = SERVICE_NAMES.map((name) =>
    // The edge's budget: the instrumentation gives it to requests that arrive without a deadline.
    startService(name, name === 'gateway' ? { ...env, OTEL_DEADLINE_DEFAULT_TIMEOUT_MS: String(budgetMs) } : env, execArgv),
  );
  const services = {};
  try {
    const ports = await Promise.all(started.map((s) => s.ready));
    started.forEach((s, i) => {
      services[s.name] = { ...s, port: ports[i], url: `http://127.0.0.1:${ports[i]}` };
    });
  } catch (err) {
    for (const s of started) s.child.kill();
    await receiver?.close();
    throw err;
  }
  const peers = Object.fromEntries(Object.values(services).map((s) => [s.name, s.url]));
  const warm = Object.values(services).map(
    (s) => new Promise((resolve) => s.child.on('message', (message) => message?.type === 'warm' && resolve())),
  );
  for (const s of Object.values(services)) s.child.send({ type: 'peers', peers });
  await Promise.all(warm);

  let stopped;
  return {
    receiver,
    tracesFile,
    services,
    /**
     * Sends one request to the edge. Resolves with its HTTP status, trace id and
     * body, also when the request ran out of budget (504): that is an answer too.
     */
    async ask(question = 'Which items are in stock?') {
      const res = await fetch(`${services.gateway.url}/ask`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ question }),
      });
      const body = await res.json().catch(() => ({}));
      const traceId = res.headers.get('x-trace-id');
      if (traceId === null) throw new Error(`gateway answered HTTP ${res.status} without a trace id`);
      return { ...body, status: res.status, traceId };
    },
    /** Stops every service (each flushes its spans first), then the receiver. */
    stop() {
      stopped ??= (async () => {
        for (const s of Object.values(services)) if (s.child.connected) s.child.send({ type: 'stop' });
        const kill = setTimeout(() => Object.values(services).forEach((s) => s.child.kill('SIGKILL')), 10_000);
        await Promise.all(Object.values(services).map((s) => s.exited));
        clearTimeout(kill);
        await receiver?.close();
      })();
      return stopped;
    },
  };
}
