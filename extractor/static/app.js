// The page behind GET /: send one file to POST /extract and show what came back, drawn over the
// file itself. Plain browser JavaScript, no library, no build step, nothing fetched from elsewhere.

const els = {
  app: document.getElementById("app"),
  zone: document.getElementById("drop-zone"),
  input: document.getElementById("file"),
  language: document.getElementById("opt-language"),
  ocrLanguages: document.getElementById("opt-ocr-languages"),
  rotate: document.getElementById("opt-rotate"),
  speakers: document.querySelectorAll('input[name="speakers"]'),
  speakerCount: document.getElementById("opt-speaker-count"),
  async: document.getElementById("opt-async"),
  auth: document.getElementById("auth"),
  token: document.getElementById("token"),
  status: document.getElementById("status"),
  error: document.getElementById("error"),
  result: document.getElementById("result"),
  viewer: document.getElementById("viewer"),
  lines: document.getElementById("lines"),
  json: document.getElementById("json"),
  copyJson: document.getElementById("copy-json"),
  copyText: document.getElementById("copy-text"),
  downloadJson: document.getElementById("download-json"),
  downloadText: document.getElementById("download-text"),
  downloadPdf: document.getElementById("download-pdf"),
  downloadVtt: document.getElementById("download-vtt"),
  downloadSrt: document.getElementById("download-srt"),
};

// What is on screen: object URLs (revoked when replaced), the reply as JSON text, its text, the
// file, the options it was read with, and the job's URL when it ran as one.
const shown = { urls: [], json: "", text: "", file: null, params: null, job: null };
// How this server reads images by default (GET /readyz): its configured OCR languages and its
// rotation setting. An option is sent only where the page's choice differs from them.
const ocrDefaults = { languages: null, rotate: null };
let inFlight = null; // AbortController of the running upload, so a new file cancels the old one
let generation = 0; // counts uploads: a reply that arrives after a newer file was chosen is dropped
let pendingFile = null; // the file waiting for an access token after a 401
let token = null; // kept in memory only: a reload forgets it

function setState(state, message) {
  els.app.dataset.state = state;
  els.status.textContent = message;
}

function showError(title, message, code) {
  els.error.replaceChildren();
  const head = document.createElement("strong");
  head.textContent = title;
  els.error.append(head);
  if (code) {
    const codeEl = document.createElement("span");
    codeEl.className = "error-code";
    codeEl.textContent = ` (${code})`;
    els.error.append(codeEl);
  }
  const body = document.createElement("p");
  body.style.margin = "0.2rem 0 0";
  body.textContent = message;
  els.error.append(body);
  els.error.hidden = false;
}

