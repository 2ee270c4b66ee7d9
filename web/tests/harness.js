// A very small test harness for web/'s ES modules, run in a real browser.
//
// A suite file registers cases with test(name, fn); run() runs them one after another (an async
// case is awaited, with a timeout) and returns [{name, ok, message}]. tests/e2e/test_web_units.py
// opens index.html?suite=<name> in headless Chromium, reads window.__unit back and turns each case
// into one pytest test, so a failed assertion here fails that pytest test with this message.
// Names must be plain string literals: pytest reads them from the source to know what to expect.

// taken now: a test may replace the page's timers with a fake clock while it runs
const realSetTimeout = globalThis.setTimeout.bind(globalThis);
const realClearTimeout = globalThis.clearTimeout.bind(globalThis);

const DEFAULT_TIMEOUT_MS = 5000;
const cases = [];

export class AssertionError extends Error {
  constructor(message) {
    super(message);
    this.name = "AssertionError";
  }
}

/** Register a case. ``timeoutMs`` bounds an async case (a stall must fail, not hang). */
export function test(name, fn, timeoutMs = DEFAULT_TIMEOUT_MS) {
  if (typeof name !== "string" || !name) throw new Error("a test needs a name");
  if (cases.some((c) => c.name === name)) throw new Error(`two tests are named ${JSON.stringify(name)}`);
  cases.push({ name, fn, timeoutMs });
}

function show(v) {
  // JSON, except that undefined (which JSON drops) is spelled out: {a: 1} and {a: 1, b: undefined} differ
  try {
    return JSON.stringify(v, (_, x) => (x === undefined ? "<undefined>" : x)) ?? String(v);
  } catch {
    return String(v);
  }
}

export function assert(cond, message = "assertion failed") {
  if (!cond) throw new AssertionError(message);
}

/** Structural equality: primitives by Object.is, arrays element-wise, plain objects key-wise. */
export function deepEqual(a, b) {
  if (Object.is(a, b)) return true;
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  const ka = Object.keys(a);
  const kb = Object.keys(b);
  if (ka.length !== kb.length) return false;
  return ka.every((k) => Object.hasOwn(b, k) && deepEqual(a[k], b[k]));
}

export function equal(actual, expected, message = "") {
  if (!deepEqual(actual, expected)) {
    throw new AssertionError(`${message ? message + ": " : ""}expected ${show(expected)}, got ${show(actual)}`);
  }
}

function withTimeout(promise, ms, name) {
  let timer;
  const stall = new Promise((_, reject) => {
    timer = realSetTimeout(() => reject(new AssertionError(`${name}: still running after ${ms} ms`)), ms);
  });
  return Promise.race([promise, stall]).finally(() => realClearTimeout(timer));
}

/** Run every registered case in order; never throws. */
export async function run() {
  const results = [];
  for (const c of cases) {
    try {
      await withTimeout(Promise.resolve().then(c.fn), c.timeoutMs, c.name);
      results.push({ name: c.name, ok: true, message: "" });
    } catch (err) {
      const message = err instanceof Error ? `${err.name}: ${err.message}\n${err.stack || ""}` : String(err);
      results.push({ name: c.name, ok: false, message });
    }
  }
  return results;
}
