// H3Kit preflight in the graph editor: a graph that holds an H3 or LTX node is checked by the server
// (POST /h3kit/preflight: the rules of `python -m h3kit doctor`) before it is queued.
//   FAIL -> the queue stops; a dialog lists each problem on its node (click: select + center the node),
//           with "Run anyway".            WARN -> a toast (each distinct warning once per page).
//   Could not check (the route refused the graph, answered an error, or did not answer in time) -> the same
//           dialog says why, with "Run unchecked": a graph is never queued unchecked without the user's word.
//   ADAPTED -> the server moved inputs to this ComfyUI's layout (SaveVideo's format.codec -> codec, ...): the
//           adapted prompt is queued and a toast lists every change (the graph on the canvas is not touched).
//   The dialog adds only what ComfyUI does not show: model and input files that ComfyUI's own missing-file lists
//   already name (frontend 1.49 on) are one line, "N model files missing, listed by ComfyUI"; when they are all
//   that fails, ComfyUI's own report is the answer and the queue goes on. It opens beside the Run button, never
//   over it.
// Setting "H3Kit.Preflight.Enabled" turns it off; command "H3Kit: check this graph" runs it on demand.
// The pack's templates open at the view their file saves (the whole graph, laid out to fit a 1600 x 1000 window at a
// zoom where node text is drawn); frontends 1.49 and 1.58 otherwise fit a template into 75 % of the window, which
// left the two-stage graph at 13 %, every node a grey box.
// Plain JS, no build step. Frontend differences are feature-detected; if the extension itself breaks, the
// queue goes on as if it were absent (the route and the H3KitPreflight node keep working).
import { app } from "../../scripts/app.js";
import { api } from "../../scripts/api.js";

const ROUTE = "/h3kit/preflight";
const SETTING_ID = "H3Kit.Preflight.Enabled";
const COMMAND_ID = "H3Kit.CheckGraph";
const APPROVAL_MS = 30000; // "Run anyway" covers the rest of a batch (one queue call per batch item)
const CHECK_TIMEOUT_MS = 90000; // the route reads a body for up to 60 s, then checks it

let watched = null; // RegExp of node types to check, from GET /h3kit/preflight; null: route absent
let approved = { key: "", until: 0 };
const warned = new Set();

function settingEnabled() {
  const setting = app.extensionManager?.setting;
  const value = typeof setting?.get === "function"
    ? setting.get(SETTING_ID)
    : app.ui?.settings?.getSettingValue?.(SETTING_ID);
  return value !== false;
}

function toast(severity, summary, detail, life = 10000) {
  const toasts = app.extensionManager?.toast;
  if (typeof toasts?.add === "function") toasts.add({ severity, summary, detail, life });
  else console.warn(`[H3Kit] ${summary}: ${detail}`);
}

function isWatched(output) {
  return !!watched && !!output &&
    Object.values(output).some((node) => watched.test(String(node?.class_type ?? "")));
}

/** What the route checks of a queued prompt: {output: the nodes with a type, absent: {id: type} of the active nodes
 * this server lacks}. Frontends leave such a node out of the prompt or keep it there without a class_type (1.27,
 * 1.40 and 1.58 on a host without H3 do); the route refuses a node without one, so it goes to `absent` with the type
 * the canvas shows. The prompt that is queued is not changed. */
function checkedPrompt(prompt) {
  const registered = globalThis.LiteGraph?.registered_node_types ?? {};
  const canvasNodes = new Map((prompt?.workflow?.nodes ?? []).map((node) => [String(node.id), node]));
  const output = {};
  const absent = {};
  for (const [id, node] of Object.entries(prompt?.output ?? {})) {
    if (typeof node?.class_type === "string") output[id] = node;
    else if (typeof canvasNodes.get(id)?.type === "string") absent[id] = canvasNodes.get(id).type;
  }
  for (const [id, node] of canvasNodes) {
    if (!(id in output) && node.mode === 0 && !(node.type in registered)) absent[id] = node.type;
  }
  return { output, absent };
}

/** The server's report for a queued prompt ({output, workflow}); when the check itself could not run, a
 * report with `unchecked: true` whose one FAIL says why (the route's own message when it gave one). */
