// The browser's link to the dashboard backend, as the pages show it: "up", "down" (offline — reconnecting; actions
// paused) or "back" (reconnected a moment ago: the page reloaded from the database). See dashboard/link.py.
//
// Two sources, whichever knows first:
// - the browser's own network state (`navigator.onLine`, the online/offline events): a cable pulled, Wi-Fi gone;
// - Reflex's websocket: its client calls `window.__reflex_otel.onSocketConnect/onSocketDisconnect` (an
//   instrumentation hook, chained here if something else installed one) on every connect and drop.
// Before the first connect the link is not "down": the page is still loading, and shows nothing to act on yet.
import { useSyncExternalStore } from "react";

const BACK_FOR_MS = 6000; // how long "back online" stays up after a reconnect

let online = true;
let connected = false;
let everConnected = false;
let backUntil = 0;
let backTimer;
const listeners = new Set();

const compute = () => {
  if (!online || (everConnected && !connected)) return "down";
  return Date.now() < backUntil ? "back" : "up";
};

let current = "up";

const update = () => {
  if (typeof document !== "undefined") document.documentElement.dataset.outboxSocket = connected ? "up" : "down";
  const next = compute();
  if (next !== current) {
    current = next;
    if (typeof document !== "undefined") document.documentElement.dataset.outboxLink = next;
    for (const listener of listeners) listener();
  }
};

const markBack = () => {
  backUntil = Date.now() + BACK_FOR_MS;
  window.clearTimeout(backTimer);
  backTimer = window.setTimeout(update, BACK_FOR_MS + 10);
};

if (typeof window !== "undefined") {
  online = navigator.onLine !== false;
  const wasDown = () => compute() === "down";
  window.addEventListener("offline", () => {
    online = false;
    update();
  });
  window.addEventListener("online", () => {
    // The network is back. The socket may still be reconnecting (then the link stays "down" until it has); one that
    // never dropped reloaded nothing, so the page does not claim it did.
    online = true;
    update();
  });
  const hooks = window.__reflex_otel || {};
  const chained = { connect: hooks.onSocketConnect, disconnect: hooks.onSocketDisconnect };
  window.__reflex_otel = Object.assign(hooks, {
    onSocketConnect: (...args) => {
      const down = wasDown();
      const again = everConnected;
      connected = true;
      everConnected = true;
      if (again && down) markBack();
      update();
      return chained.connect?.(...args);
    },
    onSocketDisconnect: (...args) => {
      connected = false;
      update();
      return chained.disconnect?.(...args);
    },
  });
  document.documentElement.dataset.outboxLink = current;
  document.documentElement.dataset.outboxSocket = "down";
}

const subscribe = (listener) => {
  listeners.add(listener);
  return () => listeners.delete(listener);
};
const snapshot = () => current;
const serverSnapshot = () => "up";

// The link's state for a component: "up", "down" or "back"; the component re-renders when it changes.
export function useLinkState() {
  return useSyncExternalStore(subscribe, snapshot, serverSnapshot);
}
