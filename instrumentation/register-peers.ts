/**
 * The first thing the register entry loads: it checks that the packages the
 * entry needs are installed, before register.ts requires them. Without this
 * a newcomer who installed only the core sees a raw "Cannot find module"
 * stack; with it, one line names what is missing and the command to add it.
 */

/** The packages `otel-deadline/register` loads: the required peers and the optional ones only this entry uses. */
export const REGISTER_PEERS = [
  '@opentelemetry/api',
  '@opentelemetry/core',
  '@opentelemetry/instrumentation',
  '@opentelemetry/sdk-node',
  '@opentelemetry/exporter-trace-otlp-http',
  '@opentelemetry/instrumentation-http',
  '@opentelemetry/instrumentation-undici',
] as const;

/** The peers that `resolve` cannot find, in REGISTER_PEERS order. */
export function missingPeers(resolve: (name: string) => unknown): string[] {
  return REGISTER_PEERS.filter((name) => {
    try {
      resolve(name);
      return false;
    } catch {
      return true;
    }
  });
}

/** The one line printed when peers are missing. */
export function missingPeersMessage(missing: readonly string[]): string {
  return `otel-deadline/register needs ${missing.join(', ')}, which ${missing.length === 1 ? 'is' : 'are'} not installed. Install with: npm install ${missing.join(' ')}`;
}

// Resolved from this file, as register.ts's own requires will be.
const missing = missingPeers((name) => require.resolve(name));
if (missing.length > 0) {
  console.error(missingPeersMessage(missing));
  process.exit(1);
}
