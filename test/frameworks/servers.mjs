// Real servers of four web frameworks, each with one route per failure: the
// route runs `failures[name]()`, which rejects with a deadline error the
// package raised. `helper` is the framework's error helper, or undefined for
// the framework's default error handling alone. express and koa have no types
// of their own, hence JavaScript (servers.d.mts types this file).
import express from 'express';
import Koa from 'koa';
import Fastify from 'fastify';
import { Hono } from 'hono';
import { serve } from '@hono/node-server';

function listening(server) {
  return new Promise((resolve) => {
    const done = () => resolve({ url: `http://127.0.0.1:${server.address().port}`, close: () => close(server) });
    if (server.listening) done();
    else server.once('listening', done);
  });
}

function close(server) {
  server.closeAllConnections?.();
  return new Promise((resolve) => server.close(() => resolve()));
}

export async function startExpress(failures, helper) {
  const app = express();
  // Production: in development express's default handler sends the stack of any error.
  app.set('env', 'production');
  for (const name of Object.keys(failures)) app.get(`/${name}`, async () => failures[name]());
  if (helper) app.use(helper);
  return listening(app.listen(0, '127.0.0.1'));
}

export async function startKoa(failures, helper) {
  const app = new Koa();
  app.silent = true;
  if (helper) app.use(helper);
  app.use(async (ctx) => {
    const name = ctx.path.slice(1);
    if (Object.hasOwn(failures, name)) await failures[name]();
  });
  return listening(app.listen(0, '127.0.0.1'));
}

export async function startFastify(failures) {
  const app = Fastify({ logger: false });
  for (const name of Object.keys(failures)) app.get(`/${name}`, async () => failures[name]());
  await app.listen({ port: 0, host: '127.0.0.1' });
  return { url: `http://127.0.0.1:${app.server.address().port}`, close: () => app.close() };
}

export async function startHono(failures, helper) {
  const app = new Hono();
  for (const name of Object.keys(failures)) app.get(`/${name}`, async () => failures[name]());
  if (helper) app.onError(helper);
  const server = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' });
  return listening(server);
}
