import type { AttributeValue } from '@opentelemetry/api';

/**
 * Direct access to an SDK span's attribute map, for the one write per span
 * this processor makes when the span ends.
 *
 * Why not `span.setAttribute`: the SDK stores each attribute with a keyed
 * store (`attributes[key] = value`), and V8 turns an object into a slow
 * dictionary once keyed stores have given it about 20 properties. An http
 * client span carries a dozen attributes of its own, so our eight pushed it
 * over: building and garbage-collecting that span then cost several
 * microseconds more (measured on the old bench chain). Stores written with literal property
 * names (see DeadlineSpanProcessor) do not count against that limit.
 *
 * The fields used are the ones `setAttribute` itself uses in sdk-trace 2.x and
 * 3.x: `attributes`, `_attributesCount` and `_spanLimits`. If a span lacks
 * them, or its limits could drop or truncate what we write, the caller goes
 * through `setAttribute` as usual.
 */
interface SdkSpanFields {
  attributes?: unknown;
  _attributesCount?: unknown;
  _spanLimits?: { attributeCountLimit?: number; attributeValueLengthLimit?: number } | null;
}

export type AttributeMap = Record<string, AttributeValue>;

/**
 * The span's attribute map, if up to `newKeys` attributes with string values
 * no longer than `longestString` can be added to it exactly as setAttribute
 * would add them (nothing dropped, nothing truncated); else undefined.
 * The caller adds them and then reports how many were new with `countAdded`.
 */
export function directAttributes(span: object, newKeys: number, longestString: number): AttributeMap | undefined {
  const { attributes, _attributesCount: count, _spanLimits: limits } = span as SdkSpanFields;
  if (typeof count !== 'number' || typeof limits !== 'object' || limits === null) return undefined;
  if (typeof attributes !== 'object' || attributes === null || !Object.isExtensible(attributes)) return undefined;
  if (Object.getPrototypeOf(attributes) !== Object.prototype) return undefined;
  const countLimit = limits.attributeCountLimit;
  if (countLimit !== undefined && count + newKeys > countLimit) return undefined;
  const lengthLimit = limits.attributeValueLengthLimit;
  // The SDK ignores a limit that is not positive.
  if (lengthLimit !== undefined && lengthLimit > 0 && longestString > lengthLimit) return undefined;
  return attributes as AttributeMap;
}

/** Keeps the SDK's attribute count right after `added` new keys were written directly. */
export function countAdded(span: object, added: number): void {
  (span as { _attributesCount: number })._attributesCount += added;
}

/** 1 if `key` is not in `attributes` yet: the SDK counts only new keys. */
export function isNewKey(attributes: AttributeMap, key: string): number {
  return Object.prototype.hasOwnProperty.call(attributes, key) ? 0 : 1;
}
