// The chat page of rkllm-server. It speaks the server's OpenAI API
// (/v1/models, streaming /v1/chat/completions) and reads /ready and
// /metrics for the status line. Nothing is fetched from anywhere else.
import { renderMarkdown } from './markdown.js';

const $ = (id) => document.getElementById(id);
const ui = {
  model: $('model'),
  status: $('status'),
  messages: $('messages'),
  empty: $('empty'),
  composer: $('composer'),
  prompt: $('prompt'),
  send: $('send'),
  stop: $('stop'),
  attach: $('attach'),
  image: $('image'),
  attachment: $('attachment'),
  attachmentPreview: $('attachment-preview'),
  attachmentName: $('attachment-name'),
  system: $('system'),
  temperature: $('temperature'),
  temperatureValue: $('temperature-value'),
  maxTokens: $('max-tokens'),
  think: $('think'),
  thinkField: $('think-field'),
  settings: $('settings'),
  settingsToggle: $('settings-toggle'),
  keyDialog: $('key-dialog'),
  keyForm: $('key-form'),
  key: $('key'),
  keyError: $('key-error'),
};

// The API key lives in this tab's session storage only.
const KEY_ITEM = 'rkllm-server.api-key';
const MAX_IMAGE_BYTES = 10 * 1024 * 1024;
const REFRESH_MS = 5000;

const state = {
  key: sessionStorage.getItem(KEY_ITEM) ?? '',
  keyPrompt: null,
  models: new Map(),
  history: [],
  image: null,
  controller: null,
};

// ---- requests ------------------------------------------------------------

function withKey(headers = {}) {
  return state.key ? { ...headers, Authorization: `Bearer ${state.key}` } : headers;
}

/** fetch() with the API key; on 401 asks for a key and tries again. */
async function request(path, init = {}) {
  for (;;) {
    const response = await fetch(path, { ...init, headers: withKey(init.headers) });
    if (response.status !== 401) return response;
    await askForKey(state.key !== '');
  }
}

/** Shows the key dialog once, however many requests are waiting for it. */
function askForKey(refused) {
  if (!state.keyPrompt) {
    state.keyPrompt = new Promise((resolve) => {
      ui.keyError.textContent = refused ? 'The server refused that key.' : '';
      ui.key.value = '';
      const submit = (event) => {
        event.preventDefault();
        const key = ui.key.value.trim();
        if (!key) {
          ui.keyError.textContent = 'Enter the key.';
          return;
        }
        state.key = key;
        sessionStorage.setItem(KEY_ITEM, key);
        ui.keyForm.removeEventListener('submit', submit);
        ui.keyDialog.close();
        state.keyPrompt = null;
        resolve();
      };
      ui.keyForm.addEventListener('submit', submit);
      if (!ui.keyDialog.open) ui.keyDialog.showModal();
      ui.key.focus();
    });
  }
  return state.keyPrompt;
}
ui.keyDialog.addEventListener('cancel', (event) => event.preventDefault());

/** The message of an error response (OpenAI's shape, else the status). */
async function errorText(response) {
  try {
    const body = await response.json();
    return body.error?.message ?? body.error ?? `HTTP ${response.status}`;
  } catch {
    return `HTTP ${response.status}`;
  }
}

/** The `data:` payloads of a server-sent event stream. */
async function* sseData(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      let end;
      while ((end = buffer.search(/\r?\n\r?\n/)) >= 0) {
        const event = buffer.slice(0, end);
        buffer = buffer.slice(end).replace(/^\r?\n\r?\n/, '');
        const data = event.split(/\r?\n/)
          .filter((line) => line.startsWith('data:'))
          .map((line) => line.slice(5).replace(/^ /, ''))
          .join('\n');
        if (data) yield data;
      }
    }
  } finally {
    reader.cancel().catch(() => {});
  }
}

// ---- models and status ---------------------------------------------------

function modelLabel(model) {
  const parts = [model.id];
  if (model.state) parts.push(model.state);
  if (model.capabilities?.includes('vision')) parts.push('vision');
  if (model.capabilities?.includes('thinking')) parts.push('thinking');
  if (!model.capabilities?.includes('completion')) parts.push('embeddings only');
  return parts.join(' · ');
}

/** Whether a model thinks (it gets the thinking switch). */
function thinks(model) {
  return state.models.get(model)?.capabilities?.includes('thinking') ?? false;
}

