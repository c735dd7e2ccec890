import { context } from '@opentelemetry/api';
import { registerInstrumentations } from '@opentelemetry/instrumentation';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DeadlineInstrumentation, openDeadline, setDeadline } from '../../src';
import { installOtel, type TestOtel } from '../helpers/otel';
import { callKind, loadGrpc, newClient, type CallResult } from './helpers';

/**
 * Issue 35: a cut at one call's cutoff never harms another call on the same
 * channel (one HTTP/2 connection). Each round sends calls under long
 * deadlines, under none, and one under a short deadline; the server holds
 * them all until it sees the short one cancelled, then answers the rest.
 */

const ROUNDS = 30;
const LONG = 6;
const BARE = 3;

let otel: TestOtel;
let instrumentation: DeadlineInstrumentation;
let grpc: ReturnType<typeof loadGrpc>['grpc'];
let server: import('@grpc/grpc-js').Server;
let client: ReturnType<typeof newClient>;

/** Per round: the calls that arrived, were cancelled, and were answered, by message. */
interface Round {
  arrived: string[];
  cancelled: string[];
  answered: string[];
  released: boolean;
  held: (() => void)[];
}
const rounds = new Map<string, Round>();

function roundOf(text: string): Round {
  const id = text.split(':')[0];
  let round = rounds.get(id);
  if (round === undefined) {
    round = { arrived: [], cancelled: [], answered: [], released: false, held: [] };
    rounds.set(id, round);
  }
  return round;
}

beforeAll(async () => {
  otel = installOtel();
  instrumentation = new DeadlineInstrumentation();
  registerInstrumentations({ instrumentations: [instrumentation] });
  let Echo: ReturnType<typeof loadGrpc>['Echo'];
  ({ grpc, Echo } = loadGrpc());
  server = new grpc.Server();
  server.addService(Echo.service, {
    Unary(call: import('@grpc/grpc-js').ServerUnaryCall<{ text: string }, unknown>, callback: (err: unknown, value?: unknown) => void) {
      const { text } = call.request;
      const round = roundOf(text);
      round.arrived.push(text);
      const answer = () => {
        round.answered.push(text);
        callback(null, { text: JSON.stringify({}) });
      };
      call.on('cancelled', () => {
        // grpc-js also reports a stream closed after the answer went out as cancelled: that harms nothing.
        if (round.answered.includes(text)) return;
        round.cancelled.push(text);
        if (!text.endsWith(':short')) return;
        round.released = true;
        round.held.splice(0).forEach((release) => release());
      });
      if (text.endsWith(':short')) return;
      if (round.released) answer();
      else round.held.push(answer);
    },
  } as never);
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, bound) => (err ? reject(err) : resolve(bound))),
  );
  client = newClient(grpc, Echo, `127.0.0.1:${port}`);
});
afterAll(async () => {
  client.close();
  server.forceShutdown();
  instrumentation.disable();
  await otel.shutdown();
});

function under(budgetMs: number, text: string): Promise<CallResult> {
  const deadline = openDeadline({ operation: text, timeoutMs: budgetMs, parent: null });
  return context.with(setDeadline(context.active(), deadline), () => callKind(client, 'Unary', text)).finally(() => deadline.dispose());
}

/** Resolves once `done()` holds, looking every 5 ms for at most 10 s. */
async function until(done: () => boolean): Promise<void> {
  for (let i = 0; i < 2_000 && !done(); i++) await new Promise((resolve) => setTimeout(resolve, 5));
}

function release(round: Round): void {
  round.released = true;
  round.held.splice(0).forEach((answer) => answer());
}

describe('one channel, many calls, one cut', () => {
  it(`the cut call ends DEADLINE_EXCEEDED and every other call on the channel completes (${ROUNDS} rounds)`, async () => {
    // Connected first: every round runs on the same, open HTTP/2 connection.
    release(roundOf('warm:'));
    expect((await callKind(client, 'Unary', 'warm:bare-0')).error).toBeNull();
    const failures: string[] = [];
    let cutAtServer = 0;
    for (let r = 0; r < ROUNDS; r++) {
      const names = [...Array.from({ length: LONG }, (_, i) => `r${r}:long-${i}`), ...Array.from({ length: BARE }, (_, i) => `r${r}:bare-${i}`)];
      const round = roundOf(`r${r}:`);
      const calls = names.map((text) => (text.includes(':bare-') ? callKind(client, 'Unary', text) : under(10_000, text)));
      // The others are in flight at the server, held, when the short call is made and cut.
      await until(() => round.arrived.length === names.length);
      const short = await under(300, `r${r}:short`);
      const shortArrived = round.arrived.includes(`r${r}:short`);
      if (shortArrived) {
        await until(() => round.released);
        cutAtServer++;
      } else release(round); // Cut before it reached the server (a loaded machine): nothing to wait for there.
      const others = await Promise.all(calls);
      if (short.error?.code !== grpc.status.DEADLINE_EXCEEDED) failures.push(`r${r}: short ended ${short.error?.code ?? 'OK'}`);
      others.forEach((result, i) => result.error !== null && failures.push(`${names[i]}: ${result.error.code} ${result.error.details}`));
      // Counted on the server: every call arrived once, only the short one was cancelled, the rest answered.
      expect(round.arrived.filter((text) => !text.endsWith(':short')).sort()).toEqual([...names].sort());
      expect(round.cancelled).toEqual(shortArrived ? [`r${r}:short`] : []);
      expect(round.answered.sort()).toEqual([...names].sort());
    }
    expect(failures).toEqual([]);
    // The cut reached the server in flight (30 of 30 rounds when written); a round where it did not still checks the others.
    expect(cutAtServer).toBeGreaterThan(0);
    // The channel itself is as usable as before.
    release(roundOf('after:'));
    expect((await callKind(client, 'Unary', 'after:long-0')).error).toBeNull();
  }, 60_000);
});
