// Loopback HTTP plumbing for the example services. Until the package's
// DeadlineInstrumentation is registered, deadlines cross each hop explicitly:
// propagation.inject on the way out, propagation.extract on the way in.
import { createServer, request } from 'node:http';
import { context, propagation, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import { DeadlineAttributes, getDeadline } from 'otel-deadline';

const tracer = trace.getTracer('otel-deadline-example');

/** Headers that carry the active trace and deadline. */
function outgoingHeaders(extra = {}) {
  const headers = { 'content-type': 'application/json', ...extra };
  propagation.inject(context.active(), headers);
  return headers;
}

/** An error that keeps the reply's status and headers, so retries can read `x-deadline-expired`. */
function statusError(status, headers) {
  return Object.assign(new Error(`HTTP ${status}`), { status, headers });
}

/** POST JSON with fetch under the active deadline. */
export async function postJson(url, body, { signal, headers } = {}) {
  const res = await fetch(url, { method: 'POST', body: JSON.stringify(body ?? {}), headers: outgoingHeaders(headers), signal });
  if (!res.ok) {
    await res.arrayBuffer();
    throw statusError(res.status, res.headers);
  }
  return res.json();
}

/** POST JSON with node:http under the active deadline. */
export function postJsonHttp(url, body, { signal } = {}) {
  return new Promise((resolve, reject) => {
    const text = JSON.stringify(body ?? {});
    const req = request(url, { method: 'POST', headers: outgoingHeaders({ 'content-length': Buffer.byteLength(text) }), signal });
    req.on('error', (err) => reject(signal?.aborted ? signal.reason : err));
    req.on('response', (res) => {
      const chunks = [];
      res.on('data', (chunk) => chunks.push(chunk));
      res.on('error', reject);
      res.on('end', () => {
        if (res.statusCode >= 400) return reject(statusError(res.statusCode, res.headers));
        resolve(JSON.parse(Buffer.concat(chunks).toString() || '{}'));
      });
    });
    req.end(text);
  });
}

/** Waits `ms` or until `signal` aborts, leaving no timer behind. */
export function pause(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

function send(res, status, body, headers = {}) {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), ...headers });
  res.end(text);
}

/**
 * Starts a JSON service on 127.0.0.1, port 0. Each request runs `handler` in a
 * SERVER span, in the context the incoming headers describe (trace and
 * deadline). A request whose deadline has already passed is answered 504 with
 * `x-deadline-expired: 1` before the handler runs. `arrivals` counts every
 * request that reached the service.
 */
export async function serve(name, handler) {
  const arrivals = [];
  const server = createServer((req, res) => {
    arrivals.push({ path: req.url, atMs: Date.now() });
    const chunks = [];
    req.on('data', (chunk) => chunks.push(chunk));
    req.on('end', () => {
      const incoming = propagation.extract(ROOT_CONTEXT, req.headers);
      const span = tracer.startSpan(`${name} ${req.url}`, { kind: SpanKind.SERVER }, incoming);
      const deadline = getDeadline(incoming);
      if (deadline?.aborted || deadline?.expired) {
        span.setAttribute(DeadlineAttributes.OUTCOME, 'not_started');
        span.setStatus({ code: SpanStatusCode.ERROR, message: 'DEADLINE_EXCEEDED' });
        span.end();
        return send(res, 504, { code: 'DEADLINE_EXCEEDED' }, { 'x-deadline-expired': '1' });
      }
      let body = {};
      try {
        body = JSON.parse(Buffer.concat(chunks).toString() || '{}');
      } catch {
        span.end();
        return send(res, 400, { code: 'BAD_JSON' });
      }
      context
        .with(trace.setSpan(incoming, span), () => handler({ path: req.url, headers: req.headers, body, deadline }))
        .then(
          (result) => send(res, 200, result),
          (err) => {
            const budget = err?.code === 'DEADLINE_EXCEEDED' || err?.code === 'INSUFFICIENT_BUDGET';
            const status = typeof err?.status === 'number' ? err.status : budget ? 504 : 500;
            span.setStatus({ code: SpanStatusCode.ERROR, message: err?.code ?? err?.name ?? 'Error' });
            send(res, status, { code: err?.code ?? 'ERROR' });
          },
        )
        .finally(() => span.end());
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    name,
    url: `http://127.0.0.1:${server.address().port}`,
    arrivals,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