async function loadModels() {
  const response = await request('/v1/models');
  if (!response.ok) throw new Error(await errorText(response));
  const { data } = await response.json();
  state.models = new Map(data.map((m) => [m.id, m]));
  const same = data.length === ui.model.options.length
    && data.every((m, i) => ui.model.options[i].value === m.id);
  if (!same) {
    const chosen = ui.model.value;
    ui.model.replaceChildren(...data.map((m) => new Option(m.id, m.id)));
    const usable = data.find((m) => m.id === chosen && m.capabilities?.includes('completion'))
      ?? data.find((m) => m.capabilities?.includes('completion'));
    ui.model.value = usable?.id ?? '';
  }
  data.forEach((m, i) => {
    const option = ui.model.options[i];
    option.textContent = modelLabel(m);
    option.disabled = !m.capabilities?.includes('completion');
  });
  ui.model.disabled = data.length === 0;
  if (data.length === 0) ui.model.replaceChildren(new Option('no models', ''));
  modelChanged();
}

function modelChanged() {
  const vision = state.models.get(ui.model.value)?.capabilities?.includes('vision') ?? false;
  ui.attach.hidden = !vision;
  if (!vision) clearImage();
  ui.thinkField.hidden = !thinks(ui.model.value);
}

/** The series called `name` in a Prometheus text: labels and value. */
function series(text, name) {
  const found = [];
  for (const line of text.split('\n')) {
    const match = /^(\w+)(?:\{([^}]*)\})? (\S+)/.exec(line);
    if (!match || match[1] !== name) continue;
    const labels = Object.fromEntries(
      [...(match[2] ?? '').matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1], m[2]]),
    );
    found.push({ labels, value: Number(match[3]) });
  }
  return found;
}

const total = (list) => list.reduce((sum, s) => sum + s.value, 0);

async function refreshStatus() {
  let readiness;
  try {
    const response = await fetch('/ready');
    const body = await response.json();
    readiness = body.ready ? 'ready' : `not ready: ${body.reason}`;
    ui.status.dataset.state = body.ready ? 'ready' : 'busy';
  } catch {
    ui.status.textContent = 'server unreachable';
    ui.status.dataset.state = 'down';
    return;
  }
  const response = await request('/metrics');
  const parts = [readiness];
  if (response.ok) {
    const text = await response.text();
    const loaded = series(text, 'rkllm_model_state')
      .filter((s) => s.labels.state === 'loaded' && s.value > 0)
      .map((s) => s.labels.model);
    parts.push(`queue ${total(series(text, 'rkllm_queued_requests'))}`);
    parts.push(`streams ${total(series(text, 'rkllm_active_streams'))}`);
    parts.push(`loaded: ${loaded.length ? loaded.join(', ') : 'none'}`);
  }
  ui.status.textContent = parts.join(' · ');
}

async function refresh() {
  try {
    await loadModels();
    await refreshStatus();
  } catch (error) {
    ui.status.textContent = `error: ${error.message}`;
    ui.status.dataset.state = 'down';
  }
}

// ---- the conversation ----------------------------------------------------

function scrollToEnd(force) {
  const box = document.scrollingElement;
  if (force || box.scrollHeight - box.scrollTop - box.clientHeight < 120) {
    box.scrollTop = box.scrollHeight;
  }
}

function addMessage(role) {
  ui.empty.hidden = true;
  const item = document.createElement('li');
  item.className = `message ${role}`;
  const who = document.createElement('p');
  who.className = 'who';
  who.textContent = role === 'user' ? 'You' : 'Model';
  const body = document.createElement('div');
  body.className = 'body md';
  const meta = document.createElement('p');
  meta.className = 'meta';
  item.append(who, body, meta);
  ui.messages.append(item);
  scrollToEnd(true);
  return { item, who, body, meta };
}

function showUser(turn) {
  const view = addMessage('user');
  if (turn.image) {
    const picture = document.createElement('img');
    picture.src = turn.image;
    picture.alt = 'Attached image';
    view.body.append(picture);
  }
  const text = document.createElement('div');
  text.className = 'plain';
  text.textContent = turn.content;
  view.body.append(text);
  return view;
}

/** The messages as the API takes them: system prompt, then the chat. */
function apiMessages() {
  const messages = [];
  const system = ui.system.value.trim();
  if (system) messages.push({ role: 'system', content: system });
  for (const turn of state.history) {
    if (turn.image) {
      messages.push({
        role: turn.role,
        content: [
          { type: 'text', text: turn.content },
          { type: 'image_url', image_url: { url: turn.image } },
        ],
      });
    } else {
      messages.push({ role: turn.role, content: turn.content });
    }
  }
  return messages;
}

function setBusy(busy) {
  ui.send.hidden = busy;
  ui.stop.hidden = !busy;
  ui.send.disabled = busy;
  // Focus stays in the message box: the next message can be written while
  // this one streams (Enter waits until it has ended).
  if (!busy && document.activeElement === ui.stop) ui.prompt.focus();
}

