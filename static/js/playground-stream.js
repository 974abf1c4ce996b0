// Following one run as it generates: its server-sent events (/runs/<id>/events), resumed
// after the last position already shown, or, without EventSource, its exports polled
// every second. The run page and the compare page both follow runs through this.
export const FINISHED = new Set(["done", "cancelled", "failed"]);
export const STATUS_LABELS = {
  queued: "Queued",
  running: "Running",
  done: "Done",
  cancelled: "Stopped",
  failed: "Failed",
};

// `state` is the run's page state (events_url, tokens_url, api_url, status); `handlers`
// get the new events (a list), status changes (status, note) and the end payload; `alive`
// says whether the page still shows the run (polling stops once it does not).
export function followRun(state, after, handlers, alive = () => true) {
  if (!window.EventSource) {
    poll(state, handlers, alive);
    return { close() {} };
  }
  const url = new URL(state.events_url, window.location.href);
  if (after >= 0) url.searchParams.set("last_event_id", after);
  const source = new EventSource(url);
  source.addEventListener("run", (message) => {
    const run = JSON.parse(message.data);
    if (run.status) handlers.status(run.status);
  });
  source.addEventListener("token", (message) => {
    handlers.events([JSON.parse(message.data)]);
    if (state.status !== "running") handlers.status("running");
  });
  source.addEventListener("done", (message) => handlers.end(JSON.parse(message.data)));
  source.addEventListener("error", (message) => {
    if (message.data) {
      handlers.end(JSON.parse(message.data));
    } else if (source.readyState === EventSource.CONNECTING) {
      handlers.status(state.status, "reconnecting…"); // EventSource resends Last-Event-ID
    }
  });
  source.addEventListener("open", () => handlers.status(state.status));
  return source;
}

async function poll(state, handlers, alive) {
  while (!FINISHED.has(state.status) && alive()) {
    const tokens = await fetch(state.tokens_url).then((response) => response.json());
    handlers.events(tokens);
    const run = await fetch(state.api_url).then((response) => response.json());
    if (FINISHED.has(run.status)) handlers.end({ status: run.status, stats: run.stats, error: run.error });
    else await new Promise((resolve) => setTimeout(resolve, 1000));
  }
}
