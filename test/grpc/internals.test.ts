import { createRequire } from 'node:module';
import { describe, expect, it } from 'vitest';
import { loadGrpc, startEchoServer } from './helpers';

/**
 * Canaries for what instrumentation/grpc/client.ts relies on in grpc-js
 * (docs/internals.md): a failure here names the file to change.
 */
const require = createRequire(import.meta.url);

describe('grpc-js Channel#createCall (instrumentation/grpc/client.ts)', () => {
  it('is called synchronously, in the caller, by a generated client under client interceptors, with the resolved deadline, and the client layer starts the call it returns through that call object', async () => {
    const { grpc, Echo } = loadGrpc();
    const server = await startEchoServer(grpc, Echo);
    const proto = grpc.Channel.prototype as unknown as { createCall: (...args: unknown[]) => unknown };
    const createCall = proto.createCall;
    const seen: { method: unknown; deadline: unknown; inCaller: boolean; started: boolean; shape: string[] }[] = [];
    let inCaller = false;
    proto.createCall = function (this: unknown, ...args: unknown[]) {
      const call = createCall.apply(this, args) as Record<string, (...a: unknown[]) => unknown>;
      const entry = { method: args[0], deadline: args[1], inCaller, started: false, shape: ['start', 'cancelWithStatus', 'getPeer'].filter((name) => typeof call[name] === 'function') };
      seen.push(entry);
      const start = call.start;
      call.start = (...startArgs: unknown[]) => {
        entry.started = true;
        return start.apply(call, startArgs);
      };
      return call;
    };
    const passThrough: import('@grpc/grpc-js').Interceptor = (options, nextCall) => new grpc.InterceptingCall(nextCall(options));
    const client = new Echo(server.address, grpc.credentials.createInsecure(), { interceptors: [passThrough] }) as unknown as Record<string, (...args: unknown[]) => void> & { close(): void };
    const deadline = Date.now() + 5_000;
    try {
      const error = await new Promise((resolve) => {
        inCaller = true;
        client.Unary({ text: 'echo' }, new grpc.Metadata(), { deadline }, (err: unknown) => resolve(err));
        inCaller = false;
      });
      expect(error).toBeNull();
      expect(seen).toEqual([{ method: '/test.Echo/Unary', deadline, inCaller: true, started: true, shape: ['start', 'cancelWithStatus', 'getPeer'] }]);
    } finally {
      proto.createCall = createCall;
      client.close();
      await server.close();
    }
  });

  it('reports the channel target as the peer of a call with no stream, and a call cancelled before start opens none', async () => {
    const grpc = require('@grpc/grpc-js') as typeof import('@grpc/grpc-js');
    const { Echo } = loadGrpc();
    const server = await startEchoServer(grpc, Echo);
    const channel = new grpc.Channel(server.address, grpc.credentials.createInsecure(), {});
    try {
      const call = (channel as unknown as { createCall: (...args: unknown[]) => { getPeer(): string; cancelWithStatus(code: number, details: string): void } }).createCall(
        '/test.Echo/Unary',
        Date.now() + 5_000,
        undefined,
        null,
        undefined,
      );
      expect(call.getPeer()).toBe(channel.getTarget());
      call.cancelWithStatus(grpc.status.DEADLINE_EXCEEDED, 'refused');
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect(server.streams).toBe(0);
    } finally {
      channel.close();
      await server.close();
    }
  });
});
