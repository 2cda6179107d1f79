// torch-diagnose: the "diagnose" tab of TensorBoard.
//
// TensorBoard loads this ES module in the tab's frame (data/plugin_entry.html, whose
// <base> is this plugin's folder) and calls render(); index.html calls it too. Every
// request goes to this plugin's own routes, by relative URL: nothing comes from the network.
//
// Names from traces are untrusted text. Text is only ever set as text (text nodes made by
// el() below); no data is ever parsed as HTML. Plots are <img> of SVG served by the plugin:
// an SVG in an image runs no script and loads nothing.

const SEVERITIES = ['critical', 'warning', 'info'];

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    node.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

function sev(s) {
  return SEVERITIES.includes(s) ? s : 'info';
}

async function getJSON(path, params) {
  const url = params ? `${path}?${new URLSearchParams(params)}` : path;
  let resp;
  try {
    resp = await fetch(url, {credentials: 'same-origin'});
  } catch (e) {
    throw new Error(`the TensorBoard server did not answer (${e.message})`);
  }
  let body = null;
  try {
    body = await resp.json();
  } catch (e) {
    throw new Error(`the server's answer to ${path} is not JSON (HTTP ${resp.status})`);
  }
  if (!resp.ok && !(body && body.error)) throw new Error(`HTTP ${resp.status} for ${path}`);
  return body;
}

function problem(title, message) {
  return el('div', {class: 'td-error', role: 'alert'}, el('strong', null, title), ' ', message);
}

function table(head, rows, numeric) {
  const num = (i) => (numeric.includes(i) ? {class: 'num'} : null);
  return el('table', null,
    el('thead', null, el('tr', null, head.map((h, i) => el('th', num(i), h)))),
    el('tbody', null, rows.map((r) => el('tr', null, r.map((c, i) => el('td', num(i), c))))));
}

function section(id, title, ...body) {
  return el('section', {id}, el('h2', null, title), body);
}

// ------------------------------------------------------------------------- run view
function finding(f) {
  const s = sev(f.severity);
  const fixes = f.fixes.map((fix, i) => el('details', {class: 'fix', open: i === 0},
    el('summary', null, i === 0 && f.fixes.length > 1 ? 'try first: ' : '', fix.title, ' ',
       fix.auto ? el('span', {class: 'badge auto'}, 'autofix can apply') : null),
    el('pre', null, el('code', {class: 'language-python'}, fix.code))));
  return el('article', {class: `finding ${s}`, id: `finding-${f.rule}`, 'data-rule': f.rule},
    el('header', null, el('span', {class: `badge ${s}`}, s), el('span', {class: 'rule'}, f.rule),
       el('span', {class: 'cat'}, f.category), el('h3', null, f.title),
       f.gain ? el('span', {class: 'gain'}, f.gain) : null),
    el('p', {class: 'message'}, f.message),
    f.hints.length ? el('ul', {class: 'hints'}, f.hints.map((h) => el('li', null, h))) : null,
    f.ranks ? el('p', {class: 'muted'}, 'ranks: ', f.ranks) : null,
    f.evidence.length ? [el('h4', null, 'Evidence'),
      el('table', {class: 'evidence'}, el('tbody', null, f.evidence.map(([k, v, meaning]) =>
        el('tr', null, el('td', null, el('code', null, k)), el('td', {class: 'num'}, v),
           el('td', {class: 'muted'}, meaning)))))] : null,
    fixes.length ? [el('h4', null, fixes.length === 1 ? 'Fix' : `Fixes (${fixes.length})`),
                    fixes] : null);
}

// a watched run: its list entry's worst and counts are its alarms' (none: an ok badge)
function alarmed(r) {
  return r.alarms !== null && r.alarms !== undefined;
}

function counts(c) {
  const badges = SEVERITIES.filter((s) => c[s]).map((s) =>
    [el('span', {class: `badge ${s}`}, `${c[s]} ${s}`), ' ']);
  return badges.length ? badges : el('span', {class: 'badge ok'}, 'no findings');
}

