import { getEventListeners } from 'node:events';
import { context, propagation } from '@opentelemetry/api';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  DeadlineCancelledError,
  DeadlineExceededError,
  InsufficientBudgetError,
  carriesDeadlineExpired,
  defaultRetryable,
  getDeadline,
  retryWithinDeadline,
  withDeadline,
  type RetryAttempt,
} from '../../src';
import { installOtel, sleep, type TestOtel } from '../helpers/otel';
import { reply, startDependency, watchTimers, type FakeDependency } from './fixtures';

let otel: TestOtel;
let dependency: FakeDependency | undefined;
beforeAll(() => {
  otel = installOtel();
});
afterAll(() => otel.shutdown());
beforeEach(() => otel.exporter.reset());
afterEach(async () => {
  await dependency?.close();
  dependency = undefined;
});

/** A fetch that carries the active deadline and throws on a bad status, keeping the Response on the error. */
async function call(url: string, { signal, idempotencyKey }: RetryAttempt, method = 'GET'): Promise<unknown> {
  const headers: Record<string, string> = { 'idempotency-key': idempotencyKey };
  propagation.inject(context.active(), headers);
  const res = await fetch(url, { method, headers, signal });
  if (!res.ok) throw Object.assign(new Error(`HTTP ${res.status}`), { response: res });
  return res.json();
}

function attemptEvents(spanName: string) {
  return otel
    .span(spanName)
    .events.filter((e) => e.name === 'deadline.retry.attempt')
    .map((e) => e.attributes ?? {});
}

