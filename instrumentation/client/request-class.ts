/**
 * Hooks on undici's internal Request class, for the requests our channel
 * subscriber has seen. Installed once per copy of undici (npm's and the one
 * behind global fetch) on the class prototype, the first time one of its
 * requests is created: patching each request instead would give every
 * request its own object shape, which slows undici's hot paths down.
 */

type AnyFunction = (this: unknown, ...args: unknown[]) => unknown;

export interface RequestClassHooks {
  /** Return true to drop an `addHeader(name, value)` call (undici's addHeader appends, it never replaces). */
  dropHeader(request: object, name: unknown, value: unknown): boolean;
  /** Runs right before undici writes the request on a connection. */
  beforeWrite(request: object): void;
}

interface Patch {
  proto: Record<string, unknown>;
  name: string;
  original: AnyFunction;
  wrapper: AnyFunction;
}

/** Patches `Object.getPrototypeOf(request)` once; call `restore` to take every patch back. */
export class RequestClassPatcher {
  private readonly seen = new WeakSet<object>();
  private readonly patches: Patch[] = [];
  private active = true;

  constructor(private readonly hooks: RequestClassHooks) {}

  patchClassOf(request: object): void {
    const proto = Object.getPrototypeOf(request) as Record<string, unknown> | null;
    if (proto === null || this.seen.has(proto)) return;
    this.seen.add(proto);
    const isActive = () => this.active;
    const { hooks } = this;
    this.wrap(proto, 'addHeader', (original) =>
      function (this: unknown, name: unknown, value: unknown) {
        if (isActive() && hooks.dropHeader(this as object, name, value)) return this;
        return original.call(this, name, value);
      },
    );
    this.wrap(proto, 'onConnect', (original) =>
      function (this: unknown, ...args: unknown[]) {
        if (isActive()) hooks.beforeWrite(this as object);
        return original.apply(this, args);
      },
    );
  }

  /** Puts the originals back where our wrapper is still in place; any other stays a pass-through. */
  restore(): void {
    this.active = false;
    for (const { proto, name, original, wrapper } of this.patches) if (proto[name] === wrapper) proto[name] = original;
    this.patches.length = 0;
  }

  private wrap(proto: Record<string, unknown>, name: string, make: (original: AnyFunction) => AnyFunction): void {
    const original = proto[name];
    if (typeof original !== 'function' || !Object.prototype.hasOwnProperty.call(proto, name)) return;
    const wrapper = make(original as AnyFunction);
    proto[name] = wrapper;
    this.patches.push({ proto, name, original: original as AnyFunction, wrapper });
  }
}
