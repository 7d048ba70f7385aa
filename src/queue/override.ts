// A wrapper that replaces some calls of an object and leaves every other one to the object
// itself, so a wrapper lists what it changes and nothing else (no pass-through per method, and
// a method added to the queue needs no wrapper edit).

/**
 * `target` as seen through `overrides`: a property `overrides` has is its (functions bound to
 * `overrides`); any other is the target's (functions bound to the target, so class instances keep
 * their `this`). Bound functions are made once per property.
 */
export function overriding<T extends object>(target: T, overrides: object): T {
  const bound = new Map<PropertyKey, unknown>();
  const bind = (owner: object, prop: PropertyKey, value: unknown): unknown => {
    if (typeof value !== "function") return value;
    let fn = bound.get(prop);
    if (fn === undefined) {
      fn = (value as (...args: unknown[]) => unknown).bind(owner);
      bound.set(prop, fn);
    }
    return fn;
  };
  return new Proxy(target, {
    get(t, prop) {
      const owner = prop in overrides ? overrides : t;
      return bind(owner, prop, Reflect.get(owner, prop, owner));
    },
    has(t, prop) {
      return prop in overrides || prop in t;
    },
  });
}
