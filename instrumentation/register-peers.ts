/**
 * The first thing the register entry loads: without it, a newcomer who
 * installed only the core sees a raw "Cannot find module" stack; with it, one
 * line names what is missing and the command to add it.
 */

/** The packages `otel-deadline/register` loads: the required peers and the optional ones only this entry uses. */
const REGISTER_PEERS = [
  '@opentelemetry/api',
  '@opentelemetry/core',
  '@opentelemetry/instrumentation',
  '@opentelemetry/sdk-node',
  '@opentelemetry/exporter-trace-otlp-http',
  '@opentelemetry/instrumentation-http',
  '@opentelemetry/instrumentation-undici',
];

// Resolved from this file, as register.ts's own requires will be.
const missing = REGISTER_PEERS.filter((name) => {
  try {
    require.resolve(name);
    return false;
  } catch {
    return true;
  }
});
if (missing.length > 0) {
  const which = missing.length === 1 ? 'is' : 'are';
  console.error(`otel-deadline/register needs ${missing.join(', ')}, which ${which} not installed. Install with: npm install ${missing.join(' ')}`);
  process.exit(1);
}
export {};