function formatBytes(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(0)} kB`;
  return `${(n / 1024 / 1024).toFixed(1)} MB`;
}

// [mm:ss.mmm], with hours in front only when there are any.
function clock(ms) {
  const hours = Math.floor(ms / 3_600_000);
  const minutes = Math.floor((ms % 3_600_000) / 60_000);
  const seconds = Math.floor((ms % 60_000) / 1000);
  const millis = ms % 1000;
  const two = (n) => String(n).padStart(2, "0");
  const head = hours ? `${hours}:${two(minutes)}` : two(minutes);
  return `${head}:${two(seconds)}.${String(millis).padStart(3, "0")}`;
}

// "How many speakers": "3" is num_speakers=3, "2-4" min_speakers=2&max_speakers=4 (either end may
// be left out); anything else goes as num_speakers for the server to refuse with its message.
// Any of them tells voices apart, as speakers=auto does.
function setSpeakerCount(params, count) {
  if (!count) return;
  const range = /^(\d*)\s*-\s*(\d*)$/.exec(count);
  if (range) {
    if (range[1]) params.set("min_speakers", range[1]);
    if (range[2]) params.set("max_speakers", range[2]);
  } else {
    params.set("num_speakers", count);
  }
  if (params.get("speakers") !== "channels") params.set("speakers", "auto");
}

// The checked OCR languages and the rotation switch, each sent only where it differs from the
// server's default (until /readyz says, the switch's default is taken as on, as it starts);
// nothing checked: the server's languages. The server ignores both for audio.
function setOcrOptions(params) {
  const boxes = [...els.ocrLanguages.querySelectorAll('input[type="checkbox"]')];
  const chosen = boxes.filter((box) => box.checked).map((box) => box.value);
  const usual = ocrDefaults.languages || [];
  const same = chosen.length === usual.length && chosen.every((code) => usual.includes(code));
  if (chosen.length && !same) params.set("ocr_languages", chosen.join("+"));
  if (els.rotate.checked !== (ocrDefaults.rotate ?? true)) {
    params.set("ocr_rotate", els.rotate.checked ? "on" : "off");
  }
}

// One checkbox per language Tesseract has installed on this server (GET /readyz lists them),
// its configured languages first and checked; the rotation switch set as the server's setting.
// osd is left out: it tells a page's orientation and script, it reads no text.
async function loadOcrOptions() {
  let tesseract = null;
  try {
    tesseract = (await (await fetch("/readyz")).json()).tesseract; // 503 while loading: the same
  } catch {
    // No list: the server's own languages are read.
  }
  if (!tesseract || typeof tesseract !== "object") {
    els.ocrLanguages.hidden = true;
    return;
  }
  const usual = tesseract.languages || [];
  const installed = (tesseract.installed_languages || []).filter((code) => code !== "osd");
  ocrDefaults.languages = usual;
  if (typeof tesseract.rotate === "boolean") {
    ocrDefaults.rotate = tesseract.rotate;
    els.rotate.checked = tesseract.rotate;
  }
  const ordered = [...usual.filter((code) => installed.includes(code)),
                   ...installed.filter((code) => !usual.includes(code))];
  for (const code of ordered) {
    const label = document.createElement("label");
    const box = document.createElement("input");
    box.type = "checkbox";
    box.name = "ocr-language";
    box.value = code;
    box.checked = usual.includes(code);
    label.append(box, ` ${code}`);
    els.ocrLanguages.append(label);
  }
  els.ocrLanguages.hidden = !ordered.length;
}

function speakerOf(cell) {
  const item = (cell.metadata || []).find((m) => m.key === "speaker");
  return item ? item.value : null;
}

// The text/plain rendering, derived from the JSON cells as the server derives it (one line per
// cell, "Speaker N: " in front where known), so the engine does not have to run a second time.
function textOf(doc) {
  return doc.cells
    .map((cell) => {
      const speaker = speakerOf(cell);
      return `${speaker ? `${speaker}: ` : ""}${cell.content}\n`;
    })
    .join("");
}

function baseName(name) {
  const dot = name.lastIndexOf(".");
  return dot > 0 ? name.slice(0, dot) : name || "result";
}

function objectURL(blob) {
  const url = URL.createObjectURL(blob);
  shown.urls.push(url);
  return url;
}

function clearResult() {
  for (const url of shown.urls) URL.revokeObjectURL(url);
  Object.assign(shown, { urls: [], json: "", text: "", file: null, params: null, job: null });
  els.viewer.replaceChildren();
  els.lines.replaceChildren();
  els.json.textContent = "";
  els.result.hidden = true;
}

// -- upload ----------------------------------------------------------------------------------

async function extract(file) {
  inFlight?.abort();
  const controller = new AbortController();
  inFlight = controller;
  generation += 1;
  const run = generation;
  clearResult();
  els.error.hidden = true;
  els.auth.hidden = true;
  pendingFile = null;

  const params = new URLSearchParams();
  const language = els.language.value.trim();
  if (language) params.set("language", language);
  const speakers = [...els.speakers].find((radio) => radio.checked)?.value;
  if (speakers) params.set("speakers", speakers); // "channels" or "auto"; empty: none
  setSpeakerCount(params, els.speakerCount.value.trim());
  setOcrOptions(params);
  const form = new FormData();
  form.append("upload", file, file.name || "upload");
  const headers = { Accept: "application/json" };
  if (token) headers.Authorization = `Bearer ${token}`;
  // A job (RFC 7240): 202 at once, then the page polls the job and reads its result.
  if (els.async.checked) headers.Prefer = "respond-async";

  setState("busy", `Extracting text from ${file.name} (${formatBytes(file.size)})…`);
  const started = performance.now();
  let response;
  let body;
  let job = null; // the job's URL, when the upload ran as one
  try {
    const query = params.toString() ? `?${params}` : "";
    response = await fetch(`/extract${query}`, {
      method: "POST", body: form, headers, signal: controller.signal,
    });
    if (response.status === 202) {
      ({ response, location: job } = await awaitJob(response, headers, controller.signal, file));
    }
    body = await response.text();
  } catch (err) {
    if (controller.signal.aborted) return;
    setState("error", "The upload did not go through.");
    showError("Could not reach the server", String(err.message || err));
    return;
  } finally {
    if (inFlight === controller) inFlight = null;
  }
  if (run !== generation) return;
  const seconds = ((performance.now() - started) / 1000).toFixed(1);
  let parsed = null;
  try {
    parsed = JSON.parse(body);
  } catch {
    // Not JSON: a proxy's error page, say; reported below by its status.
  }

  if (response.status === 401) {
    pendingFile = file;
    els.auth.hidden = false;
    setState("auth", token ? "That access token was refused; check it and send again."
                           : "This server needs an access token; enter it and send again.");
    if (token) {
      const error = parsed?.error;
      showError("Access token refused", error?.message || "401 Unauthorized", error?.code);
    }
    els.token.focus();
    return;
  }
  if (!response.ok || !Array.isArray(parsed?.cells)) {
    const error = parsed?.error;
    const retry = response.headers.get("Retry-After");
    let message = error?.message || `${response.status} ${response.statusText}`.trim();
    if (response.ok) message = "The reply is not the Importable JSON this page expects.";
    if (retry) message += ` Try again in ${retry} s.`;
    setState("error", `${file.name}: the server answered ${response.status}.`);
    showError(`Could not extract text from ${file.name}`, message, error?.code);
    return;
  }
  shown.params = params;
  shown.job = job;
  await show(file, parsed, seconds, run);
}

// Follow a job until it ends, showing its progress; its URL and its result (or, when it failed,
// a reply carrying its error as /extract would have answered it).
async function awaitJob(accepted, headers, signal, file) {
  let job = await accepted.json();
  const location = accepted.headers.get("Location") || `/v1/jobs/${job.id}`;
  const poll = { headers: { Authorization: headers.Authorization || "" }, signal };
  if (!headers.Authorization) delete poll.headers.Authorization;
  while (job.status === "queued" || job.status === "running") {
    const percent = Math.round(job.progress * 100);
    setState("busy", `Job for ${file.name}: ${job.status}, ${percent}%…`);
    await new Promise((resolve) => setTimeout(resolve, 500));
    const reply = await fetch(location, poll);
    if (!reply.ok) return { response: reply, location };
    job = await reply.json();
  }
  if (job.status === "succeeded") {
    return { response: await fetch(`${location}/result`, { headers, signal }), location };
  }
  const error = job.error || { code: job.status, message: `The job was ${job.status}.` };
  const failed = new Response(JSON.stringify({ error }), { status: 500, statusText: job.status });
  return { response: failed, location };
}

// -- result ----------------------------------------------------------------------------------

// The shown result in another of the server's formats, saved as a download: a searchable PDF
// (its pages with the text invisible over them) or VTT/SRT subtitles. The server writes it, so
// the file holds exactly what the API answers: a job's stored result is asked again in that
// format; otherwise the file goes to /extract again with the same options (read a second time).
const DOWNLOADS = {
  pdf: { button: els.downloadPdf, accept: "application/pdf", what: "searchable PDF" },
  vtt: { button: els.downloadVtt, accept: "text/vtt", what: "VTT subtitles" },
  srt: { button: els.downloadSrt, accept: "application/x-subrip", what: "SRT subtitles" },
};

async function download(format) {
  const file = shown.file;
  if (!file) return;
  const { button, accept, what } = DOWNLOADS[format];
  const headers = { Accept: accept };
  if (token) headers.Authorization = `Bearer ${token}`;
  const params = new URLSearchParams(shown.params || undefined);
  params.set("format", format);
  let request;
  if (shown.job && format !== "pdf") { // a job keeps its Document, not the pages to draw on
    request = fetch(`${shown.job}/result?format=${format}`, { headers });
  } else {
    const form = new FormData();
    form.append("upload", file, file.name || "upload");
    request = fetch(`/extract?${params}`, { method: "POST", body: form, headers });
  }
  button.disabled = true;
  setState("busy", `Writing the ${what} of ${file.name}…`);
  try {
    const response = await request;
    if (!response.ok) {
      let message = `${response.status} ${response.statusText}`.trim();
      try {
        message = (await response.json()).error?.message || message;
      } catch {
        // Not our JSON error: the status says it.
      }
      setState("error", `${file.name}: the server answered ${response.status}.`);
      showError(`Could not make the ${what}`, message);
      return;
    }
    const link = document.createElement("a");
    link.href = objectURL(await response.blob());
    link.download = `${baseName(file.name)}.${format}`;
    link.click();
    setState("done", `${file.name}: ${what} saved.`);
  } catch (err) {
    setState("error", "The upload did not go through.");
    showError("Could not reach the server", String(err.message || err));
  } finally {
    button.disabled = false;
  }
}

async function show(file, doc, seconds, run) {
  const image = doc.type === "BOUNDING_BOX" && doc.pages.length === 1 ? await decoded(file) : null;
  if (run !== generation) {
    if (image) URL.revokeObjectURL(image.src);
    return;
  }
  if (image) shown.urls.push(image.src);
  shown.text = textOf(doc);
  shown.json = `${JSON.stringify(doc, null, 2)}\n`;
  els.json.textContent = shown.json;
  const base = baseName(file.name);
  els.downloadJson.download = `${base}.json`;
  els.downloadJson.href = objectURL(new Blob([shown.json], { type: "application/json" }));
  els.downloadText.download = `${base}.txt`;
  els.downloadText.href = objectURL(new Blob([shown.text], { type: "text/plain;charset=utf-8" }));
  shown.file = file;
  els.downloadPdf.hidden = doc.type !== "BOUNDING_BOX"; // a searchable PDF: images and PDFs
  els.downloadVtt.hidden = doc.type !== "TIMESTAMP"; // subtitles: audio
  els.downloadSrt.hidden = doc.type !== "TIMESTAMP";

  if (doc.type === "TIMESTAMP") {
    showAudio(file, doc);
  } else {
    showPages(doc, image);
  }
  els.result.hidden = false;
  const lineCount = doc.cells.length;
  const words = doc.cells.reduce((n, cell) => n + cell.tokens.length, 0);
  const what = doc.type === "TIMESTAMP"
    ? `${lineCount} timed line${lineCount === 1 ? "" : "s"}`
    : `${lineCount} line${lineCount === 1 ? "" : "s"}, ${words} word${words === 1 ? "" : "s"}` +
      ` on ${doc.pages.length} page${doc.pages.length === 1 ? "" : "s"}`;
  setState("done", lineCount ? `${file.name}: ${what} in ${seconds} s.`
                             : `${file.name}: no text found (${seconds} s).`);
}

function percent(value, whole) {
  return `${((value / whole) * 100).toFixed(4)}%`;
}

// One word box, placed in percent of its page so it stays on its word at any displayed size.
function wordBox(label, page, cell, drawText) {
  const xs = [label.x0, label.x1, label.x2, label.x3];
  const ys = [label.y0, label.y1, label.y2, label.y3];
  const left = Math.min(...xs);
  const top = Math.min(...ys);
  const width = Math.max(...xs) - left;
  const height = Math.max(...ys) - top;
  const word = cell?.tokens[label.startTokenIndex] ?? "";
  const box = document.createElement("div");
  box.className = "word-box";
  box.dataset.line = label.startCellLine;
  box.dataset.token = label.startTokenIndex;
  box.dataset.page = label.pageIndex;
  box.title = word;
  box.style.left = percent(left, page.pageWidth);
  box.style.top = percent(top, page.pageHeight);
  box.style.width = percent(width, page.pageWidth);
  box.style.height = percent(height, page.pageHeight);
  if (drawText) {
    const text = document.createElement("span");
    text.className = "word-text";
    text.textContent = word;
    // cqw is a percent of the sheet's width, so the word scales with its page like the box.
    text.style.fontSize = `${(fittedFontSize(word, width, height) / page.pageWidth) * 100}cqw`;
    box.append(text);
  }
  return box;
}

const WORD_FONT = '"DejaVu Sans", Arial, sans-serif'; // as .word-text in style.css
let measure = null;

// The font size (in page pixels) at which ``word`` fills its box's width: an ink box's height
// says little about the font size (no descender in "draft"), its width says much more. Capped
// by the height so that a one-letter box does not get a giant letter.
function fittedFontSize(word, width, height) {
  measure ??= document.createElement("canvas").getContext("2d");
  measure.font = `100px ${WORD_FONT}`;
  const at100 = measure.measureText(word).width;
  const byWidth = at100 > 0 ? (width / at100) * 100 : height;
  return Math.max(1, Math.min(byWidth, height * 1.6));
}

function sheetFor(page, labels, cellsByLine, image) {
  const figure = document.createElement("figure");
  figure.className = "page";
  figure.dataset.page = page.pageIndex;
  const sheet = document.createElement("div");
  sheet.className = "sheet";
  sheet.style.aspectRatio = `${page.pageWidth} / ${page.pageHeight}`;
  // Small images are not blown up past their own size (nor below a readable width).
  sheet.style.maxWidth = `max(${page.pageWidth}px, 32rem)`;
  if (image) sheet.append(image);
  const layer = document.createElement("div");
  layer.className = "boxes";
  layer.setAttribute("aria-hidden", "true"); // the text panel carries the words for assistive tech
  for (const label of labels) {
    layer.append(wordBox(label, page, cellsByLine.get(label.startCellLine), !image));
  }
  sheet.append(layer);
  const caption = document.createElement("figcaption");
  const count = labels.length;
  caption.textContent = `Page ${page.pageIndex + 1} · ${page.pageWidth}×${page.pageHeight} px · ` +
    `${count} word${count === 1 ? "" : "s"}`;
  figure.append(sheet, caption);
  return figure;
}

// A one-page file is shown as itself when the browser can decode it (PNG, JPEG, GIF, WebP,
// BMP). Browsers cannot draw a PDF page without a PDF library, nor a TIFF at all: for those the
// caller gets null and draws blank page-sized sheets with each word written in its box.
async function decoded(file) {
  const image = new Image();
  image.src = URL.createObjectURL(file);
  image.alt = `${file.name}, with a box over every word read`;
  image.className = "page-image";
  try {
    await image.decode();
    return image;
  } catch {
    URL.revokeObjectURL(image.src);
    return null;
  }
}

function showPages(doc, image) {
  const cellsByLine = new Map(doc.cells.map((cell) => [cell.line, cell]));
  const labelsByPage = new Map(doc.pages.map((page) => [page.pageIndex, []]));
  const pageOfLine = new Map();
  for (const label of doc.labels) {
    if (label.type !== "BOUNDING_BOX") continue;
    labelsByPage.get(label.pageIndex)?.push(label);
    if (!pageOfLine.has(label.startCellLine)) pageOfLine.set(label.startCellLine, label.pageIndex);
  }

  // Multi-page files (PDF, TIFF) always take the blank-sheet path: see decoded().
  const figures = doc.pages.map((page) =>
    sheetFor(page, labelsByPage.get(page.pageIndex) || [], cellsByLine, page === doc.pages[0] ? image : null));
  if (!image && doc.pages.length) {
    const note = document.createElement("p");
    note.className = "note";
    note.textContent = "This browser cannot display this file's pages, so each word is drawn in " +
      "its box on a blank page of the same size.";
    els.viewer.append(note);
  }
  els.viewer.append(...figures);

  let lastPage = null;
  const multiPage = doc.pages.length > 1;
  for (const cell of doc.cells) {
    const page = pageOfLine.get(cell.line);
    if (multiPage && page !== undefined && page !== lastPage) {
      const heading = document.createElement("li");
      heading.className = "page-break";
      heading.textContent = `Page ${page + 1}`;
      els.lines.append(heading);
      lastPage = page;
    }
    const item = document.createElement("li");
    item.dataset.line = cell.line;
    cell.tokens.forEach((tokenText, index) => {
      if (index) item.append(" ");
      const span = document.createElement("span");
      span.className = "token";
      span.dataset.line = cell.line;
      span.dataset.token = index;
      span.textContent = tokenText;
      item.append(span);
    });
    els.lines.append(item);
  }
  if (!doc.cells.length) appendEmpty();
}

function appendEmpty() {
  const item = document.createElement("li");
  item.className = "empty";
  item.textContent = "No text found.";
  els.lines.append(item);
}

function showAudio(file, doc) {
  const audio = document.createElement("audio");
  audio.controls = true;
  audio.preload = "metadata";
  audio.className = "audio-player";
  audio.src = objectURL(file);
  const caption = document.createElement("p");
  caption.className = "note";
  caption.textContent = `${file.name}${doc.language ? ` · language: ${doc.language}` : ""}` +
    " · click a line to play from there.";
  els.viewer.append(audio, caption);

  const cellsByLine = new Map(doc.cells.map((cell) => [cell.line, cell]));
  const timed = doc.labels
    .filter((label) => label.type === "TIMESTAMP")
    .sort((a, b) => a.startTimestampMillis - b.startTimestampMillis);
  const buttons = [];
  for (const label of timed) {
    const cell = cellsByLine.get(label.startCellLine);
    if (!cell) continue;
    const item = document.createElement("li");
    const button = document.createElement("button");
    button.type = "button";
    button.className = "timed-line";
    button.dataset.line = cell.line;
    button.dataset.start = label.startTimestampMillis;
    button.dataset.end = label.endTimestampMillis;
    const time = document.createElement("time");
    time.textContent = `[${clock(label.startTimestampMillis)}]`;
    button.append(time, " ");
    const speaker = speakerOf(cell);
    if (speaker) {
      const who = document.createElement("span");
      who.className = "speaker";
      who.textContent = `${speaker}:`;
      button.append(who, " ");
    }
    button.append(cell.content);
    button.addEventListener("click", () => {
      audio.currentTime = label.startTimestampMillis / 1000;
      audio.play().catch(() => {
        // Autoplay rules or an undecodable format: the position is set, the user can press play.
      });
      markCurrent(buttons, audio);
    });
    item.append(button);
    els.lines.append(item);
    buttons.push(button);
  }
  if (!buttons.length) appendEmpty();
  for (const event of ["timeupdate", "seeked", "play"]) {
    audio.addEventListener(event, () => markCurrent(buttons, audio));
  }
}

// The line being heard: the last one started at or before the playback position.
function markCurrent(buttons, audio) {
  const now = audio.currentTime * 1000;
  let current = null;
  for (const button of buttons) {
    if (Number(button.dataset.start) <= now + 1) current = button;
  }
  if (current && now > Number(current.dataset.end) + 500 && current !== buttons.at(-1)) {
    current = null; // in a silence between lines
  }
  for (const button of buttons) {
    if (button === current) {
      if (button.getAttribute("aria-current") !== "true") {
        button.setAttribute("aria-current", "true");
        if (!audio.paused) button.scrollIntoView({ block: "nearest" });
      }
    } else {
      button.removeAttribute("aria-current");
    }
  }
}

// -- hover: a word's box and its text light up together --------------------------------------

function highlight(event, on) {
  const target = event.target.closest?.("[data-line][data-token]");
  if (!target) return;
  const selector = `[data-line="${target.dataset.line}"][data-token="${target.dataset.token}"]`;
  for (const el of document.querySelectorAll(selector)) el.classList.toggle("hot", on);
}

for (const area of [els.viewer, els.lines]) {
  area.addEventListener("mouseover", (event) => highlight(event, true));
  area.addEventListener("mouseout", (event) => highlight(event, false));
}

// -- copy ------------------------------------------------------------------------------------

// The async clipboard needs a secure context (https or localhost); elsewhere the old
// select-and-copy path still works in every browser.
function legacyCopy(text) {
  const area = document.createElement("textarea");
  area.value = text;
  area.setAttribute("readonly", "");
  area.style.position = "fixed";
  area.style.opacity = "0";
  document.body.append(area);
  area.select();
  let ok = false;
  try {
    ok = document.execCommand("copy");
  } catch {
    ok = false;
  }
  area.remove();
  return ok;
}

async function copy(text, what, button) {
  let ok = false;
  if (navigator.clipboard?.writeText) {
    try {
      await navigator.clipboard.writeText(text);
      ok = true;
    } catch {
      ok = false;
    }
  }
  if (!ok) ok = legacyCopy(text);
  button.focus();
  els.status.textContent = ok ? `Copied the ${what} to the clipboard.`
                              : `Could not copy the ${what}; use the download instead.`;
}

els.copyJson.addEventListener("click", () => copy(shown.json, "JSON", els.copyJson));
els.copyText.addEventListener("click", () => copy(shown.text, "text", els.copyText));
for (const [format, { button }] of Object.entries(DOWNLOADS)) {
  button.addEventListener("click", () => download(format));
}

// -- intake: chooser, drop anywhere, paste, token --------------------------------------------

function take(files) {
  const file = files?.[0];
  if (!file) return;
  extract(file);
  if (files.length > 1) {
    els.status.textContent += ` (only the first of ${files.length} files is read)`;
  }
}

els.input.addEventListener("change", () => {
  const files = [...els.input.files];
  els.input.value = ""; // choosing the same file again must still send it
  take(files);
});

// The whole window takes drops: a file dropped next to the zone must not make the browser
// navigate away to show it.
let dragDepth = 0;
window.addEventListener("dragenter", (event) => {
  if (!event.dataTransfer?.types.includes("Files")) return;
  dragDepth += 1;
  els.zone.classList.add("dragging");
});
window.addEventListener("dragleave", () => {
  dragDepth = Math.max(0, dragDepth - 1);
  if (!dragDepth) els.zone.classList.remove("dragging");
});
window.addEventListener("dragover", (event) => {
  if (!event.dataTransfer?.types.includes("Files")) return;
  event.preventDefault();
  event.dataTransfer.dropEffect = "copy";
});
window.addEventListener("drop", (event) => {
  if (!event.dataTransfer?.files.length) return;
  event.preventDefault();
  dragDepth = 0;
  els.zone.classList.remove("dragging");
  take([...event.dataTransfer.files]);
});

window.addEventListener("paste", (event) => {
  const files = [...(event.clipboardData?.files || [])];
  if (files.length && !event.target.closest?.("input, textarea")) {
    event.preventDefault();
    take(files);
  }
});

els.auth.addEventListener("submit", (event) => {
  event.preventDefault();
  token = els.token.value.trim() || null;
  if (pendingFile && token) extract(pendingFile);
});

loadOcrOptions();