async function preflight(prompt) {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), CHECK_TIMEOUT_MS);
  const checked = checkedPrompt(prompt);
  try {
    const response = await api.fetchApi(ROUTE, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ prompt: checked.output, absent: checked.absent }),
      signal: controller.signal,
    });
    const text = await response.text();
    let body = null;
    try { body = JSON.parse(text); } catch { /* an error page from a proxy or the server: shown as text */ }
    if (!response.ok || !Array.isArray(body?.checks)) {
      const reason = body?.error ?? `HTTP ${response.status}: ${text.slice(0, 200) || response.statusText}`;
      return unchecked(reason, body?.fix);
    }
    return body;
  } catch (error) {
    const reason = controller.signal.aborted
      ? `the server did not answer within ${CHECK_TIMEOUT_MS / 1000} s`
      : String(error?.message ?? error);
    return unchecked(reason);
  } finally {
    clearTimeout(timer);
  }
}

function unchecked(reason, fix) {
  return {
    unchecked: true, status: "FAIL", fail: 1, warn: 0, pass: 0,
    checks: [{ status: "FAIL", check: "H3Kit preflight", detail: `could not check this graph: ${reason}`,
      fix: fix ?? "run `python -m h3kit doctor --workflow FILE` on the exported API graph, or queue it unchecked" }],
  };
}

function graphNode(id) {
  const graph = app.rootGraph ?? app.graph;
  return graph?.getNodeById?.(Number(id)) ?? graph?.getNodeById?.(id) ?? null;
}

function showNode(id) {
  const node = graphNode(id);
  const canvas = app.canvas;
  if (!node || !canvas) return;
  canvas.deselectAll?.();
  canvas.selectNode?.(node, false);
  canvas.centerOnNode?.(node);
  canvas.setDirty?.(true, true);
}

/** The files ComfyUI's own missing-file lists name (frontend 1.49 on: its "N errors found" panel), as
 * {model: Set, media: Set} of "<node id>::<input>"; a kind is null where this frontend keeps no such list or hides it
 * (then the dialog names those files itself). Read from the frontend's stores, feature-detected: nothing here is a
 * public API, so anything unexpected means "no list". */
function comfyListedFiles() {
  const stores = document.getElementById("vue-app")?.__vue_app__?.config?.globalProperties?.$pinia?._s;
  const listed = (storeId, name) => {
    const store = stores?.get?.(storeId);
    if (!store) return null;
    const visible = `visible${name[0].toUpperCase()}${name.slice(1)}`; // 1.58: respects "hide missing-model warnings"
    const items = visible in store ? store[visible] : store[name];
    if (items != null && !Array.isArray(items)) return null;
    return new Set((items ?? []).filter((c) => c?.isMissing !== false)
      .map((c) => `${String(c.nodeId)}::${String(c.widgetName)}`));
  };
  try {
    return { model: listed("missingModel", "missingModelCandidates"), media: listed("missingMedia", "missingMediaCandidates") };
  } catch {
    return { model: null, media: null };
  }
}

/** The FAIL and WARN lines to show: those about a file ComfyUI's own list names become one line per kind. */
function shownProblems(report) {
  const problems = report.checks.filter((c) => c.status === "FAIL" || c.status === "WARN");
  const listed = comfyListedFiles();
  const kinds = [["model", "model file(s)"], ["media", "input file(s)"]];
  const byComfy = (check, kind) => check.status === "FAIL" && check.node_id !== undefined && check.input !== undefined &&
    !!listed[kind]?.has(`${check.node_id}::${check.input}`);
  const shown = problems.filter((c) => !kinds.some(([kind]) => byComfy(c, kind)));
  const summaries = kinds.map(([kind, what]) => [problems.filter((c) => byComfy(c, kind)).length, what])
    .filter(([count]) => count > 0)
    .map(([count, what]) => ({ status: "FAIL", check: "files", comfyListed: true,
      detail: `${count} ${what} missing, listed by ComfyUI`,
      fix: "ComfyUI's error panel names each one; each file's size and source: " +
        "`python -m h3kit doctor --workflow FILE` or the README's model table" }));
  return [...shown, ...summaries].sort((a, b) => (a.status === b.status ? 0 : a.status === "FAIL" ? -1 : 1));
}

/** Where the dialog goes: beside the Run button (left of its bar, top-aligned), else below or above it, so Run and
 * ComfyUI's own error overlay under it stay visible; the stylesheet's corner where no Run button is found. Called
 * again while the dialog is open: the frontend moves its Run bar (its error panel opens beside it, a user drags it). */
