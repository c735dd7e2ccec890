import diagnosticsChannel from 'node:diagnostics_channel';
import { createRequire } from 'node:module';
import { context } from '@opentelemetry/api';
import { registerInstrumentations } from '@opentelemetry/instrumentation';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DeadlineExceededError, DeadlineInstrumentation, openDeadline, setDeadline } from '../../src';
import { installOtel, type TestOtel } from '../helpers/otel';
import { startCountingServer, type CountingServer } from './helpers/servers';

/**
 * What the onComplete hook on undici's Request class buys (request-class.ts,
 * docs/internals.md): a call lets go of its request when the whole response
 * is in, before undici publishes `undici:request:trailers`. A subscriber there
 * that runs before ours (instrumentation-undici, registered first, ends its
 * span there, and DeadlineSpanProcessor reads the deadline's clock) may be
 * the one that finds the cutoff just passed: the deadline aborts right then.
 * The caller, who has the whole body in hand, must still be able to read it.
 */

const CUTOFF_AT_TRAILERS = new DeadlineExceededError('root', 0);
let otel: TestOtel;
let instrumentation: DeadlineInstrumentation;
let server: CountingServer;
let undici: typeof import('undici');
/** Aborts, through its signal option, the deadline of the request whose trailers are published. */
let abortAtTrailers: AbortController | undefined;
const onTrailers = () => abortAtTrailers?.abort(CUTOFF_AT_TRAILERS);
let finish: () => void = () => {};

beforeAll(async () => {
  otel = installOtel();
  // Subscribed before the instrumentation is: it runs first, as instrumentation-undici does when registered first.
  diagnosticsChannel.subscribe('undici:request:trailers', onTrailers);
  instrumentation = new DeadlineInstrumentation();
  registerInstrumentations({ instrumentations: [instrumentation] });
  undici = createRequire(import.meta.url)('undici');
  // The head and a first chunk now, the rest when the test says: the caller holds the response before it completes.
  server = await startCountingServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/plain' });
    res.write('o');
    finish = () => res.end('k');
  });
});
afterAll(async () => {
  diagnosticsChannel.unsubscribe('undici:request:trailers', onTrailers);
  instrumentation.disable();
  await server.close();
  await otel.shutdown();
});

describe('a deadline that aborts in the trailers channel, after the whole response is in', () => {
  it.each([
    ['undici.request', async () => (await undici.request(`${server.url}/whole`)).body],
    ['fetch', async () => (await fetch(`${server.url}/whole`))],
  ])('%s: leaves the body the caller holds readable', async (_name, call) => {
    abortAtTrailers = new AbortController();
    const deadline = openDeadline({ operation: 'root', timeoutMs: 60_000, parent: null, signal: abortAtTrailers.signal });
    const held = await context.with(setDeadline(context.active(), deadline), call);
    finish();
    const body = await held.text().catch((error: unknown) => error);
    abortAtTrailers = undefined;
    expect(deadline.abortReason).toBe(CUTOFF_AT_TRAILERS);
    deadline.dispose();
    expect(body).toBe('ok');
  });
});