describe('retryWithinDeadline: the budget check', () => {
  it('refuses a retry whose backoff cannot fit, without sleeping or calling, with the last error as cause', async () => {
    dependency = await startDependency((_req, res) => reply(res, 503, { busy: true }));
    const url = dependency.url;
    const started = performance.now();
    const err = await withDeadline({ operation: 'agent.run', timeoutMs: 1_000, parent: null }, () =>
      retryWithinDeadline((a) => call(url, a), { operation: 'inventory.read', attempts: 5, backoffMs: 800, minAttemptMs: 300 }),
    ).catch((e: unknown) => e);
    const elapsed = performance.now() - started;

    expect(err).toBeInstanceOf(InsufficientBudgetError);
    expect((err as InsufficientBudgetError).neededMs).toBe(1_100);
    expect(((err as Error).cause as Error).message).toBe('HTTP 503');
    expect(dependency.arrivals).toHaveLength(1);
    // It did not sit out the 800 ms backoff before refusing: that sleep alone would take 800 ms.
    expect(elapsed).toBeLessThan(800);
    const events = attemptEvents('inventory.read');
    expect(events.map((e) => [e['deadline.retry.attempt'], e['deadline.retry.started'], e['deadline.retry.decision']])).toEqual([
      [1, true, 'retry'],
      [2, false, 'insufficient_budget'],
    ]);
    expect(events[1]['deadline.remaining_ms']).toBeLessThan(1_100);
    expect(events[0]['deadline.retry.error']).toBe('Error');
  });

  it('starts only attempts that have minAttemptMs + reserveMs left when they arrive, then stops', async () => {
    dependency = await startDependency((_req, res) => reply(res, 503, {}));
    const url = dependency.url;
    // Per attempt: what it was told it may use (read before its headers are written) and the
    // caller's time left read just after they were written (call() injects before its first await).
    const usableAtStart: number[] = [];
    const callerLeftAfterInject: number[] = [];
    const err = await withDeadline({ operation: 'agent.run', timeoutMs: 1_500, parent: null }, (root) =>
      retryWithinDeadline((a) => {
        usableAtStart.push(a.remainingMs);
        const sent = call(url, a);
        callerLeftAfterInject.push(root.remainingMs());
        return sent;
      }, {
        operation: 'search',
        attempts: 50,
        backoffMs: [100, 200, 300],
        minAttemptMs: 250,
        reserveMs: 150,
      }),
    ).catch((e: unknown) => e);

    expect(err).toBeInstanceOf(InsufficientBudgetError);
    const events = attemptEvents('search');
    const started = events.filter((e) => e['deadline.retry.started'] === true);
    expect(dependency.arrivals.length).toBe(started.length);
    expect(dependency.arrivals.length).toBeGreaterThanOrEqual(2);
    expect(dependency.arrivals.length).toBeLessThan(8);
    dependency.arrivals.forEach((arrival, i) => {
      // The header carries what the attempt may use: the retry scope's time left, in whole ms, and
      // the scope ends reserveMs (150) before the caller. Bracketed on the one monotonic clock by a
      // read before the header was written and one after, so a pause (or a backoff timer that runs
      // late, which the fixed "250 - 20" this replaces could not survive) only widens the bracket.
      const header = Number(arrival.headers['x-deadline-remaining-ms']);
      expect(header).toBeLessThanOrEqual(usableAtStart[i]);
      expect(header).toBeGreaterThanOrEqual(Math.floor(callerLeftAfterInject[i] - 150));
    });
    expect(events.at(-1)).toMatchObject({ 'deadline.retry.started': false, 'deadline.retry.decision': 'insufficient_budget' });
    expect(otel.span('search').attributes['deadline.abort.code']).toBe('INSUFFICIENT_BUDGET');
    // Attempts ran, so the call is not "not started": it ran out of budget.
    expect(otel.span('search').attributes['deadline.outcome']).toBe('expired');
  });

  it('checks again after a backoff that ran late: a blocked event loop does not start an attempt below minAttemptMs', async () => {
    dependency = await startDependency((_req, res) => reply(res, 503, {}));
    const url = dependency.url;
    const err = await withDeadline({ operation: 'agent.run', timeoutMs: 1_000, parent: null }, (root) =>
      retryWithinDeadline(
        (a) =>
          call(url, a).catch((failure: unknown) => {
            // Once attempt 1 has failed, and before the 100 ms backoff timer can fire, hold the event loop
            // until less than minAttemptMs (500) is left: the backoff fitted when it was checked (about
            // 1,000 ms left then), the attempt after it no longer does.
            if (a.attempt === 1) setTimeout(() => { while (root.remainingMs() > 450); }, 10);
            throw failure;
          }),
        { operation: 'late-backoff', attempts: 5, backoffMs: 100, minAttemptMs: 500 },
      ),
    ).catch((e: unknown) => e);

    expect(err).toBeInstanceOf(InsufficientBudgetError);
    expect(dependency.arrivals).toHaveLength(1);
    expect(attemptEvents('late-backoff').map((e) => [e['deadline.retry.attempt'], e['deadline.retry.started'], e['deadline.retry.decision']])).toEqual([
      [1, true, 'retry'],
      [2, false, 'insufficient_budget'],
    ]);
  });

  it('retries a transient failure inside the budget with one idempotency key for all attempts', async () => {
    let calls = 0;
    dependency = await startDependency((_req, res) => (++calls === 1 ? reply(res, 503, {}) : reply(res, 200, { stock: 4 })));
    const url = dependency.url;
    const result = await withDeadline({ operation: 'agent.run', timeoutMs: 3_000, parent: null }, () =>
      retryWithinDeadline((a) => call(url, a), { operation: 'inventory.read', backoffMs: 50 }),
    );
    expect(result).toEqual({ stock: 4 });
    const keys = dependency.arrivals.map((a) => a.headers['idempotency-key']);
    expect(keys).toHaveLength(2);
    expect(keys[0]).toMatch(/^[0-9a-f-]{36}$/);
    expect(keys[1]).toBe(keys[0]);
    expect(attemptEvents('inventory.read').map((e) => e['deadline.retry.decision'])).toEqual(['retry', 'succeeded']);
  });

  it('refuses before the first call when the budget is already too small (span outcome not_started)', async () => {
    dependency = await startDependency((_req, res) => reply(res, 200, {}));
    const url = dependency.url;
    const err = await withDeadline({ operation: 'agent.run', timeoutMs: 200, parent: null }, () =>
      retryWithinDeadline((a) => call(url, a), { operation: 'slow.read', minAttemptMs: 500 }),
    ).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InsufficientBudgetError);
    expect(dependency.arrivals).toHaveLength(0);
    expect(otel.span('slow.read').attributes['deadline.outcome']).toBe('not_started');
  });
});

