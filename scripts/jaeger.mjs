// `npm run jaeger`: starts the Jaeger v2 that .ci/ensure-jaeger.sh built, with
// deploy/jaeger/config.yaml, and prints where its UI, query API, OTLP receiver
// and span metrics are. Ctrl-C stops it. The tests start it through
// startJaeger() on free ports.
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

export const JAEGER_CONFIG = fileURLToPath(new URL('../deploy/jaeger/config.yaml', import.meta.url));
const VERSION_FILE = fileURLToPath(new URL('../deploy/jaeger/VERSION', import.meta.url));
const READY_TIMEOUT_MS = 60_000;

/** The pinned module version (deploy/jaeger/VERSION, the one place it is set). */
export function jaegerVersion() {
  return readFileSync(VERSION_FILE, 'utf8').trim();
}

/** Where .ci/ensure-jaeger.sh puts the binary; JAEGER_BIN overrides it. */
export function jaegerBinary() {
  if (process.env.JAEGER_BIN) return process.env.JAEGER_BIN;
  const cache = process.env.OTEL_DEADLINE_CACHE ?? join(process.env.XDG_CACHE_HOME ?? join(homedir(), '.cache'), 'otel-deadline');
  return join(cache, 'jaeger', jaegerVersion(), 'jaeger');
}

export const DEFAULT_PORTS = { otlpGrpc: 4317, otlpHttp: 4318, queryHttp: 16686, queryGrpc: 16685, spanMetrics: 8889 };

/** The environment variables deploy/jaeger/config.yaml reads its addresses from. */
const PORT_ENV = {
  otlpGrpc: 'JAEGER_OTLP_GRPC_PORT',
  otlpHttp: 'JAEGER_OTLP_HTTP_PORT',
  queryHttp: 'JAEGER_QUERY_HTTP_PORT',
  queryGrpc: 'JAEGER_QUERY_GRPC_PORT',
  spanMetrics: 'JAEGER_SPANMETRICS_PORT',
};

export async function freePort() {
  return (await freePorts(1))[0];
}

/**
 * `count` distinct free ports on loopback. Every listener stays open until all
 * are chosen: closed one by one, the port just released is the next one the
 * system hands out, and a process given one port twice fails to bind the
 * second ("address already in use").
 */
export async function freePorts(count) {
  const servers = [];
  try {
    for (let i = 0; i < count; i++) {
      const server = createServer();
      servers.push(server);
      await new Promise((ready, fail) => server.once('error', fail).listen(0, '127.0.0.1', ready));
    }
    return servers.map((server) => server.address().port);
  } finally {
    await Promise.all(servers.map((server) => new Promise((done) => (server.listening ? server.close(() => done()) : done()))));
  }
}

async function answers(url, init) {
  try {
    const res = await fetch(url, { ...init, signal: AbortSignal.timeout(2_000) });
    await res.arrayBuffer();
    return res.status < 500;
  } catch {
    return false;
  }
}

/**
 * Starts Jaeger on loopback. `ports: 'free'` picks free ports (tests);
 * otherwise the config's defaults, or the JAEGER_*_PORT variables already set.
 * `overlays` are extra `--config` sources merged over the file (yaml:... strings),
 * `spanMetricsFlush` how often span metrics are published (e.g. '1s').
 * Resolves once the query API, the OTLP/HTTP receiver and the span-metrics
 * endpoint all answer.
 * @param {{ ports?: 'free' | 'default', overlays?: string[], spanMetricsFlush?: string, quiet?: boolean }} [options]
 */
export async function startJaeger(options = {}) {
  // Free ports are picked here and bound by Jaeger a moment later; in between another process (a test
  // running beside this one) can be handed one of them, and Jaeger then exits with "address already in
  // use". No other failure is retried, and only with new free ports, at most three times.
  for (let attempt = 1; ; attempt++) {
    try {
      return await startJaegerOnce(options);
    } catch (err) {
      if (options.ports !== 'free' || attempt === 3 || !(err instanceof PortTakenError)) throw err;
    }
  }
}

/** Jaeger could not bind a port picked as free: someone else took it in between. */
class PortTakenError extends Error {}

