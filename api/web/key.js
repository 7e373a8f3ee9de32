// key.js: the API key panel (this address's key, generate, revoke, paste).
import { $ } from "./dom.js";
import { api, notice, storedKey, storeKey } from "./api.js";

// keyChanged is called after the key kept in this browser may have changed.
let keyChanged = () => {};

async function refreshKey() {
  const state = $("key-state");
  try {
    const s = await api("GET", "/api/api-key/", { auth: false });
    const local = storedKey();
    if (s.hasKey) {
      const mine = local && s.keySuffix && local.endsWith(s.keySuffix.replace(/^…/, ""));
      state.textContent = "This address has an active key ending " + s.keySuffix +
        (mine ? " (kept in this browser)." : local ? ". The key kept in this browser is a different one." :
          ". It is not kept in this browser: paste it below, or revoke it and generate a new one.");
    } else {
      state.textContent = "This address has no active key." + (local ? " The key kept in this browser no longer works." : "");
    }
    $("key-generate").disabled = s.hasKey;
    // A disabled button says why: one key per address.
    $("key-generate").title = s.hasKey ? "This address has a key already: paste it below, or revoke it to generate a new one." : "";
    $("key-revoke").disabled = !s.hasKey;
    // The address's key is not in this browser: pasting it is what is
    // left to do, so that control is shown, not folded away.
    if (s.hasKey && !local) $("key-manual").open = true;
  } catch (e) {
    state.textContent = "Could not read the key status: " + e.message;
  }
}

async function generateKey() {
  notice("");
  try {
    const k = await api("POST", "/api/api-key/generate/", { auth: false });
    storeKey(k.key);
    $("key-full").value = k.key;
    $("key-new").hidden = false;
    $("key-copy-state").textContent = k.message || "";
    $("key-full").focus();
    $("key-full").select();
  } catch (e) {
    notice("Generate: " + e.message);
  }
  await refreshKey();
  keyChanged();
}

async function copyKey() {
  const v = $("key-full").value;
  try {
    await navigator.clipboard.writeText(v);
    $("key-copy-state").textContent = "Copied to the clipboard.";
  } catch (_) {
    $("key-full").select();
    $("key-copy-state").textContent = "Select the key and copy it (Ctrl+C / ⌘C).";
  }
}

let revokeArmed = false;
async function revokeKey() {
  const b = $("key-revoke");
  if (!revokeArmed) { // two steps instead of window.confirm, which blocks and is not styled
    revokeArmed = true;
    b.textContent = "Confirm: revoke the key";
    setTimeout(() => { revokeArmed = false; b.textContent = "Revoke this address's key"; }, 8000);
    return;
  }
  revokeArmed = false;
  b.textContent = "Revoke this address's key";
  notice("");
  try {
    await api("POST", "/api/api-key/revoke/", { auth: false });
    storeKey("");
    $("key-new").hidden = true;
    $("key-full").value = "";
  } catch (e) {
    notice("Revoke: " + e.message);
  }
  await refreshKey();
  keyChanged();
}

/** goToKeyPanel brings the key panel into view with its field for a key
 * one has open and focused: a job is shown only to the key that submitted
 * it, so pasting that key is what opens it. */
export function goToKeyPanel() {
  $("key-manual").open = true;
  $("key-panel").scrollIntoView({ block: "start" });
  $("key-input").focus();
}

/** initKeyPanel wires the key panel; onChange runs when the kept key may have changed. */
export function initKeyPanel(onChange) {
  keyChanged = onChange || keyChanged;
  $("key-generate").addEventListener("click", generateKey);
  $("key-revoke").addEventListener("click", revokeKey);
  $("key-copy").addEventListener("click", copyKey);
  $("key-use").addEventListener("click", () => {
    const v = $("key-input").value.trim();
    if (!v) return;
    storeKey(v);
    $("key-input").value = "";
    refreshKey();
    keyChanged();
  });
  $("key-input").addEventListener("keydown", (ev) => { if (ev.key === "Enter") $("key-use").click(); });
  $("key-forget").addEventListener("click", () => { storeKey(""); refreshKey(); keyChanged(); });
  refreshKey();
}