describe('retryWithinDeadline: what is never retried', () => {
  const never: [string, () => unknown][] = [
    ['DeadlineExceededError', () => new DeadlineExceededError('downstream', Date.now())],
    ['InsufficientBudgetError', () => new InsufficientBudgetError('downstream', 500, 10)],
    ['DeadlineCancelledError', () => new DeadlineCancelledError('downstream', new Error('gone'))],
    ['a foreign error whose cause has code DEADLINE_EXCEEDED', () => new TypeError('fetch failed', { cause: { code: 'DEADLINE_EXCEEDED' } })],
    ['undici ResponseStatusCodeError shape with x-deadline-expired', () => Object.assign(new Error('504'), { statusCode: 504, headers: { 'x-deadline-expired': '1' } })],
  ];
  it.each(never)('%s: one call, even when retryable says yes', async (_name, make) => {
    let calls = 0;
    const err = await withDeadline({ operation: 'agent.run', timeoutMs: 2_000, parent: null }, () =>
      retryWithinDeadline(
        () => {
          calls++;
          throw make();
        },
        { operation: 'never', backoffMs: 1, retryable: () => true },
      ),
    ).catch((e: unknown) => e);
    expect(calls).toBe(1);
    expect(err).toBeInstanceOf(Error);
  });

  it('does not retry a real server reply carrying x-deadline-expired, thrown as the fetch Response itself', async () => {
    dependency = await startDependency((_req, res) => reply(res, 504, { code: 'DEADLINE_EXCEEDED' }, { 'x-deadline-expired': '1' }));
    const url = dependency.url;
    const err = await withDeadline({ operation: 'agent.run', timeoutMs: 2_000, parent: null }, () =>
      retryWithinDeadline(
        async ({ signal }) => {
          const res = await fetch(url, { signal });
          if (!res.ok) throw res;
          return res;
        },
        { operation: 'planner', backoffMs: 1 },
      ),
    ).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Response);
    expect(dependency.arrivals).toHaveLength(1);
    expect(attemptEvents('planner')[0]['deadline.retry.decision']).toBe('deadline_expired_reply');
  });

  it('stops with DeadlineExceededError when the shared deadline (less the reserve) ends an attempt in flight', async () => {
    dependency = await startDependency(() => undefined); // never answers
    const url = dependency.url;
    let rootCutoff = 0;
    let scopeCutoff = 0;
    const err = await withDeadline({ operation: 'agent.run', timeoutMs: 800, parent: null }, (root) => {
      rootCutoff = root.expiresAtMs;
      return retryWithinDeadline((a) => {
        scopeCutoff = getDeadline()!.expiresAtMs;
        return call(url, a);
      }, { operation: 'hang', reserveMs: 300, backoffMs: 1 }).catch((e: unknown) => e);
    });
    expect(err).toBeInstanceOf(DeadlineExceededError);
    expect(dependency.arrivals).toHaveLength(1);
    // Aborted at the reserve, not at the caller's cutoff: the error names the retry scope's cutoff,
    // which ends 300 ms before the caller's. (This used to read the caller's time left when the
    // error arrived and want more than 150 ms: an abort timer running late on a loaded machine took
    // that margin away without anything being wrong. Which cutoff fired does not depend on timing.)
    expect((err as DeadlineExceededError).expiresAtMs).toBe(scopeCutoff);
    expect(scopeCutoff).toBeLessThan(rootCutoff);
    expect(attemptEvents('hang').map((e) => e['deadline.retry.decision'])).toEqual(['deadline_exceeded']);
  });
});