async function startJaegerOnce({ ports = 'default', overlays = [], spanMetricsFlush, quiet = true } = {}) {
  const binary = jaegerBinary();
  if (!existsSync(binary)) {
    throw new Error(
      `Jaeger ${jaegerVersion()} is not built (${binary} is missing): run \`bash .ci/ensure-jaeger.sh\` (needs Go), ` +
        'or run Jaeger with `docker compose up` instead',
    );
  }
  const chosen = {};
  const free = ports === 'free' ? await freePorts(Object.keys(PORT_ENV).length) : [];
  for (const [name, variable] of Object.entries(PORT_ENV)) {
    chosen[name] = ports === 'free' ? free.shift() : Number(process.env[variable] ?? DEFAULT_PORTS[name]);
  }
  const env = { ...process.env, JAEGER_LISTEN_HOST: '127.0.0.1' };
  for (const [name, variable] of Object.entries(PORT_ENV)) env[variable] = String(chosen[name]);
  if (spanMetricsFlush !== undefined) env.JAEGER_SPANMETRICS_FLUSH = spanMetricsFlush;
  const args = [`--config=file:${JAEGER_CONFIG}`, ...overlays.map((o) => `--config=${o}`)];
  const child = spawn(binary, args, { env, stdio: ['ignore', quiet ? 'ignore' : 'inherit', 'pipe'] });
  let log = '';
  child.stderr.on('data', (chunk) => {
    if (!quiet) process.stderr.write(chunk);
    log = (log + chunk.toString()).slice(-8_000);
  });
  const exited = new Promise((done) => child.once('exit', (code, signal) => done({ code, signal })));
  const host = 'http://127.0.0.1';
  const urls = {
    query: `${host}:${chosen.queryHttp}`,
    otlpHttp: `${host}:${chosen.otlpHttp}`,
    otlpGrpc: `127.0.0.1:${chosen.otlpGrpc}`,
    spanMetrics: `${host}:${chosen.spanMetrics}/metrics`,
  };

  let stopping;
  const stop = () => {
    stopping ??= (async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      // Jaeger drains its pipeline on SIGTERM; 10 s is ample for an in-memory store.
      const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
      await exited;
      clearTimeout(timer);
    })();
    return stopping;
  };

  // Every endpoint the callers use must answer: the receivers and extensions start one after another.
  const started = Date.now();
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) {
      const ErrorType = /bind: address already in use/.test(log) ? PortTakenError : Error;
      throw new ErrorType(`jaeger exited (${child.exitCode ?? child.signalCode}) before it was ready:\n${log}`);
    }
    const ready = await Promise.all([
      answers(`${urls.query}/api/services`),
      // An empty OTLP/JSON export: accepted, and stores nothing.
      answers(`${urls.otlpHttp}/v1/traces`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' }),
      answers(urls.spanMetrics),
    ]);
    if (ready.every(Boolean)) break;
    if (Date.now() - started > READY_TIMEOUT_MS) {
      await stop();
      throw new Error(`jaeger not ready after ${READY_TIMEOUT_MS / 1000} s:\n${log}`);
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  return { urls, ports: chosen, child, stop, log: () => log };
}

/** True when the build serves Jaeger's placeholder page instead of the UI (a build from the Go module). */
export async function servesPlaceholderUi(queryUrl) {
  const res = await fetch(`${queryUrl}/`, { signal: AbortSignal.timeout(5_000) });
  return (await res.text()).includes('This is not the Jaeger UI you are looking for');
}

async function main() {
  let jaeger;
  try {
    jaeger = await startJaeger({ quiet: false });
  } catch (err) {
    console.error(`npm run jaeger: ${err.message}`);
    process.exitCode = 1;
    return;
  }
  const { urls } = jaeger;
  const placeholder = await servesPlaceholderUi(urls.query).catch(() => false);
  console.log(`Jaeger ${jaegerVersion()} is running with deploy/jaeger/config.yaml (memory storage, span metrics):`);
  console.log(`  UI           ${urls.query}/`);
  if (placeholder) {
    console.log('               (a build from the Go module has no UI assets: this page is Jaeger\'s placeholder.');
    console.log('                For the UI, run the jaegertracing/jaeger image: docker compose up)');
  }
  console.log(`  query API    ${urls.query}/api/traces/<trace id>`);
  console.log(`  OTLP/HTTP    ${urls.otlpHttp}   OTLP/gRPC ${urls.otlpGrpc}`);
  console.log(`  span metrics ${urls.spanMetrics}`);
  console.log('Send the demo there (in another terminal):');
  console.log(`  DEMO_OTLP_ENDPOINT=${urls.otlpHttp} DEMO_JAEGER_URL=${urls.query} npm run demo`);
  console.log(`  npx deadline-lineage ${urls.query} --service agent`);
  console.log('Ctrl-C stops Jaeger (its traces live in memory only).');
  const onSignal = () => {
    jaeger.stop().then(() => process.exit(0));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  jaeger.child.once('exit', (code) => {
    if (process.exitCode === undefined) process.exitCode = code ?? 1;
  });
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) main();
