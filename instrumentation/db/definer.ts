type Exports = Record<string, unknown>;

/**
 * The prototype in the chain that defines `name` (mysql2 3.11.5+ moved the
 * methods to a base class). Wrapping it there, where instrumentation-mysql2
 * wraps too, chains the two wrappers; a wrapper on the subclass would call
 * the base method it saw at patch time and skip one wrapped on it later.
 */
export function definerOf(proto: Exports, name: string): Exports {
  for (let current: Exports | null = proto; current !== null && current !== Object.prototype; current = Object.getPrototypeOf(current) as Exports | null) {
    if (Object.prototype.hasOwnProperty.call(current, name)) return current;
  }
  return proto;
}
