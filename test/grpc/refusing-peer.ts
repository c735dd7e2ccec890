import { spawn } from 'node:child_process';
import { join } from 'node:path';

export interface RefusingPeer {
  address: string;
  close(): Promise<void>;
}

/**
 * The plain peer (fixtures/plain-peer.cjs) in another process under the
 * register entry: an otel-deadline server that refuses every call with less
 * than `minUsefulMs` left, before its handler runs. Needs the built package
 * (`npm run build`), as the register entry is loaded from dist/.
 */
export async function startRefusingPeer(minUsefulMs: number): Promise<RefusingPeer> {
  const child = spawn(process.execPath, ['--require', 'otel-deadline/register', join(__dirname, 'fixtures', 'plain-peer.cjs'), 'server'], {
    cwd: join(__dirname, '..', '..'),
    env: { PATH: process.env.PATH ?? '', OTEL_DEADLINE_MIN_USEFUL_MS: String(minUsefulMs), OTEL_TRACES_EXPORTER: 'none', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:9' },
    stdio: ['pipe', 'pipe', 'ignore'],
  });
  const port = await new Promise<number>((resolve, reject) => {
    child.once('error', reject);
    child.stdout!.once('data', (chunk: Buffer) => resolve((JSON.parse(String(chunk)) as { port: number }).port));
  });
  return {
    address: `127.0.0.1:${port}`,
    async close() {
      const closed = new Promise((resolve) => child.once('close', resolve));
      child.stdin!.end();
      await closed;
    },
  };
}