function placeBesideRun(dialog) {
  const run = [...document.querySelectorAll("[data-testid=queue-button], #queue-button, .comfyui-queue-button")]
    .find((e) => e.getClientRects().length);
  const bar = run?.closest(".actionbar, .comfyui-menu") ?? run;
  const r = bar?.getBoundingClientRect();
  if (!r || !r.width) return; // no Run button on screen (or still being laid out): keep where the dialog is
  const width = Math.min(480, innerWidth * 0.9);
  if (r.left - 24 >= Math.min(width, 320)) {
    Object.assign(dialog.style, { top: `${Math.max(8, r.top)}px`, bottom: "auto", right: `${innerWidth - r.left + 12}px`,
      width: `${Math.min(width, r.left - 24)}px`, maxHeight: `${innerHeight - Math.max(8, r.top) - 16}px` });
  } else if (innerHeight - r.bottom >= 240) {
    Object.assign(dialog.style, { top: `${r.bottom + 8}px`, bottom: "auto", right: "16px", width: "",
      maxHeight: `${innerHeight - r.bottom - 24}px` });
  } else {
    Object.assign(dialog.style, { top: "auto", bottom: `${innerHeight - r.top + 8}px`, right: "16px", width: "",
      maxHeight: `${r.top - 24}px` });
  }
}

const STYLE = `
.h3kit-preflight { position: fixed; top: 64px; right: 16px; width: min(480px, 90vw); max-height: 80vh;
  display: flex; flex-direction: column; z-index: 10000; background: var(--comfy-menu-bg, #353535);
  color: var(--fg-color, #eee); border: 1px solid var(--border-color, #4e4e4e); border-radius: 8px;
  box-shadow: 0 8px 24px rgba(0,0,0,.5); font: 14px/1.4 sans-serif; }
.h3kit-preflight h2 { margin: 0; padding: 12px 16px; font-size: 16px; border-bottom: 1px solid var(--border-color, #4e4e4e); }
.h3kit-preflight ul { list-style: none; margin: 0; padding: 8px; overflow: auto; }
.h3kit-preflight li { padding: 8px; border-radius: 6px; margin-bottom: 6px; background: rgba(0,0,0,.2); }
.h3kit-preflight li[data-node-id] { cursor: pointer; }
.h3kit-preflight li[data-node-id]:hover { outline: 1px solid var(--p-primary-color, #6aa0ff); }
.h3kit-preflight .h3kit-status { font-weight: bold; margin-right: 6px; }
.h3kit-preflight .h3kit-FAIL .h3kit-status { color: #ff6b6b; }
.h3kit-preflight .h3kit-WARN .h3kit-status { color: #f0c050; }
.h3kit-preflight .h3kit-fix { opacity: .85; margin-top: 4px; }
.h3kit-preflight footer { display: flex; gap: 8px; justify-content: flex-end; padding: 12px 16px;
  border-top: 1px solid var(--border-color, #4e4e4e); }
.h3kit-preflight button { padding: 6px 14px; border-radius: 6px; border: 1px solid var(--border-color, #4e4e4e);
  background: var(--comfy-input-bg, #222); color: inherit; cursor: pointer; }
`;

function ensureStyle() {
  if (document.getElementById("h3kit-preflight-style")) return;
  const style = document.createElement("style");
  style.id = "h3kit-preflight-style";
  style.textContent = STYLE;
  document.head.append(style);
}

// Text that is not ordinary visible text on one line (Unicode Cc, Cf, Cs, Co, Cn, Zl, Zp, and every space but ' '):
// the characters Python's str.isprintable refuses, as the server's checks.problem.printable escapes them.
const UNSAFE_CHAR = /[\p{Cc}\p{Cf}\p{Cs}\p{Co}\p{Cn}\p{Zl}\p{Zp}]|(?! )\p{Zs}/u;
const UNSAFE_OR_BACKSLASH = /[\p{Cc}\p{Cf}\p{Cs}\p{Co}\p{Cn}\p{Zl}\p{Zp}]|(?! )\p{Zs}|\\/gu;
const SHORT_ESCAPES = { "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t" };

/** Names and text from a workflow or the server, shown on one line: a line break, an escape sequence, a bidi
 * override or a lone surrogate appears as \n, \x1b, \u202e, \ud800 (backslashes doubled when anything is escaped). */
function shown(value) {
  const text = String(value ?? "");
  if (!UNSAFE_CHAR.test(text)) return text;
  return text.replace(UNSAFE_OR_BACKSLASH, (ch) => {
    if (SHORT_ESCAPES[ch]) return SHORT_ESCAPES[ch];
    const code = ch.codePointAt(0);
    const hex = code.toString(16);
    return code < 0x100 ? `\\x${hex.padStart(2, "0")}` : code < 0x10000 ? `\\u${hex.padStart(4, "0")}`
      : `\\U${hex.padStart(8, "0")}`;
  });
}

function element(tag, className, text) {
  const el = document.createElement(tag);
  if (className) el.className = className;
  if (text !== undefined) el.textContent = shown(text); // server text is never parsed as HTML, and shows escaped
  return el;
}

