// Entry point of one demo service: `DEMO_SERVICE=<name> node examples/demo/service.mjs`
// (gateway, agent, tools or worker). Listens on HOST:PORT (default 127.0.0.1, a
// free port), tells the launcher its port over IPC when there is one, and on
// SIGTERM or a "stop" message lets work in flight finish and flushes its spans.
import { metricsHandler, serviceName, shutdownTelemetry } from './telemetry.mjs';
import { trace } from '@opentelemetry/api';
import { serve, setPeers } from './http.mjs';

const SERVICES = ['gateway', 'agent', 'tools', 'worker'];
const name = process.env.DEMO_SERVICE;
if (!SERVICES.includes(name)) {
  console.error(`DEMO_SERVICE must be one of ${SERVICES.join(', ')}, got ${JSON.stringify(name)}`);
  process.exit(2);
}
const service = await import(`./services/${name}.mjs`);
const server = serve({ routes: service.routes, metrics: metricsHandler, edgeTimeoutMs: service.edgeTimeoutMs });
await new Promise((resolve) => server.listen(Number(process.env.PORT ?? 0), process.env.HOST ?? '127.0.0.1', resolve));
const { port } = server.address();
if (process.send) process.send({ type: 'ready', name, port });
else console.log(`${serviceName} listening on ${process.env.HOST ?? '127.0.0.1'}:${port}`);

let stopping;
function stop() {
  stopping ??= (async () => {
    const closed = new Promise((resolve) => server.close(resolve));
    server.closeIdleConnections();
    await closed;
    await service.drain?.();
    await shutdownTelemetry();
    process.disconnect?.();
    // Whatever else is still open (a keep-alive socket to a peer) must not hold the exit.
    setTimeout(() => process.exit(0), 2_000).unref();
  })();
  return stopping;
}
process.on('SIGTERM', stop);
process.on('message', (message) => {
  if (message?.type === 'peers') {
    setPeers(message.peers);
    warmUp(message.peers).then(() => process.send?.({ type: 'warm', name }));
  }
  if (message?.type === 'stop') stop();
});

/**
 * Runs the first-call paths once before the demo's request (fetch and its HTTP
 * client load lazily, spans and the OTLP exporter start on first use), so a
 * cold process on a busy machine does not eat the request's 1.5 s budget.
 */
async function warmUp(peers) {
  await Promise.all(Object.values(peers).map((url) => fetch(`${url}/health`).then((r) => r.arrayBuffer(), () => undefined)));
  trace.getTracer('otel-deadline-demo').startSpan('warm-up').end();
}