/** The line under a reply: model, tokens (thinking included), rate, first
 * token, and how it ended. */
function formatMeta(model, reply) {
  const { started, first, ended, usage, finish } = reply;
  const tokens = usage?.completion_tokens ?? reply.pieces;
  const parts = [model];
  let count = `${usage ? '' : '~'}${tokens} token${tokens === 1 ? '' : 's'}`;
  const thought = usage?.completion_tokens_details?.reasoning_tokens;
  if (reply.thinking.trim() && thought) count += ` (${thought} thinking)`;
  parts.push(count);
  if (first && tokens > 0) {
    const seconds = (ended - first) / 1000;
    // The decode rate: the tokens after the first over the time after it.
    if (tokens > 1 && seconds > 0) parts.push(`${((tokens - 1) / seconds).toFixed(1)} tokens/s`);
    parts.push(`first token ${Math.round(first - started)} ms`);
  }
  if (finish === 'stopped') parts.push('stopped');
  if (finish === 'length') parts.push('cut at max tokens');
  return parts.join(' · ');
}

/** The request for the chat so far. The thinking switch is sent only to
 * models that think. */
function payload(model, maxTokens) {
  const body = {
    model,
    messages: apiMessages(),
    stream: true,
    stream_options: { include_usage: true },
    temperature: Number(ui.temperature.value),
    max_tokens: maxTokens,
  };
  if (thinks(model)) body.reasoning_effort = ui.think.checked ? 'medium' : 'none';
  return body;
}

/** The folded "Thinking" section above a reply's answer, made when the
 * first thinking arrives (empty thinking shows none). Open while the model
 * thinks; folded once the answer starts. */
function thinkingSection(view) {
  const section = document.createElement('details');
  section.className = 'thinking';
  section.open = true;
  section.dataset.live = '';
  const summary = document.createElement('summary');
  summary.textContent = 'Thinking';
  const text = document.createElement('div');
  text.className = 'text md';
  section.append(summary, text);
  view.body.before(section);
  return { section, summary, text, drawn: 0 };
}

/** Draws a reply into `view` as it grows: thinking into its section, the
 * answer into the body. `done` ends the thinking's live state. */
function painter(view) {
  let thinking = null;
  return (reply, done = false) => {
    if (!thinking && reply.thinking.trim()) thinking = thinkingSection(view);
    if (thinking) {
      // Thinking is drawn again only when it grew (not for each piece of
      // the answer below it).
      if (thinking.drawn !== reply.thinking.length) {
        renderMarkdown(reply.thinking, thinking.text);
        thinking.drawn = reply.thinking.length;
      }
      const live = thinking.section.dataset.live !== undefined;
      if (live && reply.content) {
        thinking.section.open = false;
        const seconds = (reply.answered - reply.first) / 1000;
        thinking.summary.textContent = `Thought for ${seconds.toFixed(1)} s`;
      }
      if (live && (reply.content || done)) delete thinking.section.dataset.live;
    }
    renderMarkdown(reply.content, view.body);
    scrollToEnd(false);
  };
}

/** Streams one reply into `view`; resolves with what came back once the
 * stream ends (or was stopped, or failed). */
async function streamReply(body, view, signal) {
  const reply = {
    started: performance.now(),
    first: 0,
    answered: 0,
    ended: 0,
    thinking: '',
    content: '',
    pieces: 0,
    usage: null,
    finish: null,
    failure: null,
  };
  const paint = painter(view);
  let pending = null;
  const draw = () => {
    pending = null;
    paint(reply);
  };
  try {
    const response = await request('/v1/chat/completions', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify(body),
      signal,
    });
    if (!response.ok) throw new Error(await errorText(response));
    for await (const data of sseData(response.body)) {
      if (data === '[DONE]') break;
      const chunk = JSON.parse(data);
      if (chunk.error) {
        reply.failure = chunk.error.message;
        break;
      }
      const choice = chunk.choices?.[0];
      const thought = choice?.delta?.reasoning_content;
      const said = choice?.delta?.content;
      if (thought || said) {
        const now = performance.now();
        if (!reply.first) reply.first = now;
        if (said && !reply.answered) reply.answered = now;
        reply.thinking += thought ?? '';
        reply.content += said ?? '';
        reply.pieces += 1;
        pending ??= setTimeout(draw, 30);
      }
      if (choice?.finish_reason) reply.finish = choice.finish_reason;
      if (chunk.usage) reply.usage = chunk.usage;
    }
  } catch (error) {
    if (error.name === 'AbortError') reply.finish = 'stopped';
    else reply.failure = error.message;
  }
  reply.ended = performance.now();
  clearTimeout(pending);
  paint(reply, true);
  return reply;
}

