import type { MethodPatch } from '../wrap';
import { wrapMethod } from '../wrap';
import type { ServerHost } from './admission';
import { wrapRequestListener } from './listener';

type AnyFunction = (this: unknown, ...args: unknown[]) => unknown;

const REGISTRATION_METHODS = ['on', 'addListener', 'prependListener'] as const;

/**
 * Wraps 'request' listeners as a server registers them (`createServer(handler)`
 * goes through `on` too). Listeners registered before enable() run unguarded.
 */
export function patchServerPrototype(host: ServerHost, owner: object, prototype: Record<string, unknown>): MethodPatch[] {
  const patches: MethodPatch[] = [];
  for (const name of REGISTRATION_METHODS) {
    const patch = wrapMethod(prototype, name, owner, () => host.isEnabled(), (original: AnyFunction) =>
      function (this: unknown, event: unknown, listener: unknown, ...rest: unknown[]) {
        const wrapped =
          event === 'request' && typeof listener === 'function'
            ? wrapRequestListener(host, listener as Parameters<typeof wrapRequestListener>[1])
            : listener;
        return original.call(this, event, wrapped, ...rest);
      },
    );
    if (patch !== undefined) patches.push(patch);
  }
  return patches;
}
