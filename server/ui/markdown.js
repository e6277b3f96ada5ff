// A small Markdown renderer for model output, which is untrusted: it builds
// DOM nodes and puts every piece of text in a text node, so HTML in a reply
// is shown as text. It knows fenced code blocks (with a copy button),
// headings, lists, quotes, rules, paragraphs, inline code, bold, italic and
// http(s) links. A fence still open (a reply still streaming) is a code
// block up to the end.

const FENCE = /^\s*(`{3,}|~{3,})\s*([\w+#.-]*)\s*$/;
const RULE = /^\s*([-*_])(\s*\1){2,}\s*$/;
const HEADING = /^(#{1,6})\s+(.*?)\s*#*\s*$/;
const ITEM = /^\s*([-*+]|(\d{1,9})[.)])\s+/;
const QUOTE = /^\s*>\s?/;

/** Replaces the children of `target` with `source` rendered. */
export function renderMarkdown(source, target) {
  target.replaceChildren(...blocks(source.replace(/\r\n?/g, '\n')));
}

function el(tag, className) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  return node;
}

function blocks(source) {
  const lines = source.split('\n');
  const out = [];
  let paragraph = [];
  const flush = () => {
    if (paragraph.length) out.push(para(paragraph));
    paragraph = [];
  };
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    const fence = FENCE.exec(line);
    if (fence) {
      flush();
      const code = [];
      i += 1;
      while (i < lines.length && !lines[i].trim().startsWith(fence[1])) {
        code.push(lines[i]);
        i += 1;
      }
      i += 1;
      out.push(codeBlock(code.join('\n'), fence[2]));
    } else if (RULE.test(line)) {
      flush();
      out.push(el('hr'));
      i += 1;
    } else if (HEADING.test(line)) {
      flush();
      const [, marks, text] = HEADING.exec(line);
      const heading = el(`h${Math.min(6, marks.length + 2)}`);
      inline(text, heading);
      out.push(heading);
      i += 1;
    } else if (ITEM.test(line)) {
      flush();
      const ordered = ITEM.exec(line)[2] !== undefined;
      const list = el(ordered ? 'ol' : 'ul');
      if (ordered) list.start = Number(ITEM.exec(line)[2]);
      while (i < lines.length && ITEM.test(lines[i])
             && (ITEM.exec(lines[i])[2] !== undefined) === ordered) {
        const item = el('li');
        inline(lines[i].replace(ITEM, ''), item);
        list.append(item);
        i += 1;
      }
      out.push(list);
    } else if (QUOTE.test(line)) {
      flush();
      const quoted = [];
      while (i < lines.length && QUOTE.test(lines[i])) {
        quoted.push(lines[i].replace(QUOTE, ''));
        i += 1;
      }
      const quote = el('blockquote');
      quote.append(...blocks(quoted.join('\n')));
      out.push(quote);
    } else if (line.trim() === '') {
      flush();
      i += 1;
    } else {
      paragraph.push(line);
      i += 1;
    }
  }
  flush();
  return out;
}

function para(lines) {
  const p = el('p');
  lines.forEach((line, n) => {
    if (n > 0) p.append(el('br'));
    inline(line, p);
  });
  return p;
}

// Inline code first (its content is literal), then links, bold, italic.
const INLINE = /(`+)([^`]|[^`][\s\S]*?[^`])\1(?!`)|\[([^\]\n]+)\]\((https?:\/\/[^\s)]+)\)|\*\*(?=\S)([\s\S]*?\S)\*\*|__(?=\S)([\s\S]*?\S)__|\*(?=[^\s*])([^*]*?[^\s*]|[^\s*])\*/g;

function inline(text, parent) {
  let at = 0;
  for (const match of text.matchAll(INLINE)) {
    if (match.index > at) parent.append(text.slice(at, match.index));
    const [, , code, label, href, bold, bold2, italic] = match;
    if (code !== undefined) {
      const node = el('code');
      node.textContent = code;
      parent.append(node);
    } else if (href !== undefined) {
      const link = el('a');
      link.href = href;
      link.rel = 'noopener noreferrer nofollow';
      link.target = '_blank';
      inline(label, link);
      parent.append(link);
    } else if (bold !== undefined || bold2 !== undefined) {
      const strong = el('strong');
      inline(bold ?? bold2, strong);
      parent.append(strong);
    } else {
      const em = el('em');
      inline(italic, em);
      parent.append(em);
    }
    at = match.index + match[0].length;
  }
  if (at < text.length) parent.append(text.slice(at));
}

function codeBlock(code, language) {
  const block = el('div', 'code');
  const bar = el('div', 'code-bar');
  const name = el('span');
  name.textContent = language || 'code';
  const copy = el('button', 'copy quiet');
  copy.type = 'button';
  copy.textContent = 'Copy';
  copy.setAttribute('aria-label', `Copy ${language || ''} code`.replace('  ', ' '));
  copy.addEventListener('click', async () => {
    copy.textContent = (await copyText(code)) ? 'Copied' : 'Copy failed';
    setTimeout(() => { copy.textContent = 'Copy'; }, 2000);
  });
  bar.append(name, copy);
  const pre = el('pre');
  const body = el('code');
  body.textContent = code;
  pre.append(body);
  block.append(bar, pre);
  return block;
}

/** Puts `text` on the clipboard; the older way where the Clipboard API is
 * missing (pages not served over HTTPS or from localhost). */
async function copyText(text) {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    const area = el('textarea', 'offscreen');
    area.value = text;
    area.setAttribute('readonly', '');
    document.body.append(area);
    area.select();
    let done = false;
    try {
      done = document.execCommand('copy');
    } catch {
      done = false;
    }
    area.remove();
    return done;
  }
}
