import { once } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Readable } from 'node:stream';
import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import { replayBody } from '../../instrumentation/client/replay-body';

/** Two turns of the event loop: long enough for an 'error' emitted on destroy to have been emitted. */
const turns = () => new Promise((resolve) => setImmediate(() => setImmediate(resolve)));

/** An undici response body, to replay with its own class. */
async function undiciBody(): Promise<{ body: object; close(): Promise<void> }> {
  const server = createServer((_req, res) => res.end('x'));
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { body } = await request(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`);
  await body.text();
  return { body, close: () => new Promise((resolve) => server.close(() => resolve())) };
}

describe('replayBody', () => {
  it('gives back the bytes it read, through undici\'s own body class', async () => {
    const { body, close } = await undiciBody();
    const replay = replayBody(body, Buffer.from('{"a":1}'), undefined, 'application/json') as Readable & { json(): Promise<unknown> };
    expect(replay.constructor).toBe(body.constructor);
    expect(await replay.json()).toEqual({ a: 1 });
    await close();
  });

  it('fails a read that stopped on an error only when the caller reads it, never before anyone listens', async () => {
    const { body, close } = await undiciBody();
    const error = new Error('cut while reading');
    const replay = replayBody(body, Buffer.alloc(0), error, 'text/plain') as Readable & { text(): Promise<string> };
    // Nobody listens yet: an 'error' emitted now would be an uncaught exception, which fails this test.
    await turns();
    expect(replay.destroyed).toBe(false);
    await expect(replay.text()).rejects.toBe(error);
    await close();
  });

  it('does the same with a plain Readable when the body class cannot be built', async () => {
    const error = new Error('cut while reading');
    const replay = replayBody({}, Buffer.alloc(0), error, undefined);
    await turns();
    expect(replay.destroyed).toBe(false);
    const drain = async () => {
      for await (const chunk of replay) void chunk;
    };
    await expect(drain()).rejects.toBe(error);
  });
});
