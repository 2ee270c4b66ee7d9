// Loads the suite named in ?suite=, runs it, shows the results and leaves them in window.__unit
// for tests/e2e/test_web_units.py: {done, suite, results: [{name, ok, message}], error}.

import { run } from "./harness.js";

const out = document.getElementById("results");
const suite = new URLSearchParams(window.location.search).get("suite") || "";

function line(text, cls) {
  const li = document.createElement("li");
  li.className = cls;
  li.textContent = text;
  out.append(li);
}

async function main() {
  const unit = { done: false, suite, results: [], error: null };
  window.__unit = unit;
  try {
    if (!/^[a-z][a-z0-9_-]*$/.test(suite)) throw new Error(`no such suite: ${JSON.stringify(suite)}`);
    await import(`./${suite}.test.js`);
    unit.results = await run();
  } catch (err) {
    unit.error = err instanceof Error ? `${err.name}: ${err.message}\n${err.stack || ""}` : String(err);
  }
  for (const r of unit.results) {
    line(r.ok ? `pass  ${r.name}` : `FAIL  ${r.name}\n${r.message}`, r.ok ? "pass" : "fail");
  }
  if (unit.error) line(`could not run the suite: ${unit.error}`, "fail");
  document.title = `${unit.results.filter((r) => !r.ok).length || unit.error ? "FAIL" : "pass"} · ${suite}`;
  unit.done = true;
}

main();
