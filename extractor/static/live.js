// Live transcription on the page behind GET /: the microphone streamed to
// WS /v1/realtime?intent=transcription (OpenAI's Realtime transcription protocol) as PCM16 at
// 24 kHz, the words shown as their deltas arrive. Plain browser JavaScript, nothing fetched
// from elsewhere; the access token, when the server needs one, goes in the subprotocol
// "openai-insecure-api-key.<token>", as browser code written for OpenAI sends it.

const RATE = 24000;
const live = {
  button: document.getElementById("live"),
  output: document.getElementById("live-text"),
  status: document.getElementById("status"),
  token: document.getElementById("token"),
  auth: document.getElementById("auth"),
};
let session = null; // { socket, context, stream, node } while listening

function base64(int16) {
  const bytes = new Uint8Array(int16.buffer);
  let text = "";
  for (let i = 0; i < bytes.length; i += 0x8000) {
    text += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  }
  return btoa(text);
}

function pcm16(floats) {
  const out = new Int16Array(floats.length);
  for (let i = 0; i < floats.length; i += 1) {
    const s = Math.max(-1, Math.min(1, floats[i]));
    out[i] = s < 0 ? s * 0x8000 : s * 0x7fff;
  }
  return out;
}

// One paragraph per turn: its words appended as deltas come, then (greyed) the words the
// server hears after them but has not confirmed yet (this server's extension event, which
// each delta voids and the next replaces), marked done when completed.
function lineOf(itemId) {
  return live.output.querySelector(`[data-item="${CSS.escape(itemId)}"]`);
}

function turn(itemId) {
  let line = lineOf(itemId);
  if (!line) {
    line = document.createElement("p");
    line.dataset.item = itemId;
    line.className = "live-turn";
    const tentative = document.createElement("span");
    tentative.className = "tentative";
    line.append(document.createElement("span"), tentative);
    live.output.append(line);
  }
  return line;
}

function onEvent(event) {
  if (event.type === "conversation.item.input_audio_transcription.delta") {
    const line = turn(event.item_id);
    line.firstChild.textContent += event.delta;
    line.lastChild.textContent = "";
  } else if (event.type === "x_conversation.item.input_audio_transcription.tentative") {
    turn(event.item_id).lastChild.textContent = event.text;
  } else if (event.type === "conversation.item.input_audio_transcription.completed") {
    const line = turn(event.item_id);
    line.textContent = event.transcript;
    line.classList.add("done");
    if (!event.transcript) line.remove();
  } else if (event.type === "conversation.item.input_audio_transcription.failed") {
    lineOf(event.item_id)?.querySelector(".tentative")?.remove();
  } else if (event.type === "input_audio_buffer.speech_started") {
    live.status.textContent = "Listening: speech…";
  } else if (event.type === "input_audio_buffer.speech_stopped") {
    live.status.textContent = "Listening.";
  } else if (event.type === "error") {
    live.status.textContent = `Live transcription: ${event.error.message}`;
  }
}

async function start() {
  const url = new URL("/v1/realtime?intent=transcription", window.location.href);
  url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
  const token = live.token.value.trim();
  const protocols = ["realtime", ...(token ? [`openai-insecure-api-key.${token}`] : [])];
  let stream;
  try {
    stream = await navigator.mediaDevices.getUserMedia({ audio: { channelCount: 1 } });
  } catch (error) {
    live.status.textContent = `No microphone: ${error.message}`;
    return;
  }
  const socket = new WebSocket(url, protocols);
  const context = new AudioContext({ sampleRate: RATE });
  const source = context.createMediaStreamSource(stream);
  // ScriptProcessorNode: 1024 samples (43 ms) per callback, no extra module to load.
  const node = context.createScriptProcessor(1024, 1, 1);
  node.onaudioprocess = (event) => {
    if (socket.readyState !== WebSocket.OPEN) return;
    const audio = base64(pcm16(event.inputBuffer.getChannelData(0)));
    socket.send(JSON.stringify({ type: "input_audio_buffer.append", audio }));
  };
  socket.addEventListener("open", () => {
    source.connect(node);
    node.connect(context.destination);
    live.status.textContent = "Listening.";
  });
  socket.addEventListener("message", (message) => onEvent(JSON.parse(message.data)));
  socket.addEventListener("close", (event) => {
    if (session?.socket === socket) stop();
    if (event.code === 1006 && !token) {
      live.status.textContent = "The live connection was refused: this server may need an access token.";
      live.auth.hidden = false;
    } else if (event.code !== 1000 && event.code !== 1005) {
      live.status.textContent = `Live transcription ended (${event.code} ${event.reason}).`;
    }
  });
  session = { socket, context, stream, node };
  live.button.textContent = "Stop live transcription";
  live.button.setAttribute("aria-pressed", "true");
}

function stop() {
  if (!session) return;
  const { socket, context, stream, node } = session;
  session = null;
  node.disconnect();
  stream.getTracks().forEach((track) => track.stop());
  context.close();
  if (socket.readyState === WebSocket.OPEN) {
    socket.send(JSON.stringify({ type: "input_audio_buffer.commit" }));
    setTimeout(() => socket.close(1000), 3000); // the last turn's words first
  }
  live.button.textContent = "Live transcription (microphone)";
  live.button.setAttribute("aria-pressed", "false");
  live.status.textContent = "Stopped listening.";
}

live.button.addEventListener("click", () => (session ? stop() : start()));