function problemItem(check) {
  const item = element("li", `h3kit-preflight-item h3kit-${check.status}`);
  const node = check.node_id !== undefined ? graphNode(check.node_id) : null;
  const head = element("div");
  head.append(element("span", "h3kit-status", check.status));
  const where = node ? `node ${check.node_id} "${node.title ?? node.type}"` : check.check;
  head.append(element("span", "h3kit-where", where));
  item.append(head, element("div", "h3kit-detail", check.detail));
  if (check.fix) item.append(element("div", "h3kit-fix", `Fix: ${check.fix}`));
  if (node) {
    item.dataset.nodeId = String(check.node_id);
    item.title = "Show this node";
    item.addEventListener("click", () => showNode(check.node_id));
  }
  return item;
}

/** The problems of a report in a dialog; resolves true for "Run anyway", false otherwise. */
function showReport(report, { canRun }) {
  ensureStyle();
  document.querySelector(".h3kit-preflight")?.remove();
  const problems = shownProblems(report);
  const dialog = element("div", "h3kit-preflight");
  dialog.setAttribute("role", "dialog");
  dialog.dataset.testid = "h3kit-preflight-dialog";
  const failing = problems.filter((c) => c.status === "FAIL" && !c.comfyListed).length;
  const title = report.unchecked
    ? "H3Kit preflight could not check this graph"
    : failing
      ? `H3Kit preflight: ${failing} problem(s) would spoil this run`
      : report.fail
        ? "H3Kit preflight: files are missing"
        : `H3Kit preflight: ${report.warn} warning(s)`;
  dialog.append(element("h2", "", canRun ? `${title}. Not queued.` : title));
  const list = element("ul");
  problems.forEach((check) => list.append(problemItem(check)));
  dialog.append(list);
  const footer = element("footer");
  dialog.append(footer);
  return new Promise((resolve) => {
    const placing = setInterval(() => placeBesideRun(dialog), 400);
    const close = (result) => {
      clearInterval(placing);
      dialog.remove();
      document.removeEventListener("keydown", onKey, true);
      resolve(result);
    };
    const onKey = (event) => { if (event.key === "Escape") close(false); };
    document.addEventListener("keydown", onKey, true);
    if (canRun) {
      const run = element("button", "h3kit-run-anyway", report.unchecked ? "Run unchecked" : "Run anyway");
      run.addEventListener("click", () => close(true));
      footer.append(run);
    }
    const cancel = element("button", "h3kit-close", canRun ? "Cancel" : "Close");
    cancel.addEventListener("click", () => close(false));
    footer.append(cancel);
    document.body.append(dialog);
    placeBesideRun(dialog);
    cancel.focus();
  });
}

function toastWarnings(report) {
  const fresh = report.checks.filter((c) => c.status === "WARN" && !warned.has(`${c.check}|${c.detail}`));
  fresh.forEach((c) => warned.add(`${c.check}|${c.detail}`));
  if (!fresh.length) return;
  const detail = fresh.map((c) => shown(`${c.node_id !== undefined ? `node ${c.node_id}: ` : ""}${c.detail}` +
    (c.fix ? ` (fix: ${c.fix})` : ""))).join("\n");
  toast("warn", `H3Kit preflight: ${fresh.length} warning(s)`, detail);
}

function failureKey(report) {
  return JSON.stringify(report.checks.filter((c) => c.status === "FAIL").map((c) => [c.node_id, c.detail]));
}

/** Queue the prompt the server adapted to its input layout, and say what changed. Nodes the route was not sent
 * (no class_type: this server lacks their type) stay as the frontend made them, for ComfyUI to report. */
function useAdapted(prompt, report) {
  const adapted = report.adapted;
  if (!adapted?.prompt || !Array.isArray(adapted.changes) || !adapted.changes.length) return;
  prompt.output = { ...prompt.output, ...adapted.prompt };
  toast("info", `H3Kit adapted ${adapted.changes.length} input(s) to this ComfyUI`,
    adapted.changes.map((c) => shown(c.text)).join("\n"), 12000);
}

/** true: queue it; false: the user stopped it. */
async function allowQueue(prompt) {
  const report = await preflight(prompt);
  useAdapted(prompt, report);
  // only files ComfyUI's own error panel already lists: its report is the answer, nothing is added to it
  const onlyListed = !report.unchecked && shownProblems(report).every((c) => c.status !== "FAIL" || c.comfyListed);
  if (report.fail > 0 && !onlyListed) {
    const key = failureKey(report);
    if (approved.key === key && performance.now() < approved.until) return true;
    const run = await showReport(report, { canRun: true });
    if (run) approved = { key, until: performance.now() + APPROVAL_MS };
    report.checks.forEach((c) => c.status === "WARN" && warned.add(`${c.check}|${c.detail}`)); // shown above
    return run;
  }
  toastWarnings(report);
  return true;
}