describe('retryWithinDeadline: idempotency across a late commit', () => {
  it('ends with exactly one committed effect when the first write commits after the client gave up', async () => {
    const committed = new Map<string, number>();
    const pending = new Map<string, Promise<void>>();
    dependency = await startDependency((req, res) => {
      const key = String(req.headers['idempotency-key']);
      if (committed.has(key)) return reply(res, 200, { orderId: committed.get(key), replayed: true });
      const inFlight = pending.get(key);
      if (inFlight !== undefined) {
        void inFlight.then(() => reply(res, 200, { orderId: committed.get(key), replayed: true }));
        return;
      }
      // Hold the first write and commit it only once the client has hung up.
      pending.set(
        key,
        new Promise<void>((resolve) =>
          res.on('close', () => {
            committed.set(key, committed.size + 1);
            resolve();
          }),
        ),
      );
    });
    const url = `${dependency.url}/orders`;
    const result = await withDeadline({ operation: 'agent.run', timeoutMs: 5_000, parent: null }, () =>
      retryWithinDeadline((a) => call(url, a, 'POST'), { operation: 'orders.create', attemptTimeoutMs: 200, backoffMs: 100 }),
    );
    expect(result).toEqual({ orderId: 1, replayed: true });
    expect(dependency.arrivals).toHaveLength(2);
    expect(dependency.arrivals[1].headers['idempotency-key']).toBe(dependency.arrivals[0].headers['idempotency-key']);
    expect(committed.size).toBe(1);
  });
});

describe('retryWithinDeadline: the backoff sleep', () => {
  it('aborts with the deadline when the caller cancels, leaving no timer or listener behind', async () => {
    const caller = new AbortController();
    const timers = watchTimers();
    try {
      let calls = 0;
      const started = performance.now();
      const pending = withDeadline({ operation: 'agent.run', timeoutMs: 20_000, parent: null, signal: caller.signal }, () =>
        retryWithinDeadline(
          () => {
            calls++;
            throw new Error('transient');
          },
          { operation: 'backoff', backoffMs: 10_000 },
        ),
      ).catch((e: unknown) => e);
      await sleep(50);
      expect(timers.live()).toBeGreaterThanOrEqual(1); // the backoff (and the deadlines armed by its signal)
      caller.abort(new Error('user left'));
      const err = await pending;
      expect(performance.now() - started).toBeLessThan(2_000);
      expect(err).toBeInstanceOf(DeadlineCancelledError);
      expect(calls).toBe(1);
      await sleep(10); // lets the in-memory exporter's own setTimeout(0) callbacks run
      expect(timers.live()).toBe(0);
    } finally {
      timers.restore();
    }
    expect(getEventListeners(caller.signal, 'abort')).toHaveLength(0);
    expect(attemptEvents('backoff').map((e) => [e['deadline.retry.started'], e['deadline.retry.decision']])).toEqual([
      [true, 'retry'],
      [false, 'cancelled'],
    ]);
  });

  it('honours its own signal option the same way', async () => {
    const stop = new AbortController();
    const pending = retryWithinDeadline(
      () => {
        throw new Error('transient');
      },
      { backoffMs: 10_000, signal: stop.signal, deadline: null },
    ).catch((e: unknown) => e);
    await sleep(20);
    stop.abort();
    expect(await pending).toBeInstanceOf(DeadlineCancelledError);
    expect(getEventListeners(stop.signal, 'abort')).toHaveLength(0);
  });

  it('keeps each wait within its schedule with jitter', async () => {
    const gaps: number[] = [];
    let last = performance.now();
    await retryWithinDeadline(
      ({ attempt }) => {
        const now = performance.now();
        if (attempt > 1) gaps.push(now - last);
        last = now;
        if (attempt < 4) throw new Error('transient');
      },
      { attempts: 4, backoffMs: () => 60, jitter: 0.5, deadline: null },
    );
    expect(gaps).toHaveLength(3);
    for (const gap of gaps) {
      expect(gap).toBeGreaterThanOrEqual(30 - 2);
      expect(gap).toBeLessThan(60 + 200);
    }
  });
});

