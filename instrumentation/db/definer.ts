type Exports = Record<string, unknown>;

/**
 * The prototype in the chain that defines `name` (mysql2 3.11.5+ moved the methods to a base class): wrapped there,
 * our wrapper and instrumentation-mysql2's chain.
 */
export function definerOf(proto: Exports, name: string): Exports {
  for (let current: Exports | null = proto; current !== null && current !== Object.prototype; current = Object.getPrototypeOf(current) as Exports | null) {
    if (Object.prototype.hasOwnProperty.call(current, name)) return current;
  }
  return proto;
}
