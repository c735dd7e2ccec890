/**
 * Method wrapping that coexists with OpenTelemetry instrumentations. Their
 * `_wrap` unwraps anything carrying shimmer's `__wrapped` mark first, so two of
 * them wrapping `http.request` remove each other. Ours carry no shimmer marks,
 * never unwrap anyone, and when disabled under someone else's wrapper stay in
 * the chain as a pass-through.
 */

const WRAPPED_BY = Symbol.for('otel-deadline.wrapped-by');
const ORIGINAL = Symbol('otel-deadline.original');

type AnyFunction = (this: unknown, ...args: unknown[]) => unknown;

export interface MethodPatch {
  /** Puts the original back if our wrapper is still on top; otherwise leaves a pass-through in the chain. */
  restore(): void;
}

/** True if `fn`, or anything it wraps through shimmer's `__original` chain, is a wrapper made by `owner`. */
function isWrappedBy(fn: unknown, owner: object): boolean {
  let current: unknown = fn;
  for (let depth = 0; typeof current === 'function' && depth < 32; depth++) {
    const marked = current as { [WRAPPED_BY]?: object; __original?: unknown };
    if (marked[WRAPPED_BY] === owner) return true;
    current = marked.__original;
  }
  return false;
}

/** True if `fn` is `owner`'s own wrapper (nobody has wrapped on top of it). */
export function isOwnWrapper(fn: unknown, owner: object): boolean {
  return typeof fn === 'function' && (fn as { [WRAPPED_BY]?: object })[WRAPPED_BY] === owner;
}

/** True if `fn` is another instrumentation's shimmer wrapper (it carries `__original`). */
export function isShimmerWrapper(fn: unknown): boolean {
  return typeof fn === 'function' && typeof (fn as { __original?: unknown }).__original === 'function';
}

/**
 * `fn` as it was before `owner` wrapped it: `fn` itself when `owner` has no
 * wrapper in its chain, the original when `fn` is `owner`'s wrapper, and
 * undefined when someone else wrapped on top of `owner`'s wrapper.
 */
export function unwrappedBy(fn: AnyFunction, owner: object): AnyFunction | undefined {
  const marked = fn as AnyFunction & { [WRAPPED_BY]?: object; [ORIGINAL]?: AnyFunction };
  if (marked[WRAPPED_BY] === owner) return marked[ORIGINAL];
  return isWrappedBy(fn, owner) ? undefined : fn;
}

/**
 * Replaces `target[name]` by `makeWrapper(original)`, unless `owner` already has
 * a wrapper in that method's chain. While `isActive()` is false, calls go
 * straight to `original`.
 */
export function wrapMethod(
  target: Record<string, unknown>,
  name: string,
  owner: object,
  isActive: () => boolean,
  makeWrapper: (original: AnyFunction) => AnyFunction,
): MethodPatch | undefined {
  const original = target[name];
  if (typeof original !== 'function' || isWrappedBy(original, owner)) return undefined;
  const hadOwn = Object.prototype.hasOwnProperty.call(target, name);
  const active = makeWrapper(original as AnyFunction);
  const wrapper = function (this: unknown, ...args: unknown[]): unknown {
    return isActive() ? active.apply(this, args) : (original as AnyFunction).apply(this, args);
  };
  Object.defineProperties(wrapper, {
    [WRAPPED_BY]: { value: owner },
    [ORIGINAL]: { value: original },
    name: { value: original.name },
    length: { value: original.length },
  });
  setProperty(target, name, wrapper);
  return {
    restore() {
      if (target[name] !== wrapper) return;
      // An inherited method (EventEmitter's `on` on a Server prototype) goes back to being inherited.
      if (hadOwn) setProperty(target, name, original);
      else delete target[name];
    },
  };
}

function setProperty(target: Record<string, unknown>, name: string, value: unknown): void {
  const descriptor = Object.getOwnPropertyDescriptor(target, name);
  if (descriptor === undefined || descriptor.writable === true || descriptor.set !== undefined) {
    // Plain assignment also goes through import-in-the-middle's namespace setters.
    target[name] = value;
    if (target[name] === value) return;
  }
  Object.defineProperty(target, name, {
    configurable: true,
    enumerable: descriptor?.enumerable ?? true,
    writable: true,
    value,
  });
}
