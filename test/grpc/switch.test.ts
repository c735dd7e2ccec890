import { context } from '@opentelemetry/api';
import { registerInstrumentations } from '@opentelemetry/instrumentation';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { DeadlineInstrumentation, setDeadline } from '../../src';
import { passedDeadline } from '../helpers/clock';
import { installOtel, type TestOtel } from '../helpers/otel';
import { callKind, loadGrpc, newClient, startEchoServer, type EchoServer } from './helpers';

// `grpc: false` (what OTEL_DEADLINE_GRPC_ENABLED=false sets) leaves grpc-js alone.
let otel: TestOtel;
let instrumentation: DeadlineInstrumentation;
let loaded: ReturnType<typeof loadGrpc>;
let server: EchoServer;

beforeAll(async () => {
  otel = installOtel();
  instrumentation = new DeadlineInstrumentation({ grpc: false });
  registerInstrumentations({ instrumentations: [instrumentation] });
  loaded = loadGrpc();
  server = await startEchoServer(loaded.grpc, loaded.Echo);
});
afterAll(async () => {
  await server.close();
  instrumentation.disable();
  await otel.shutdown();
});

it('patches neither the channel nor the server', () => {
  expect(loaded.grpc.Channel.prototype.createCall.name).toBe('createCall');
  expect(Object.getOwnPropertySymbols(loaded.grpc.Channel.prototype.createCall)).toEqual([]);
  expect(Object.getOwnPropertySymbols(loaded.grpc.Server.prototype.addService)).toEqual([]);
});

it('lets a call under an expired deadline go out, and gives the handler no deadline', async () => {
  const client = newClient(loaded.grpc, loaded.Echo, server.address);
  const deadline = await passedDeadline('parent');
  const { error, reply } = await context.with(setDeadline(context.active(), deadline), () => callKind(client, 'Unary', 'echo'));
  deadline.dispose();
  client.close();
  expect(error).toBeNull();
  expect(server.runs.Unary).toBe(1);
  expect(reply!.grpcDeadline).toBeNull();
  expect(reply!.ours).toBeNull();
});
