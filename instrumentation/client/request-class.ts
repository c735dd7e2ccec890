/**
 * Hooks on undici's internal Request class (docs/internals.md), installed once
 * per copy of undici (npm's and global fetch's), on the prototype, the first
 * time the channel subscriber sees one of its requests.
 */

type AnyFunction = (this: unknown, ...args: unknown[]) => unknown;

export interface RequestClassHooks {
  /** Runs before undici writes the request, with undici's abort from `onConnect`; a reason returned aborts it unwritten. */
  beforeWrite(request: object, abort: (reason: unknown) => void): unknown;
  /** Runs when the response is complete, before the `undici:request:trailers` channel (where span ends happen). */
  beforeComplete?(request: object): void;
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
    // Called before onConnect returns, the abort marks the request aborted, which undici's writers check.
    this.wrap(proto, 'onConnect', (original) =>
      function (this: unknown, ...args: unknown[]) {
        const abort = args[0];
        if (!isActive() || typeof abort !== 'function') return original.apply(this, args);
        const refusal = hooks.beforeWrite(this as object, abort as (reason: unknown) => void);
        const result = original.apply(this, args);
        if (refusal !== undefined) abort(refusal);
        return result;
      },
    );
    const { beforeComplete } = hooks;
    if (beforeComplete !== undefined) {
      this.wrap(proto, 'onComplete', (original) =>
        function (this: unknown, ...args: unknown[]) {
          if (isActive()) beforeComplete.call(hooks, this as object);
          return original.apply(this, args);
        },
      );
    }
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