function runView(v) {
  const out = [el('header', {class: 'td-head'}, el('h1', null, v.run),
                  el('p', {class: 'td-headline'}, v.headline))];
  out.push(section('summary', 'Summary', el('table', {class: 'kv'}, el('tbody', null,
    v.summary.map(([k, val]) => el('tr', null, el('th', {scope: 'row'}, k), el('td', null, val))),
    el('tr', null, el('th', {scope: 'row'}, alarmed(v) ? 'alarms' : 'findings'),
       el('td', null, counts(v.counts)))))));
  out.push(section('findings', `Findings (${v.findings.length})`,
    v.findings.length ? v.findings.map(finding) : el('p', {class: 'message'}, v.headline)));
  if (v.memory) {
    const w = v.memory.what_if;
    out.push(section('memory', 'Memory',
      el('ul', null, v.memory.lines.map(([line, kind]) =>
        el('li', kind === 'modules' ? {class: 'muted'} : null, line))),
      w ? [el('h4', null, w.title), table(w.columns, w.rows, w.numeric)] : null));
  }
  if (v.plots.length) {
    out.push(section('plots', 'Plots', v.plots.map((p) =>
      el('figure', {class: 'plot', id: `plot-${p.key}`},
         el('figcaption', null, p.title, ' ', p.caption ? el('span', null, '— ', p.caption) : null),
         el('img', {src: `plot?${new URLSearchParams({run: v.run, name: p.key})}`,
                    alt: p.title, loading: 'lazy'})))));
  }
  if (v.autofix) {
    out.push(section('autofix', 'Autofix',
      el('table', null,
        el('thead', null, el('tr', null, el('th', null, 'change tried'),
          el('th', {class: 'num'}, 'before (median step)'), el('th', {class: 'num'}, 'after'),
          el('th', {class: 'num'}, 'change'), el('th', {class: 'num'}, 'speedup [CI]'),
          el('th', {class: 'num'}, 'predicted [range]'))),
        el('tbody', null, v.autofix.rows.map(
          ([label, before, after, change, measured, predicted, cls]) =>
            el('tr', null, el('td', null, label), el('td', {class: 'num'}, before),
               el('td', {class: 'num'}, after),
               el('td', {class: ['better', 'worse'].includes(cls) ? `num ${cls}` : 'num'},
                  change),
               el('td', {class: 'num'}, measured), el('td', {class: 'num'}, predicted))))),
      v.autofix.code ? [el('h4', null, 'The kept changes, as code'),
                        el('pre', null, el('code', null, v.autofix.code))] : null));
  }
  if (v.kernels) {
    out.push(section('kernels', 'Top GPU kernels', el('p', {class: 'muted'}, v.kernels.caption),
      table(['kernel', 'calls', 'total', 'of kernel time'],
            v.kernels.rows.map(([name, ...rest]) => [el('code', null, name), ...rest]),
            [1, 2, 3])));
  }
  if (v.not_evaluated.length) {
    out.push(section('not-evaluated', `Not evaluated (${v.not_evaluated.length})`,
      el('p', {class: 'muted'}, 'Rules whose metrics this run cannot give: neither passed nor failed.'),
      el('ul', null, v.not_evaluated.map(([rule, reason]) =>
        el('li', null, el('span', {class: 'rule'}, rule), ': ', reason)))));
  }
  if (v.notes.length) {
    out.push(section('notes', 'Notes', el('ul', null, v.notes.map((n) => el('li', null, n)))));
  }
  if (v.traces.length) {
    out.push(section('traces', 'Traces',
      el('p', null, v.profiler_tab
        ? 'The trace view of this run: the PYTORCH_PROFILER tab, run '
        : 'Trace copies of this run (install torch-tb-profiler for the trace view of run ',
         el('code', null, v.run), v.profiler_tab ? '.' : ').'),
      el('ul', null, v.traces.map((t) => el('li', null, el('code', null, t))))));
  }
  out.push(section('metrics', 'Metrics', el('details', null,
    el('summary', null, `All ${v.metrics.length} metrics (n/a: the run cannot give it)`),
    table(['name', 'value', 'unit'],
          v.metrics.map(([k, val, unit]) => [el('code', null, k), val, unit]), [1]))));
  return out;
}

// ---------------------------------------------------------------------------- page
function runButton(r, selected, pick) {
  const badge = r.error ? el('span', {class: 'badge critical'}, 'broken')
    : el('span', {class: `badge ${r.worst ? sev(r.worst) : 'ok'}`}, r.worst || 'ok');
  const btn = el('button', {type: 'button', class: 'td-run', 'aria-current': selected},
    badge, ' ', el('span', {class: 'td-run-name'}, r.run),
    el('span', {class: 'td-run-step'}, r.error ? 'cannot be shown' : [r.step_time || '',
      alarmed(r) ? ` · ${r.alarms} alarm${r.alarms === 1 ? '' : 's'}` : '']));
  btn.addEventListener('click', () => pick(r.run));
  return el('li', null, btn);
}

function wanted() {
  const m = /^#run=(.*)$/.exec(window.location.hash);
  if (!m) return null;
  try {
    return decodeURIComponent(m[1]);
  } catch (e) {
    return null;
  }
}

export async function render() {
  if (!document.querySelector('link[data-diagnose]')) {
    document.head.append(el('link', {rel: 'stylesheet', href: 'tab.css', 'data-diagnose': true}));
  }
  const list = el('ul', {class: 'td-list'});
  const main = el('main', {class: 'td-main', 'aria-live': 'polite'}, el('p', {class: 'muted'}, 'Loading…'));
  document.body.replaceChildren(el('div', {class: 'td-app'},
    el('nav', {class: 'td-side', 'aria-label': 'runs'}, el('h2', null, 'torch-diagnose runs'), list),
    main));

  let runs;
  try {
    runs = await getJSON('runs');
  } catch (e) {
    main.replaceChildren(problem('Cannot list the runs:', e.message));
    return;
  }
  if (!Array.isArray(runs) || !runs.length) {
    main.replaceChildren(problem('No diagnose runs in this log dir.',
      'Write one with `torch-diagnose tensorboard TRACE --logdir DIR` or '
      + 'diagnose(model, loader, tensorboard=DIR).'));
    return;
  }
  let current = null;
  const pick = async (name) => {
    current = name;
    list.replaceChildren(...runs.map((r) => runButton(r, r.run === name, pick)));
    if (window.history && window.history.replaceState) {
      window.history.replaceState(null, '', `#run=${encodeURIComponent(name)}`);
    }
    main.replaceChildren(el('p', {class: 'muted'}, 'Loading ', name, '…'));
    let v;
    try {
      v = await getJSON('run', {run: name});
    } catch (e) {
      v = {run: name, error: e.message};
    }
    if (current !== name) return;  // another run was picked meanwhile
    main.replaceChildren(...(v && !v.error ? runView(v)
      : [el('header', {class: 'td-head'}, el('h1', null, name)),
         problem('This run cannot be shown:', v && v.error ? v.error : 'no answer')]));
  };
  const hash = wanted();
  const first = runs.find((r) => !r.error) || runs[0];
  await pick(runs.some((r) => r.run === hash) ? hash : first.run);
}

if (document.body && document.body.hasAttribute('data-diagnose-standalone')) {
  render();
}