describe('retryWithinDeadline without a deadline', () => {
  it('is bounded by attempts only, and says so with remainingMs Infinity', async () => {
    dependency = await startDependency((_req, res) => reply(res, 503, {}));
    const url = dependency.url;
    const seen: number[] = [];
    expect(getDeadline()).toBeUndefined();
    const err = await retryWithinDeadline(
      (a) => {
        seen.push(a.remainingMs);
        return call(url, a);
      },
      { attempts: 3, backoffMs: 1 },
    ).catch((e: unknown) => e);
    expect((err as Error).message).toBe('HTTP 503');
    expect(dependency.arrivals).toHaveLength(3);
    expect(seen).toEqual([Infinity, Infinity, Infinity]);
    expect(attemptEvents('retry').map((e) => e['deadline.retry.decision'])).toEqual(['retry', 'retry', 'attempts_exhausted']);
  });

  it('does not retry what retryable rejects (the default rejects 4xx except 408, 425, 429)', async () => {
    let calls = 0;
    const err = await retryWithinDeadline(
      () => {
        calls++;
        throw Object.assign(new Error('bad request'), { status: 400 });
      },
      { deadline: null, backoffMs: 1 },
    ).catch((e: unknown) => e);
    expect((err as Error).message).toBe('bad request');
    expect(calls).toBe(1);
  });
});

describe('defaultRetryable and carriesDeadlineExpired', () => {
  const retryableRows: [string, unknown, boolean][] = [
    ['a network error', Object.assign(new Error('x'), { code: 'ECONNRESET' }), true],
    ['503', { status: 503 }, true],
    ['408', { statusCode: 408 }, true],
    ['429 on the response', { response: { status: 429 } }, true],
    ['404', { status: 404 }, false],
    ['400 in a cause', new Error('x', { cause: { status: 400 } }), false],
    ['a string', 'boom', true],
  ];
  it.each(retryableRows)('defaultRetryable(%s) is %s', (_name, err, expected) => {
    expect(defaultRetryable(err)).toBe(expected);
  });

  const expiredRows: [string, unknown, boolean][] = [
    ['a fetch Response', new Response(null, { status: 504, headers: { 'x-deadline-expired': '1' } }), true],
    ['an error with the Response', { response: new Response(null, { status: 504, headers: { 'x-deadline-expired': '1' } }) }, true],
    ['a 200 Response: it ran', new Response(null, { status: 200, headers: { 'x-deadline-expired': '1' } }), false],
    ['an error with a 201 on res', { res: { statusCode: 201, headers: { 'x-deadline-expired': '1' } } }, false],
    ['an IncomingMessage-like on res', { res: { headers: { 'x-deadline-expired': '1' } } }, true],
    ['array-valued', { headers: { 'x-deadline-expired': ['1'] } }, true],
    ['value 0', { headers: { 'x-deadline-expired': '0' } }, false],
    ['no header', new Response(null, { status: 504 }), false],
    ['a headers getter that throws', { headers: { get: () => { throw new Error('x'); } } }, false],
    ['null', null, false],
  ];
  it.each(expiredRows)('carriesDeadlineExpired(%s) is %s', (_name, err, expected) => {
    expect(carriesDeadlineExpired(err)).toBe(expected);
  });
});

describe('retryWithinDeadline: bad options', () => {
  const rows: [string, object][] = [
    ['attempts 0', { attempts: 0 }],
    ['attempts 1.5', { attempts: 1.5 }],
    ['negative backoff', { backoffMs: -1 }],
    ['NaN in a backoff list', { backoffMs: [10, NaN] }],
    ['empty backoff list', { backoffMs: [] }],
    ['jitter 2', { jitter: 2 }],
    ['Infinity minAttemptMs', { minAttemptMs: Infinity }],
    ['retryable not a function', { retryable: 1 }],
    ['empty idempotency key', { idempotencyKey: '' }],
  ];
  it.each(rows)('%s is a clear error before any call', async (_name, options) => {
    let calls = 0;
    await expect(retryWithinDeadline(() => calls++, options as never)).rejects.toThrow(/must|empty/);
    expect(calls).toBe(0);
  });
});
