// What every scenario script shares: one JSON report on stdout when the scenario ends (or fails,
// or runs past its limit), read by tests/e2e/node_clients.py. Exit status 0 only when it finished.

export function makeReport(scenario) {
  const started = Date.now();
  const report = { scenario, serverEvents: [], errors: [], ms: 0 };
  let ended = false;
  let cleanup = () => {};

  function end(failure) {
    if (ended) return;
    ended = true;
    report.ms = Date.now() - started;
    if (failure) report.failure = String(failure?.stack ?? failure);
    try {
      cleanup(report);
    } catch (err) {
      report.failure ??= `cleanup failed: ${err?.stack ?? err}`;
    }
    process.stdout.write(`${JSON.stringify(report)}\n`, () => process.exit(report.failure ? 1 : 0));
  }

  const limitMs = Number(process.env.SCENARIO_TIMEOUT_MS ?? 90_000);
  setTimeout(() => end(`timed out after ${limitMs} ms; server events: ${report.serverEvents.join(' ')}`), limitMs);
  process.on('uncaughtException', (err) => end(err));
  process.on('unhandledRejection', (err) => end(err));
  return {
    report,
    end,
    onEnd(fn) {
      cleanup = fn;
    },
  };
}

// an error event or exception as plain JSON (an SDK error wraps the server's error event)
export function plain(value) {
  if (value instanceof Error) return { name: value.name, message: value.message, error: value.error };
  try {
    return JSON.parse(JSON.stringify(value));
  } catch {
    return String(value);
  }
}
