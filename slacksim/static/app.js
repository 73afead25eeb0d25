// Countersign playground: renders the simulated Slack channel and sends
// what a person does to the simulator. Everything shown comes from the
// simulator's event stream; everything the bot says is rendered through
// text nodes, never as HTML.
'use strict';

(() => {
  const $ = (id) => document.getElementById(id);

  const state = {
    workspace: null,
    messages: [], // in the order they were posted
    byTS: new Map(),
    views: {}, // by user: the modal stack, top last
    homes: {}, // by user: the Home tab the bot published
    pane: 'channel', // what the main area shows: 'channel' or 'home'
    user: null, // who is acting
    thread: null, // ts of the open thread's root
    connected: false,
  };

  // ---- small DOM helpers ----

  function el(tag, className, text) {
    const e = document.createElement(tag);
    if (className) e.className = className;
    if (text !== undefined && text !== null) e.textContent = text;
    return e;
  }

  function toast(text) {
    const t = $('toast');
    t.textContent = text;
    t.hidden = false;
    clearTimeout(toast.timer);
    toast.timer = setTimeout(() => { t.hidden = true; }, 6000);
  }

  // The token the server put in the page; every request to /ui/ and
  // /events carries it.
  const pageToken = (document.querySelector('meta[name="playground-token"]') || {}).content || '';

  async function post(path, body) {
    try {
      const res = await fetch(path, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', 'X-Playground-Token': pageToken },
        body: JSON.stringify(body),
      });
      const data = await res.json().catch(() => ({ ok: false, error: 'HTTP ' + res.status }));
      if (res.status === 403) showStale();
      if (!data.ok) toast(data.error || 'HTTP ' + res.status);
      return data;
    } catch (err) {
      toast('The playground is not reachable: ' + err.message);
      return { ok: false };
    }
  }

  // ---- people ----

  const colors = ['#1264a3', '#e8912d', '#2bac76', '#9c27b0', '#e01e5a'];

  function person(id) {
    const ws = state.workspace;
    if (ws) {
      if (id === ws.bot.id) return { name: ws.bot.name, color: '#4a154b', bot: true };
      const i = ws.users.findIndex((u) => u.id === id);
      if (i >= 0) return { name: ws.users[i].name, color: colors[i % colors.length] };
    }
    if (id === 'USLACKBOT') return { name: 'Slackbot', color: '#36c5f0', bot: true };
    return { name: id, color: '#868686' };
  }

  // ---- mrkdwn ----

  function unescapeSlack(s) {
    return s.replace(/&lt;/g, '<').replace(/&gt;/g, '>').replace(/&amp;/g, '&');
  }

  // One inline token: `code`, <markup>, *bold*, _italic_, ~strike~, or a
  // bare URL. Bold, italic and strike need a non-word character (or the
  // line's edge) outside their markers and no space just inside them.
  const INLINE = new RegExp([
    '(`[^`\\n]+`)',
    '(<[^<>\\n]+>)',
    '(?<![\\p{L}\\p{N}*])\\*(?=\\S)([^*\\n]+?)(?<=\\S)\\*(?![\\p{L}\\p{N}*])',
    '(?<![\\p{L}\\p{N}_])_(?=\\S)([^_\\n]+?)(?<=\\S)_(?![\\p{L}\\p{N}_])',
    '(?<![\\p{L}\\p{N}~])~(?=\\S)([^~\\n]+?)(?<=\\S)~(?![\\p{L}\\p{N}~])',
    '(https?:\\/\\/[^\\s<>"\'`]*[^\\s<>"\'`.,;:!?)\\]}])',
  ].join('|'), 'gu');

  // mrkdwn renders Slack's mrkdwn into a div. autolink: bare URLs become
  // links (Slack does this unless a text object is verbatim).
  function mrkdwn(text, autolink) {
    const root = el('div', 'text');
    const parts = String(text).split('```');
    if (parts.length % 2 === 0) { // an unmatched fence is text
      const last = parts.pop();
      parts[parts.length - 1] += '```' + last;
    }
    parts.forEach((part, i) => {
      if (i % 2 === 1) {
        root.append(el('pre', null, unescapeSlack(part.replace(/^\n/, '').replace(/\n$/, ''))));
        return;
      }
      let t = part;
      if (i > 0) t = t.replace(/^\n/, '');
      if (i < parts.length - 1) t = t.replace(/\n$/, '');
      if (t !== '') lines(t, root, autolink);
    });
    return root;
  }

  // lines renders paragraphs, with runs of "> " lines as quotes.
  function lines(text, parent, autolink) {
    let quote = null;
    let para = null;
    for (const line of text.split('\n')) {
      const q = /^(?:>|&gt;) ?(.*)$/.exec(line);
      if (q) {
        if (quote) quote.append(el('br'));
        else { quote = el('blockquote'); parent.append(quote); para = null; }
        inline(q[1], quote, autolink);
        continue;
      }
      quote = null;
      if (para) para.append(el('br'));
      else { para = el('p'); parent.append(para); }
      inline(line, para, autolink);
    }
  }

  function inline(s, parent, autolink) {
    let last = 0;
    for (const m of s.matchAll(new RegExp(INLINE.source, 'gu'))) {
      if (m.index > last) parent.append(unescapeSlack(s.slice(last, m.index)));
      last = m.index + m[0].length;
      if (m[1]) {
        parent.append(el('code', null, unescapeSlack(m[1].slice(1, -1))));
      } else if (m[2]) {
        parent.append(markup(m[2].slice(1, -1)));
      } else if (m[3] !== undefined || m[4] !== undefined || m[5] !== undefined) {
        const tag = m[3] !== undefined ? 'b' : m[4] !== undefined ? 'i' : 's';
        const e = el(tag);
        inline(m[3] ?? m[4] ?? m[5], e, autolink);
        parent.append(e);
      } else if (m[6]) {
        parent.append(autolink ? link(unescapeSlack(m[6]), unescapeSlack(m[6])) : unescapeSlack(m[6]));
      }
    }
    if (last < s.length) parent.append(unescapeSlack(s.slice(last)));
  }

  // A link to a message of the channel (as the Home tab links threads)
  // opens its thread here.
  const ARCHIVES = /\/archives\/([A-Z0-9]+)\/p(\d{10})(\d{6})$/;

  function link(href, label) {
    const a = el('a', null, label);
    a.href = href;
    const m = ARCHIVES.exec(href);
    if (m && state.workspace && m[1] === state.workspace.channel_id) {
      a.addEventListener('click', (ev) => {
        ev.preventDefault();
        state.pane = 'channel';
        openThread(m[2] + '.' + m[3]);
        render();
      });
      return a;
    }
    a.target = '_blank';
    a.rel = 'noopener noreferrer';
    return a;
  }

  // markup renders what is between < and >: mentions, channels, dates,
  // special mentions and links. Anything else is shown as it is.
  function markup(inner) {
    const bar = inner.indexOf('|');
    const target = bar >= 0 ? inner.slice(0, bar) : inner;
    const label = bar >= 0 ? unescapeSlack(inner.slice(bar + 1)) : '';
    if (target.startsWith('@')) {
      const id = target.slice(1);
      const span = el('span', 'mention' + (id === state.user ? ' self' : ''), '@' + (label || person(id).name));
      span.title = id;
      return span;
    }
    if (target.startsWith('#')) {
      const id = target.slice(1);
      const name = label || (state.workspace && id === state.workspace.channel_id ? state.workspace.channel_name : id);
      return el('span', 'mention', '#' + name);
    }
    if (target.startsWith('!date^')) {
      const seconds = Number(target.split('^')[1]);
      const span = el('span', 'date', label || new Date(seconds * 1000).toUTCString());
      if (Number.isFinite(seconds)) span.title = new Date(seconds * 1000).toLocaleString();
      return span;
    }
    if (['!here', '!channel', '!everyone'].includes(target)) return el('span', 'mention', '@' + target.slice(1));
    if (target.startsWith('!subteam^')) return el('span', 'mention', label || '@group');
    if (/^(https?:|mailto:)/i.test(target)) return link(unescapeSlack(target), label || unescapeSlack(target));
    return document.createTextNode('<' + unescapeSlack(inner) + '>');
  }

  // ---- Block Kit ----

  function textObject(t) {
    if (!t) return el('div', 'text');
    if (t.type === 'mrkdwn') return mrkdwn(t.text || '', !t.verbatim);
    return el('div', 'text', t.text || '');
  }

  // renderBlocks renders message or modal blocks. ctx: {message} for a
  // message's buttons, {view} for a modal's inputs.
  function renderBlocks(blocks, ctx) {
    const root = el('div', 'blocks');
    for (const b of blocks || []) {
      switch (b.type) {
        case 'header':
          root.append(el('div', 'block-header', b.text ? b.text.text : ''));
          break;
        case 'section': {
          const section = el('div', 'block-section');
          const body = el('div', 'section-body');
          if (b.text) body.append(textObject(b.text));
          if (b.fields && b.fields.length) {
            const fields = el('div', 'block-fields');
            for (const f of b.fields) fields.append(textObject(f));
            body.append(fields);
          }
          section.append(body);
          if (b.accessory) section.append(element(b.accessory, b.block_id, ctx));
          root.append(section);
          break;
        }
        case 'context': {
          const context = el('div', 'block-context');
          for (const e of b.elements || []) {
            if (e.type === 'image') context.append(el('span', null, e.alt_text || ''));
            else context.append(textObject(e));
          }
          root.append(context);
          break;
        }
        case 'actions': {
          const actions = el('div', 'block-actions');
          for (const e of b.elements || []) actions.append(element(e, b.block_id, ctx));
          root.append(actions);
          break;
        }
        case 'divider':
          root.append(el('hr', 'block-divider'));
          break;
        case 'input':
          root.append(inputBlock(b, ctx));
          break;
        case 'image':
          root.append(el('div', 'unsupported', '[image: ' + (b.alt_text || '') + ']'));
          break;
        default:
          root.append(el('div', 'unsupported', '[' + b.type + ' block]'));
      }
    }
    return root;
  }

  function element(e, blockID, ctx) {
    if (e.type !== 'button') return el('span', 'unsupported', '[' + e.type + ']');
    const b = el('button', 'btn' + (e.style ? ' ' + e.style : ''), e.text ? e.text.text : e.action_id);
    b.type = 'button';
    if (ctx.home) {
      b.addEventListener('click', async () => {
        b.disabled = true;
        await post('ui/click', { user: state.user, home: true, block_id: blockID || '', action_id: e.action_id });
        b.disabled = false;
      });
      return b;
    }
    if (!ctx.message) return b;
    b.addEventListener('click', async () => {
      // A button with a confirm object asks first, as Slack does.
      if (e.confirm && !(await confirmDialog(e.confirm, e.style))) return;
      b.disabled = true;
      await post('ui/click', { user: state.user, ts: ctx.message.ts, block_id: blockID || '', action_id: e.action_id });
      b.disabled = false;
    });
    return b;
  }

  // confirmDialog shows a button's confirmation dialog (its confirm
  // object: title, text, confirm and deny) and resolves to whether the
  // person confirmed. Escape and the deny button cancel.
  function confirmDialog(c, style) {
    return new Promise((resolve) => {
      const backdrop = el('div', 'modal-backdrop confirm-backdrop');
      const box = el('div', 'modal confirm-dialog');
      box.setAttribute('role', 'alertdialog');
      box.setAttribute('aria-modal', 'true');
      box.setAttribute('aria-labelledby', 'confirm-title');
      const header = el('div', 'modal-header');
      const title = el('h2', null, c.title ? c.title.text : 'Are you sure?');
      title.id = 'confirm-title';
      header.append(title);
      const body = el('div', 'modal-body');
      body.append(textObject(c.text));
      const footer = el('div', 'modal-footer');
      const deny = el('button', 'btn', c.deny ? c.deny.text : 'Cancel');
      deny.type = 'button';
      const ok = el('button', 'btn ' + (c.style === 'danger' || style === 'danger' ? 'danger' : 'primary'), c.confirm ? c.confirm.text : 'Yes');
      ok.type = 'button';
      const done = (yes) => {
        backdrop.remove();
        document.removeEventListener('keydown', onKey, true);
        resolve(yes);
      };
      const onKey = (ev) => {
        if (ev.key === 'Escape') {
          ev.stopPropagation();
          done(false);
        }
      };
      deny.addEventListener('click', () => done(false));
      ok.addEventListener('click', () => done(true));
      document.addEventListener('keydown', onKey, true);
      footer.append(deny, ok);
      box.append(header, body, footer);
      backdrop.append(box);
      document.body.append(backdrop);
      ok.focus();
    });
  }

  // inputControl is the control of an input block's element, or null for
  // an element the playground does not draw. Its data-kind says how
  // readValues reads it (see controlValue).
  function inputControl(e) {
    const optionEl = (o) => {
      const opt = el('option', null, o.text ? o.text.text : o.value);
      opt.value = o.value;
      return opt;
    };
    const initial = (e.initial_options || []).map((o) => o.value);
    switch (e.type) {
      case 'plain_text_input': {
        const input = e.multiline ? el('textarea') : el('input');
        if (!e.multiline) input.type = 'text';
        input.value = e.initial_value || '';
        if (e.placeholder) input.placeholder = e.placeholder.text;
        if (e.max_length) input.maxLength = e.max_length;
        input.spellcheck = false;
        return input;
      }
      case 'number_input': {
        const input = el('input');
        input.type = 'number';
        input.step = e.is_decimal_allowed ? 'any' : '1';
        if (e.min_value !== undefined) input.min = e.min_value;
        if (e.max_value !== undefined) input.max = e.max_value;
        input.value = e.initial_value || '';
        return input;
      }
      case 'static_select': {
        const select = el('select');
        select.append(optionEl({ value: '', text: { text: '—' } }), ...(e.options || []).map(optionEl));
        select.value = e.initial_option ? e.initial_option.value : '';
        return select;
      }
      case 'multi_static_select': {
        const select = el('select');
        select.multiple = true;
        select.dataset.kind = 'multi';
        select.append(...(e.options || []).map(optionEl));
        for (const o of select.options) o.selected = initial.includes(o.value);
        return select;
      }
      case 'checkboxes': {
        const group = el('div', 'checks');
        group.dataset.kind = 'checks';
        group.setAttribute('role', 'group');
        for (const o of e.options || []) {
          const label = el('label', 'check');
          const box = el('input');
          box.type = 'checkbox';
          box.value = o.value;
          box.checked = initial.includes(o.value);
          label.append(box, ' ' + (o.text ? o.text.text : o.value));
          group.append(label);
        }
        return group;
      }
      case 'datepicker': {
        const input = el('input');
        input.type = 'date';
        input.value = e.initial_date || '';
        return input;
      }
      case 'datetimepicker': {
        const input = el('input');
        input.type = 'datetime-local';
        input.dataset.kind = 'datetime';
        if (e.initial_date_time) {
          const d = new Date(e.initial_date_time * 1000);
          input.value = new Date(d.getTime() - d.getTimezoneOffset() * 60000).toISOString().slice(0, 16);
        }
        return input;
      }
    }
    return null;
  }

  // controlValue is what a control holds, as the simulator reads it: the
  // text, the selected values as a JSON array, or a Unix time.
  function controlValue(input) {
    switch (input.dataset.kind) {
      case 'multi':
        return JSON.stringify(Array.from(input.selectedOptions).map((o) => o.value));
      case 'checks':
        return JSON.stringify(Array.from(input.querySelectorAll('input:checked')).map((c) => c.value));
      case 'datetime':
        return input.value ? String(Math.floor(new Date(input.value).getTime() / 1000)) : '';
    }
    return input.value;
  }

  function inputBlock(b, ctx) {
    const wrap = el('div', 'input-block');
    const e = b.element || {};
    const input = inputControl(e);
    if (!input) {
      wrap.append(el('div', 'unsupported', '[' + e.type + ' input]'));
      return wrap;
    }
    const id = 'input-' + b.block_id + '-' + e.action_id;
    const label = el('label', null, b.label ? b.label.text : '');
    label.htmlFor = id;
    if (b.optional) label.append(el('span', 'optional', ' (optional)'));
    input.id = id;
    input.dataset.block = b.block_id;
    input.dataset.action = e.action_id;
    if (e.focus_on_load) input.dataset.focus = 'true';
    input.required = !b.optional;
    wrap.append(label, input);
    const described = [];
    const error = ctx.view && ctx.view.errors ? ctx.view.errors[b.block_id] : '';
    if (error) {
      const err = el('div', 'field-error', error);
      err.id = id + '-error';
      err.setAttribute('role', 'alert');
      wrap.classList.add('invalid');
      input.setAttribute('aria-invalid', 'true');
      wrap.append(err);
      described.push(err.id);
    }
    if (b.hint) {
      const hint = el('div', 'hint', b.hint.text);
      hint.id = id + '-hint';
      wrap.append(hint);
      described.push(hint.id);
    }
    if (described.length) input.setAttribute('aria-describedby', described.join(' '));
    return wrap;
  }

  // ---- messages ----

  function visible(m) {
    return !m.visible_to || m.visible_to === state.user;
  }

  function replies(root) {
    return state.messages.filter((m) => m.thread_ts === root.ts && m.ts !== root.ts && visible(m));
  }

  function clock(ts) {
    const d = new Date(Number(ts) * 1000);
    return d.toLocaleTimeString([], { hour: 'numeric', minute: '2-digit' });
  }

  function renderMessage(m, inThread) {
    const p = person(m.user);
    const row = el('div', 'msg' + (m.visible_to ? ' ephemeral' : '') + (m.streaming ? ' streaming' : ''));
    row.dataset.ts = m.ts;
    const avatar = el('div', 'avatar', p.name.slice(0, 1).toUpperCase());
    avatar.style.background = p.color;
    avatar.setAttribute('aria-hidden', 'true');
    const body = el('div', 'body');
    const meta = el('div', 'meta');
    meta.append(el('span', 'name', p.name));
    if (p.bot) meta.append(el('span', 'app-badge', 'APP'));
    const time = el('time', 'time', clock(m.ts));
    time.dateTime = new Date(Number(m.ts) * 1000).toISOString();
    meta.append(time);
    body.append(meta);
    if (m.blocks && m.blocks.length) body.append(renderBlocks(m.blocks, { message: m }));
    else body.append(mrkdwn(m.text || '', true));
    if (m.visible_to) body.append(el('div', 'only-you', 'Only visible to you'));
    if (!inThread && !m.thread_ts) {
      const n = replies(m).length;
      if (n > 0) {
        const b = el('button', 'replies', n === 1 ? '1 reply' : n + ' replies');
        b.type = 'button';
        b.addEventListener('click', () => openThread(m.ts));
        body.append(b);
      }
    }
    row.append(avatar, body);
    return row;
  }

  function intro() {
    const ws = state.workspace;
    const box = el('div', 'intro');
    box.append(el('h2', null, '#' + ws.channel_name));
    box.append(el('p', null, 'This is a Slack channel simulated inside the bot. Type ' + ws.command +
      ' followed by a request: Countersign posts it, works in its thread, and asks before every risky tool call — Approve, Edit or Reject on the card.'));
    box.append(el('p', null, 'Switch “Acting as” to try someone else\'s request. Reply in a thread to give feedback while a call waits, or to continue after an answer.'));
    return box;
  }

  function nearBottom(box) {
    return box.scrollHeight - box.scrollTop - box.clientHeight < 120;
  }

  function renderList(box, items, inThread, before) {
    const stick = !box.dataset.rendered || nearBottom(box);
    const children = before ? [...before] : [];
    for (const m of items) children.push(renderMessage(m, inThread));
    box.replaceChildren(...children);
    box.dataset.rendered = 'true';
    if (stick) box.scrollTop = box.scrollHeight;
  }

  function renderChannel() {
    const top = state.messages.filter((m) => !m.thread_ts && visible(m));
    renderList($('messages'), top, false, [intro()]);
  }

  function renderThread() {
    const pane = $('thread');
    const root = state.thread && state.byTS.get(state.thread);
    if (!root) {
      pane.hidden = true;
      $('app').classList.remove('with-thread');
      return;
    }
    pane.hidden = false;
    $('app').classList.add('with-thread');
    const rs = replies(root);
    const head = [renderMessage(root, true)];
    head.push(rs.length ? el('div', 'thread-divider', rs.length === 1 ? '1 reply' : rs.length + ' replies')
      : el('div', 'empty-thread', 'No replies yet.'));
    renderList($('thread-messages'), rs, true, head);
  }

  function openThread(ts) {
    if (state.thread !== ts) delete $('thread-messages').dataset.rendered;
    state.thread = ts;
    renderThread();
    $('thread-input').focus();
  }

  // ---- the Home tab ----

  function renderHome() {
    const showHome = state.pane === 'home';
    $('home').hidden = !showHome;
    $('channel-pane').hidden = showHome;
    for (const [id, on] of [['sidebar-home', showHome], ['sidebar-channel', !showHome]]) {
      $(id).classList.toggle('active', on);
      if (on) $(id).setAttribute('aria-current', 'page');
      else $(id).removeAttribute('aria-current');
    }
    if (!showHome) return;
    const home = state.homes[state.user];
    const box = $('home-content');
    box.replaceChildren(home && home.view ? renderBlocks(home.view.blocks, { home: true })
      : el('p', 'empty-thread', 'Opening the Home tab…'));
  }

  // openHome shows the Home tab; the bot hears that it was opened and
  // publishes it.
  function openHome() {
    state.pane = 'home';
    render();
    post('ui/home', { user: state.user });
  }

  // ---- modals ----

  let shownView = null;

  function readValues(root) {
    const values = {};
    for (const input of root.querySelectorAll('[data-block]')) {
      values[input.dataset.block] = values[input.dataset.block] || {};
      values[input.dataset.block][input.dataset.action] = controlValue(input);
    }
    return values;
  }

  function renderModal() {
    const root = $('modal-root');
    const stack = state.views[state.user] || [];
    const top = stack[stack.length - 1];
    if (!top) {
      root.replaceChildren();
      shownView = null;
      return;
    }
    // A view redrawn (errors, an update) keeps what the person typed.
    const keep = shownView === top.id ? readValues(root) : null;
    const isNew = shownView !== top.id;
    shownView = top.id;
    const v = top.view;

    const backdrop = el('div', 'modal-backdrop');
    const form = el('form', 'modal');
    form.setAttribute('role', 'dialog');
    form.setAttribute('aria-modal', 'true');
    form.setAttribute('aria-labelledby', 'modal-title');
    form.noValidate = true;
    const header = el('div', 'modal-header');
    const title = el('h2', null, v.title ? v.title.text : '');
    title.id = 'modal-title';
    const x = el('button', 'icon-button', '×');
    x.type = 'button';
    x.setAttribute('aria-label', 'Close');
    x.addEventListener('click', () => closeView(top));
    header.append(title, x);

    const body = el('div', 'modal-body');
    if (top.error) {
      const e = el('div', 'modal-error', top.error);
      e.setAttribute('role', 'alert');
      body.append(e);
    }
    body.append(renderBlocks(v.blocks, { view: top }));

    const footer = el('div', 'modal-footer');
    const cancel = el('button', 'btn', v.close ? v.close.text : 'Cancel');
    cancel.type = 'button';
    cancel.addEventListener('click', () => closeView(top));
    footer.append(cancel);
    if (v.submit) {
      const submit = el('button', 'btn primary', v.submit.text);
      submit.type = 'submit';
      footer.append(submit);
    }
    form.append(header, body, footer);
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      if (!checkRequired(form)) return;
      const submit = form.querySelector('button[type=submit]');
      if (submit) submit.disabled = true;
      await post('ui/submit', { user: state.user, view_id: top.id, values: readValues(form) });
      if (submit) submit.disabled = false;
    });
    form.addEventListener('keydown', (ev) => {
      if (ev.key === 'Escape') closeView(top);
      if (ev.key === 'Enter' && (ev.metaKey || ev.ctrlKey)) { ev.preventDefault(); form.requestSubmit(); }
    });
    backdrop.append(form);
    root.replaceChildren(backdrop);

    if (keep) {
      for (const input of form.querySelectorAll('[data-block]')) {
        const k = keep[input.dataset.block];
        if (k && input.dataset.action in k && !input.dataset.kind) input.value = k[input.dataset.action];
      }
    }
    const focus = form.querySelector('[aria-invalid=true]') || (isNew && (form.querySelector('[data-focus]') || form.querySelector('[data-block]')));
    if (focus) focus.focus();
  }

  // checkRequired does what Slack's client does before sending: a required
  // input must not be empty.
  function checkRequired(form) {
    let ok = true;
    for (const input of form.querySelectorAll('[data-block]')) {
      const wrap = input.closest('.input-block');
      const old = wrap.querySelector('.field-error.local');
      if (old) old.remove();
      const value = controlValue(input);
      if (input.required && (value === undefined || value.trim() === '' || value === '[]')) {
        const err = el('div', 'field-error local', 'Please complete this required field.');
        err.setAttribute('role', 'alert');
        wrap.classList.add('invalid');
        input.after(err);
        if (ok) input.focus();
        ok = false;
      }
    }
    return ok;
  }

  function closeView(view) {
    post('ui/close', { user: state.user, view_id: view.id });
  }

  // ---- header and people ----

  function renderHeader() {
    const ws = state.workspace;
    $('channel-name').textContent = '#' + ws.channel_name;
    $('sidebar-channel-name').textContent = ws.channel_name;
    $('thread-channel').textContent = '#' + ws.channel_name;
    document.title = '#' + ws.channel_name + ' — Countersign playground';
    $('model-text').textContent = 'Model: ' + (ws.model || 'unknown') + (ws.hint ? ' — ' + ws.hint : '');
    $('model-badge').hidden = !/demo/i.test(ws.model || '');
    $('composer-input').placeholder = ws.command + ' fetch https://example.com';
    $('sidebar-app-name').textContent = ws.bot.name;
    $('home-app-name').textContent = ws.bot.name;
    if (!ws.users.some((u) => u.id === state.user)) {
      const saved = sessionStorage.getItem('playground-user');
      state.user = ws.users.some((u) => u.id === saved) ? saved : ws.users[0].id;
    }
    for (const id of ['user-switch', 'home-user-switch']) {
      const select = $(id);
      select.replaceChildren(...ws.users.map((u) => {
        const o = el('option', null, u.name);
        o.value = u.id;
        o.title = u.id;
        return o;
      }));
      select.value = state.user;
    }
    // The people's user IDs, which a policy's approvers: name.
    $('sidebar-people').replaceChildren(...ws.users.map((u) => {
      const li = el('li', null, u.name + ' ');
      li.append(el('code', null, u.id));
      return li;
    }));
    $('acting-id').textContent = state.user;
  }

  // ---- rendering schedule ----

  let pending = false;
  function render() {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => {
      pending = false;
      if (!state.workspace) return;
      renderChannel();
      renderThread();
      renderHome();
      renderModal();
    });
  }

  // ---- the event stream ----

  function upsert(m, live) {
    const known = state.byTS.get(m.ts);
    if (known) {
      Object.keys(known).forEach((k) => delete known[k]);
      Object.assign(known, m);
    } else {
      state.messages.push(m);
      state.byTS.set(m.ts, m);
      // A person's own request opens its thread, where the cards come.
      if (live && !m.thread_ts && state.workspace && m.user === state.workspace.bot.id &&
          (m.text || '').startsWith('<@' + state.user + '> asked:')) {
        if (state.thread !== m.ts) delete $('thread-messages').dataset.rendered;
        state.thread = m.ts;
      }
    }
  }

  function connect() {
    const es = new EventSource('events?token=' + encodeURIComponent(pageToken));
    const banner = $('connection');
    es.addEventListener('snapshot', (e) => {
      const s = JSON.parse(e.data);
      state.workspace = s.workspace;
      state.messages = [];
      state.byTS = new Map();
      for (const m of s.messages) upsert(m, false);
      state.views = s.views || {};
      state.homes = s.homes || {};
      renderHeader();
      banner.hidden = true;
      document.body.dataset.ready = 'true';
      render();
    });
    es.addEventListener('message', (e) => { upsert(JSON.parse(e.data), true); render(); });
    es.addEventListener('deleted', (e) => {
      const ts = JSON.parse(e.data).ts;
      state.byTS.delete(ts);
      state.messages = state.messages.filter((m) => m.ts !== ts);
      render();
    });
    es.addEventListener('views', (e) => {
      const d = JSON.parse(e.data);
      state.views[d.user] = d.views;
      render();
    });
    es.addEventListener('home', (e) => {
      const d = JSON.parse(e.data);
      state.homes[d.user] = d.view;
      render();
    });
    es.onerror = () => {
      $('connection-text').textContent = 'Connection to the playground lost — reconnecting…';
      banner.hidden = false;
      if (es.readyState === EventSource.CLOSED) {
        // The stream was refused, not cut: if the server no longer knows
        // this page's token (it restarted), only its new URL helps.
        checkStale().then((stale) => { if (!stale) setTimeout(connect, 2000); });
      }
    };
  }

  // checkStale asks whether the server refuses this page's token, and if
  // so says the tab must be opened again with the URL the bot printed.
  async function checkStale() {
    try {
      const res = await fetch('ui/state', { headers: { 'X-Playground-Token': pageToken } });
      if (res.status !== 403) return false;
    } catch (err) {
      return false; // not reachable (yet): keep trying
    }
    showStale();
    return true;
  }

  function showStale() {
    // A restarted bot has a new access token too: a reload would be
    // refused, so the banner names what works.
    $('connection-text').textContent = 'The playground restarted, and this tab belongs to the old one: open the URL it printed when it started again.';
    $('connection').hidden = false;
  }
  $('reload').addEventListener('click', () => window.location.reload());

  // ---- composers ----

  function composer(form, input, thread) {
    const resize = () => {
      input.style.height = 'auto';
      input.style.height = Math.min(input.scrollHeight, 200) + 'px';
    };
    input.addEventListener('input', resize);
    input.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
        e.preventDefault();
        form.requestSubmit();
      }
    });
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      const text = input.value.trim();
      if (!text || !state.user) return;
      const button = form.querySelector('button[type=submit]');
      button.disabled = true;
      const r = await post('ui/send', { user: state.user, text, thread_ts: thread() || '' });
      button.disabled = false;
      if (r.ok) {
        input.value = '';
        resize();
      }
      input.focus();
    });
  }

  composer($('composer'), $('composer-input'), () => '');
  composer($('thread-composer'), $('thread-input'), () => state.thread);
  $('thread-close').addEventListener('click', () => {
    state.thread = null;
    renderThread();
  });
  for (const id of ['user-switch', 'home-user-switch']) {
    $(id).addEventListener('change', (e) => {
      state.user = e.target.value;
      sessionStorage.setItem('playground-user', state.user);
      $('acting-id').textContent = state.user;
      $('user-switch').value = state.user;
      $('home-user-switch').value = state.user;
      shownView = null;
      if (state.pane === 'home') openHome();
      else render();
    });
  }
  $('sidebar-home').addEventListener('click', (e) => {
    e.preventDefault();
    openHome();
  });
  $('sidebar-channel').addEventListener('click', (e) => {
    e.preventDefault();
    state.pane = 'channel';
    render();
  });
  connect();
  $('composer-input').focus();
})();
