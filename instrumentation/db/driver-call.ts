import { context, type Context } from '@opentelemetry/api';
import { isTracingSuppressed } from '@opentelemetry/core';
import { deadlineIn, getDeadline, withoutDeadline } from '../../src/context';
import type { Deadline } from '../../src/deadline';
import type { ClientHost } from '../call/host';
import { wrapMethod, type MethodPatch } from '../wrap';

export type AnyFunction = (this: unknown, ...args: unknown[]) => unknown;
export type Exports = Record<string, unknown>;
export type DbDriver = 'pg' | 'mysql2' | 'ioredis';
export type NodeCallback = (err: unknown, ...results: unknown[]) => void;

/** The deadline a driver call made in `ctx` must respect; undefined with none, the driver switched off, or tracing suppressed. */
export function statementDeadline(host: ClientHost, driver: DbDriver, ctx: Context): Deadline | undefined {
  const deadline = deadlineIn(ctx);
  return deadline !== undefined && host.settings[driver] && !isTracingSuppressed(ctx) ? deadline : undefined;
}

/**
 * Wraps a driver method that opens a connection (pg Client#connect, ioredis Redis#connect, mysql2 createConnection and
 * getConnection) to run without the caller's deadline: a socket runs all its later events (handshakes, queue flushes,
 * other requests' callbacks) in the context it was created in. The spans stay.
 */
export function makeOpensOutsideDeadline(original: AnyFunction): AnyFunction {
  return function opensConnection(this: unknown, ...args: unknown[]): unknown {
    const ctx = context.active();
    if (getDeadline(ctx) === undefined) return original.apply(this, args);
    return context.with(withoutDeadline(ctx), () => original.apply(this, args));
  };
}

/** Wraps each of `wrappers` where `Class`'s prototype chain defines it (mysql2 3.11.5+ moved the methods to a base class). */
export function wrapWhereDefined(Class: unknown, wrappers: Record<string, (original: AnyFunction) => AnyFunction>, owner: object, isActive: () => boolean): MethodPatch[] {
  const proto = (Class as { prototype?: Exports } | undefined)?.prototype;
  if (typeof Class !== 'function' || proto === undefined) return [];
  return Object.entries(wrappers).flatMap(([name, makeWrapper]) => wrapMethod(definerOf(proto, name), name, owner, isActive, makeWrapper) ?? []);
}

function definerOf(proto: Exports, name: string): Exports {
  for (let current: Exports | null = proto; current !== null && current !== Object.prototype; current = Object.getPrototypeOf(current) as Exports | null) {
    if (Object.prototype.hasOwnProperty.call(current, name)) return current;
  }
  return proto;
}

/** Calls a driver callback as the drivers do: a throw is rethrown on the next tick, never swallowed by the abort notification running it. */
export function deliver(callback: (...args: never[]) => unknown, ...args: unknown[]): void {
  try {
    (callback as (...a: unknown[]) => unknown)(...args);
  } catch (err) {
    process.nextTick(() => {
      throw err;
    });
  }
}

export function isFunction(value: unknown): value is (...args: never[]) => unknown {
  return typeof value === 'function';
}

/** The caller's callback, or one that settles the promise returned (in the driver's promise class) when there is none. */
export function callbackOrPromise(given: unknown, PromiseClass: PromiseConstructor = Promise): [NodeCallback, Promise<unknown> | undefined] {
  if (isFunction(given)) return [given as NodeCallback, undefined];
  let callback: NodeCallback;
  const promise = new PromiseClass((resolve, reject) => {
    callback = (err, result) => (err ? reject(err) : resolve(result));
  });
  return [callback!, promise];
}
