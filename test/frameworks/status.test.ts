/**
 * A deadline error thrown in a handler gets the right status and no stack from
 * express, koa, fastify and hono: from their default error handling where that
 * reads the error's `status`/`statusCode`/`expose`, from the package's
 * one-line helper where it does not. Real servers on port 0; the errors are
 * raised by the package itself (withDeadline, admit), not built by hand.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { admit } from '../../src/agent/admit';
import { withDeadline } from '../../src/open';
import { expressDeadlineErrors, honoDeadlineErrors, koaDeadlineErrors } from '../../src/frameworks';
import { startExpress, startFastify, startHono, startKoa, type Failures, type Started } from './servers.mjs';

const failures: Failures = {
  // A deadline already passed when the work starts.
  exceeded: () => withDeadline({ operation: 'work', timeoutMs: 0, parent: null }, () => 'ran'),
  // Less left than the work needs.
  insufficient: () => withDeadline({ operation: 'work', timeoutMs: 1_000, parent: null }, (deadline) => admit(60_000, { deadline })),
  // The caller cancelled.
  cancelled: () => withDeadline({ operation: 'work', timeoutMs: 1_000, parent: null, signal: AbortSignal.abort() }, () => 'ran'),
};

const STATUS = { exceeded: 504, insufficient: 504, cancelled: 499 } as const;
const CODE = { exceeded: 'DEADLINE_EXCEEDED', insufficient: 'INSUFFICIENT_BUDGET', cancelled: 'CANCELLED' } as const;
type Failure = keyof typeof STATUS;
const NAMES = Object.keys(STATUS) as Failure[];

let started: Started | undefined;
afterEach(async () => {
  await started?.close();
  started = undefined;
});

interface Answer {
  status: number;
  type: string;
  body: string;
  expiredMarker: string | null;
}

async function call(server: Started, name: Failure): Promise<Answer> {
  const res = await fetch(`${server.url}/${name}`);
  return { status: res.status, type: res.headers.get('content-type') ?? '', body: await res.text(), expiredMarker: res.headers.get('x-deadline-expired') };
}

/** No stack frame and no file path in what went back to the caller. */
function expectNoStack(answer: Answer): void {
  expect(answer.body).not.toMatch(/\n\s+at |\.ts:\d+|node_modules/);
}

/** What every helper answers: the status, `{ code }` as JSON, and no refusal marker (the handler ran). */
function expectHelperAnswer(answer: Answer, name: Failure): void {
  expect(answer.status).toBe(STATUS[name]);
  expect(answer.type).toMatch(/^application\/json/);
  expect(JSON.parse(answer.body)).toEqual({ code: CODE[name] });
  expect(answer.expiredMarker).toBeNull();
}

describe.each(NAMES)('a handler that fails with %s', (name) => {
  it('express default handler (production): the status, no stack', async () => {
    started = await startExpress(failures);
    const answer = await call(started, name);
    expect(answer.status).toBe(STATUS[name]);
    expectNoStack(answer);
  });

  it('express with app.use(expressDeadlineErrors): the status and { code }', async () => {
    started = await startExpress(failures, expressDeadlineErrors);
    expectHelperAnswer(await call(started, name), name);
  });

  it('koa with app.use(koaDeadlineErrors): the status and { code }', async () => {
    started = await startKoa(failures, koaDeadlineErrors);
    expectHelperAnswer(await call(started, name), name);
  });

  it('fastify default handler: the status, the code in its JSON, no stack', async () => {
    started = await startFastify(failures);
    const answer = await call(started, name);
    expect(answer.status).toBe(STATUS[name]);
    expect(JSON.parse(answer.body)).toMatchObject({ statusCode: STATUS[name], code: CODE[name] });
    expectNoStack(answer);
  });

  it('hono with app.onError(honoDeadlineErrors): the status and { code }', async () => {
    started = await startHono(failures, honoDeadlineErrors);
    expectHelperAnswer(await call(started, name), name);
  });
});

describe.each(['exceeded', 'insufficient'] as const)('koa default handler, %s', (name) => {
  it('answers 504 with the message (expose), no stack', async () => {
    started = await startKoa(failures);
    const answer = await call(started, name);
    expect(answer.status).toBe(504);
    expect(answer.body).toMatch(/^"work" |deadline of "work"/);
    expectNoStack(answer);
  });
});

describe('koa default handler, cancelled', () => {
  it('answers 500: koa knows no 499 (what docs/faq.md says; koaDeadlineErrors answers 499)', async () => {
    started = await startKoa(failures);
    expect((await call(started, 'cancelled')).status).toBe(500);
  });
});

describe('the helpers leave other errors to the framework', () => {
  const others: Failures = { plain: () => Promise.reject(new Error('boom')) };

  it('express: a plain error is still the default 500', async () => {
    started = await startExpress(others, expressDeadlineErrors);
    expect((await fetch(`${started.url}/plain`)).status).toBe(500);
  });

  it('koa: a plain error is still the default 500', async () => {
    started = await startKoa(others, koaDeadlineErrors);
    expect((await fetch(`${started.url}/plain`)).status).toBe(500);
  });
});