/** After a template of this pack opens from the template browser, show it at the view its file saves. Only the
 * pack's own graphs (extra.h3kit, written by `h3kit workflows ui`), only when the frontend says the graph comes from
 * the template browser (openSource "template", 1.49 on), or on a frontend that never says where a graph comes from
 * (1.27, 1.40: it restores the saved view itself, but its canvas starts right of its side bar and below its menu);
 * anything else loads as the frontend decides. */
const DOCKED_BARS_MARGIN = 10; // px between a docked bar and the graph's corner

function installTemplateView() {
  const load = app.loadGraphData;
  if (typeof load !== "function") return;
  app.loadGraphData = async function (graphData, ...rest) {
    const result = await load.call(this, graphData, ...rest);
    try {
      const view = graphData?.extra?.h3kit?.generator ? graphData.extra.ds : null;
      const source = rest[3]?.openSource;
      if ((source === "template" || source === undefined) && Number.isFinite(view?.scale) && Array.isArray(view.offset)) {
        // the frontend fits the view in the frames after loading: set ours after that
        await new Promise((resolve) => requestAnimationFrame(() => requestAnimationFrame(resolve)));
        const ds = app.canvas?.ds;
        if (ds) {
          // the saved offset clears the side bar and toolbar that float over the canvas in 1.49/1.58; 1.27 and 1.40
          // dock theirs beside the canvas (it starts right of the side bar), so there the graph's corner goes just
          // inside it; a graph loaded otherwise on 1.49/1.58 (no openSource) shows as the frontend decides
          const docked = (app.canvas.canvas?.getBoundingClientRect?.().left ?? 0) > 0;
          if (source === "template" || docked) {
            ds.scale = view.scale;
            ds.offset[0] = docked ? DOCKED_BARS_MARGIN / view.scale : view.offset[0];
            ds.offset[1] = docked ? DOCKED_BARS_MARGIN / view.scale : view.offset[1];
            app.canvas.setDirty?.(true, true);
          }
        }
      }
    } catch (error) {
      console.warn("[H3Kit] could not show the template at its saved view", error);
    }
    return result;
  };
}

function installQueueGuard() {
  if (typeof api.queuePrompt !== "function") {
    console.warn("[H3Kit] this frontend has no api.queuePrompt; graphs are not checked before queueing " +
      "(use the 'H3Kit: check this graph' command)");
    return;
  }
  const queuePrompt = api.queuePrompt;
  api.queuePrompt = async function (number, data, ...rest) {
    let queue = true;
    try {
      if (settingEnabled() && isWatched(data?.output)) queue = await allowQueue(data);
    } catch (error) {
      console.error("[H3Kit] preflight failed; queueing without it", error);
    }
    if (!queue) return { node_errors: null }; // no prompt_id: the frontend records nothing as queued
    return queuePrompt.call(this, number, data, ...rest);
  };
}

async function checkThisGraph() {
  const report = await preflight(await app.graphToPrompt());
  useAdapted({}, report); // says what queueing would change; the canvas is not touched
  if (report.fail || report.warn) await showReport(report, { canRun: false });
  else toast("success", "H3Kit preflight", `all ${report.pass} checks passed`, 5000);
}

app.registerExtension({
  name: "H3Kit.Preflight",
  settings: [{
    id: SETTING_ID,
    category: ["H3Kit", "Preflight", "Enabled"],
    name: "Check graphs with H3/LTX nodes before queueing",
    tooltip: "Asks the server (the rules of H3Kit's `doctor` command) before a graph with an H3 or LTX node " +
      "is queued; problems that would spoil the run stop it, with a 'Run anyway' choice.",
    type: "boolean",
    defaultValue: true,
  }],
  commands: [{ id: COMMAND_ID, label: "H3Kit: check this graph", icon: "pi pi-check-circle", function: checkThisGraph }],
  menuCommands: [{ path: ["Extensions", "H3Kit"], commands: [COMMAND_ID] }],
  async setup() {
    installTemplateView();
    try {
      const response = await api.fetchApi(ROUTE, { cache: "no-store" });
      if (!response.ok) throw new Error(`GET ${ROUTE}: HTTP ${response.status}`);
      watched = new RegExp((await response.json()).watch);
    } catch (error) {
      console.warn("[H3Kit] the preflight route is not available; graphs are not checked before queueing", error);
      return;
    }
    installQueueGuard();
  },
});
