/**
 * One switch per transport side (`fetch`, `undici`, `httpClient`, `httpServer`),
 * as the databases and gRPC have: off, that side passes every call through
 * untouched; setConfig turns it on again. Counted at a real server on port 0.
 */
import http from 'node:http';
import { createRequire } from 'node:module';
import { context } from '@opentelemetry/api';
import { registerInstrumentations } from '@opentelemetry/instrumentation';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  DeadlineExceededError,
  DeadlineInstrumentation,
  getDeadline,
  openDeadline,
  setDeadline,
  type DeadlineInstrumentationConfig,
  type ManagedDeadline,
} from '../../src';
import { passedDeadline } from '../helpers/clock';
import { installOtel, type TestOtel } from '../helpers/otel';
import { startCountingServer, type CountingServer } from './helpers/servers';

let otel: TestOtel;
let instrumentation: DeadlineInstrumentation;
let server: CountingServer;
let undici: typeof import('undici');
/** Per request that reached the handler: whether it ran under a deadline. */
const handled: boolean[] = [];

beforeAll(async () => {
  otel = installOtel();
  instrumentation = new DeadlineInstrumentation();
  registerInstrumentations({ instrumentations: [instrumentation] });
  undici = createRequire(import.meta.url)('undici');
  server = await startCountingServer((_req, res) => {
    handled.push(getDeadline() !== undefined);
    res.end('ok');
  });
});
afterAll(async () => {
  instrumentation.disable();
  await server.close();
  await otel.shutdown();
});
afterEach(() => {
  server.arrivals.length = 0;
  handled.length = 0;
  instrumentation.setConfig({});
});

function under<T>(deadline: ManagedDeadline, fn: () => T): T {
  return context.with(setDeadline(context.active(), deadline), fn);
}

function httpGet(url: string): Promise<string> {
  return new Promise((resolve, reject) => {
    http
      .get(url, (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (body += chunk));
        res.on('end', () => resolve(body));
      })
      .on('error', reject);
  });
}

const clients: [keyof DeadlineInstrumentationConfig, (url: string) => Promise<string>][] = [
  ['fetch', async (url) => (await fetch(url)).text()],
  ['undici', async (url) => (await undici.request(url, { method: 'GET', headers: { accept: 'text/plain' } })).body.text()],
  ['httpClient', httpGet],
];

describe.each(clients)('`%s: false`', (option, call) => {
  it('sends no deadline header, and turns back on with setConfig', async () => {
    const deadline = openDeadline({ operation: 'root', timeoutMs: 5_000, parent: null });
    try {
      instrumentation.setConfig({ [option]: false });
      expect(await under(deadline, () => call(`${server.url}/off`))).toBe('ok');
      instrumentation.setConfig({});
      expect(await under(deadline, () => call(`${server.url}/on`))).toBe('ok');
    } finally {
      deadline.dispose();
    }
    expect(server.arrivals.map((arrival) => arrival.url)).toEqual(['/off', '/on']);
    expect([server.headerCount(0, 'x-deadline-remaining-ms'), server.headerCount(1, 'x-deadline-remaining-ms')]).toEqual([0, 1]);
  });

  it('does not refuse a call under a passed deadline, and refuses it again once on', async () => {
    const deadline = await passedDeadline();
    instrumentation.setConfig({ [option]: false });
    expect(await under(deadline, () => call(`${server.url}/off`))).toBe('ok');
    instrumentation.setConfig({});
    await expect(under(deadline, () => call(`${server.url}/on`))).rejects.toBeInstanceOf(DeadlineExceededError);
    expect(server.arrivals.map((arrival) => arrival.url)).toEqual(['/off']);
  });

  it('leaves the other transports on', async () => {
    const deadline = await passedDeadline();
    instrumentation.setConfig({ [option]: false });
    for (const [other, otherCall] of clients) {
      if (other === option) continue;
      await expect(under(deadline, () => otherCall(`${server.url}/${other}`))).rejects.toBeInstanceOf(DeadlineExceededError);
    }
    expect(server.arrivals).toHaveLength(0);
  });
});

describe('`httpServer: false`', () => {
  const send = (headers: Record<string, string>) => fetch(`${server.url}/in`, { headers });

  it('neither rejects an expired request nor gives the handler a deadline, and turns back on with setConfig', async () => {
    instrumentation.setConfig({ httpServer: false });
    const passed = await send({ 'x-deadline-at-ms': String(Date.now() - 1_000) });
    expect([passed.status, await passed.text()]).toEqual([200, 'ok']);
    const live = await send({ 'x-deadline-remaining-ms': '3000' });
    expect(await live.text()).toBe('ok');
    instrumentation.setConfig({});
    const rejected = await send({ 'x-deadline-at-ms': String(Date.now() - 1_000) });
    expect([rejected.status, rejected.headers.get('x-deadline-expired')]).toEqual([504, '1']);
    await rejected.arrayBuffer();
    expect(await (await send({ 'x-deadline-remaining-ms': '3000' })).text()).toBe('ok');
    expect(server.arrivals).toHaveLength(4);
    expect(handled).toEqual([false, false, true]);
  });
});