/** Ends a turn: the meta line, any error, and the chat's history: the
 * answer, without its thinking; a question that got no answer is left out
 * of the chat. A turn that New chat cut short is no longer in the chat and
 * leaves the new one alone. */
function finishTurn(model, turn, userView, view, reply) {
  view.meta.textContent = formatMeta(model, reply);
  if (reply.failure) {
    const problem = document.createElement('p');
    problem.className = 'error';
    problem.setAttribute('role', 'alert');
    problem.textContent = reply.failure;
    view.body.append(problem);
  }
  view.item.dataset.finish = reply.failure ? 'error' : (reply.finish ?? 'stop');
  if (state.history.at(-1) !== turn) return;
  if (reply.content) {
    state.history.push({ role: 'assistant', content: reply.content });
  } else {
    state.history.pop();
    userView.meta.textContent = 'not answered';
  }
}

async function send() {
  const text = ui.prompt.value.trim();
  if (state.controller || (!text && !state.image)) return;
  const model = ui.model.value;
  if (!model) {
    ui.status.textContent = 'pick a model first';
    return;
  }
  const maxTokens = Number(ui.maxTokens.value);
  if (!Number.isInteger(maxTokens) || maxTokens < 1) {
    ui.maxTokens.setCustomValidity('a whole number, at least 1');
    ui.maxTokens.reportValidity();
    return;
  }
  const turn = { role: 'user', content: text, image: state.image?.url ?? null };
  state.history.push(turn);
  const userView = showUser(turn);
  ui.prompt.value = '';
  clearImage();

  const view = addMessage('assistant');
  view.item.setAttribute('aria-busy', 'true');
  state.controller = new AbortController();
  setBusy(true);
  const reply = await streamReply(payload(model, maxTokens), view, state.controller.signal);
  state.controller = null;
  view.item.removeAttribute('aria-busy');
  setBusy(false);
  finishTurn(model, turn, userView, view, reply);
  refreshStatus().catch(() => {});
}

function stop() {
  state.controller?.abort();
}

function newChat() {
  stop();
  state.history = [];
  ui.messages.replaceChildren();
  ui.empty.hidden = false;
  ui.prompt.focus();
}

// ---- images ----------------------------------------------------------------

function clearImage() {
  state.image = null;
  ui.image.value = '';
  ui.attachment.hidden = true;
  ui.attachmentPreview.removeAttribute('src');
}

function imageChosen() {
  const file = ui.image.files[0];
  if (!file) return;
  if (!['image/png', 'image/jpeg', 'image/webp'].includes(file.type)) {
    ui.status.textContent = 'attach a PNG, JPEG or WebP picture';
    clearImage();
    return;
  }
  if (file.size > MAX_IMAGE_BYTES) {
    ui.status.textContent = 'that picture is larger than 10 MiB';
    clearImage();
    return;
  }
  const reader = new FileReader();
  reader.addEventListener('load', () => {
    state.image = { url: reader.result, name: file.name };
    ui.attachmentPreview.src = reader.result;
    ui.attachmentName.textContent = file.name;
    ui.attachment.hidden = false;
  });
  reader.readAsDataURL(file);
}

// ---- wiring ----------------------------------------------------------------

ui.composer.addEventListener('submit', (event) => {
  event.preventDefault();
  send();
});
ui.prompt.addEventListener('keydown', (event) => {
  if (event.key === 'Enter' && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    send();
  }
});
ui.stop.addEventListener('click', stop);
$('new-chat').addEventListener('click', newChat);
ui.model.addEventListener('change', modelChanged);
ui.attach.addEventListener('click', () => ui.image.click());
ui.image.addEventListener('change', imageChosen);
$('attachment-remove').addEventListener('click', clearImage);
ui.maxTokens.addEventListener('input', () => ui.maxTokens.setCustomValidity(''));
ui.temperature.addEventListener('input', () => {
  ui.temperatureValue.textContent = Number(ui.temperature.value).toFixed(2);
});
ui.temperatureValue.textContent = Number(ui.temperature.value).toFixed(2);
ui.settingsToggle.addEventListener('click', () => {
  const open = ui.settings.classList.toggle('open');
  ui.settingsToggle.setAttribute('aria-expanded', String(open));
});

refresh();
setInterval(() => {
  if (!document.hidden && !state.keyPrompt) refresh();
}, REFRESH_MS);
ui.prompt.focus();
