// heapwatch report: the explorer of each life. Reads the page's data block (explorer-data):
// a table of frames, a table of stacks, and per life its timeline and its heap captures, each
// as the stacks whose in-use bytes changed since the capture before it. A span selected on a
// life's timeline (or named in the URL fragment, #life=N&from=S&to=S) shows what the heap
// gained and lost between the captures at its ends: a flamegraph (click a frame to zoom, search
// to mark frames) and the table of sites (sort, filter). Text reaches the page only through
// textContent and attribute values; no markup is ever built from data.
(function () {
  'use strict';

  const SVG = 'http://www.w3.org/2000/svg';
  const block = document.getElementById('explorer-data');
  if (!block) return;
  const data = JSON.parse(block.textContent);
  const frames = data.frames;
  const stacks = data.stacks;

  // ---- words and numbers, as heapwatch's own formatting writes them ----

  // Fixed decimals rounding an exact tie to even, as Rust's formatting does.
  function fixed(v, digits) {
    const scale = Math.pow(10, digits);
    const scaled = v * scale;
    const floor = Math.floor(scaled);
    if (scaled - floor === 0.5 && floor % 2 === 0) return (floor / scale).toFixed(digits);
    return v.toFixed(digits);
  }

  // units::format_bytes
  function bytes(n) {
    const sign = n < 0 ? '-' : '';
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
    let v = Math.abs(n);
    let u = 0;
    while (v >= 1024 && u < units.length - 1) {
      v /= 1024;
      u += 1;
    }
    if (u === 0) return sign + Math.abs(n) + ' B';
    return sign + fixed(v, v >= 100 ? 0 : v >= 10 ? 1 : 2) + ' ' + units[u];
  }

  function signed(n) {
    return (n >= 0 ? '+' : '') + bytes(n);
  }

  function percent(part, whole) {
    return whole > 0 ? fixed((part * 100) / whole, 0) + ' %' : '-';
  }

  function seconds(s) {
    return fixed(s, 1) + ' s';
  }

  // A number for the fragment: at most three decimals, none trailing.
  function short(s) {
    return String(Math.round(s * 1000) / 1000);
  }

  // ---- the DOM, built from elements and text ----

  function el(tag, attrs, text) {
    const e = document.createElement(tag);
    for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function svg(tag, attrs, text) {
    const e = document.createElementNS(SVG, tag);
    for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function clear(e) {
    while (e.firstChild) e.removeChild(e.firstChild);
  }

  // ---- a life's captures ----

  function leaf(stack) {
    const s = stacks[stack];
    return s[s.length - 1];
  }

  // The in-use bytes per stack at captures i and j of a life (i <= j), replayed from its first.
  function statesAt(life, i, j) {
    const state = new Map();
    let first = null;
    for (let k = 0; k <= j; k++) {
      const d = life.captures[k].d;
      for (let p = 0; p < d.length; p += 2) {
        if (d[p + 1] === 0) state.delete(d[p]);
        else state.set(d[p], d[p + 1]);
      }
      if (k === i) first = new Map(state);
    }
    return [first, state];
  }

  // The capture whose data is in effect at `s` seconds: the last taken at or before it, else
  // the life's first.
  function captureAt(life, s) {
    let found = 0;
    life.captures.forEach((c, k) => {
      if (c.t <= s + 1e-9) found = k;
    });
    return found;
  }

  function sum(map) {
    let total = 0;
    map.forEach((v) => (total += v));
    return total;
  }

  // What the heap gained and lost from `from` to `to` seconds.
  function compute(life, from, to) {
    const i = captureAt(life, from);
    const j = captureAt(life, to);
    const [a, b] = statesAt(life, i, j);
    const change = new Map();
    a.forEach((v, s) => change.set(s, -v));
    b.forEach((v, s) => change.set(s, (change.get(s) || 0) + v));
    const sites = new Map();
    const site = (f) => {
      if (!sites.has(f)) sites.set(f, { name: frames[f], before: 0, after: 0, change: 0 });
      return sites.get(f);
    };
    a.forEach((v, s) => (site(leaf(s)).before += v));
    b.forEach((v, s) => (site(leaf(s)).after += v));
    const rows = [];
    sites.forEach((r) => {
      r.change = r.after - r.before;
      if (r.change !== 0) rows.push(r);
    });
    const gained = rows.reduce((t, r) => t + Math.max(r.change, 0), 0);
    let first = null;
    rows.forEach((r) => {
      if (r.change > 0 && (!first || r.change > first.change)) first = r;
    });
    return {
      from: life.captures[i],
      to: life.captures[j],
      same: i === j,
      totalBefore: sum(a),
      totalAfter: sum(b),
      change: change,
      rows: rows,
      gained: gained,
      lost: rows.reduce((t, r) => t + Math.max(-r.change, 0), 0),
      first: first,
    };
  }

  // The title of a view: what it is and what it added first.
  function titleOf(life, from, to, v) {
    const head = 'life ' + life.index + ', ' + seconds(from) + ' \u2192 ' + seconds(to) + ': ';
    if (v.same) return head + 'one capture (#' + v.from.seq + '), nothing to compare';
    const net = v.totalAfter - v.totalBefore;
    if (!v.first) return head + 'nothing added (' + signed(net) + ')';
    return head + signed(net) + ', ' + percent(v.first.change, v.gained) + ' ' + v.first.name;
  }

  // ---- the timeline chart ----

  const W = 960;
  const H = 320;
  const COLORS = {
    heap: '#1f77b4',
    cgroup: '#d62728',
    rss: '#ff7f0e',
    goroutines: '#2ca02c',
    burst: 'rgba(255,187,120,0.3)',
    mark: '#505050',
    event: '#6e6e6e',
  };

  function niceStep(span, most) {
    const least = span / most;
    if (!(least > 0) || !isFinite(least)) return 1;
    const power = Math.pow(10, Math.floor(Math.log10(least)));
    for (const m of [1, 2, 5, 10]) if (m * power >= least - 1e-12) return m * power;
    return 10 * power;
  }

  // A step for a bytes axis: 1, 2 or 5 times a power of ten of the binary unit that fits
  // (KiB, MiB, GiB), so that ticks read 64 MiB, 128 MiB rather than 95.4 MiB.
  function bytesStep(span, most) {
    let unit = 1;
    while (span / unit >= 1024 * most && unit < Math.pow(1024, 5)) unit *= 1024;
    return niceStep(span / unit, most) * unit;
  }

  // Stretches of a series with no gap wider than four times its usual step (at least 1 s).
  function segments(points) {
    if (points.length < 2) return [points];
    const steps = [];
    for (let k = 1; k < points.length; k++) steps.push(points[k][0] - points[k - 1][0]);
    steps.sort((x, y) => x - y);
    const gap = Math.max(4 * steps[Math.floor(steps.length / 2)], 1);
    const out = [[points[0]]];
    for (let k = 1; k < points.length; k++) {
      if (points[k][0] - points[k - 1][0] > gap) out.push([]);
      out[out.length - 1].push(points[k]);
    }
    return out;
  }

  function extent(t) {
    let lo = 0;
    let hi = 1;
    const see = (x) => {
      lo = Math.min(lo, x);
      hi = Math.max(hi, x);
    };
    for (const key of ['heap', 'cgroup', 'rss', 'goroutines']) t[key].forEach((p) => see(p[0]));
    t.failures.forEach(see);
    t.kills.forEach(see);
    t.events.forEach((e) => see(e[0]));
    if (t.stopped !== null) see(t.stopped);
    const pad = (hi - lo) * 0.02;
    return [lo - pad, hi + pad];
  }

  class Life {
    constructor(meta, root) {
      this.index = meta.index;
      this.captures = meta.captures;
      this.timeline = meta.timeline;
      this.root = root;
      this.full = extent(this.timeline);
      this.domain = this.full.slice();
      const last = this.captures[this.captures.length - 1].t;
      const span = meta.default_span || [this.captures[0].t, last];
      this.span = [span[0], span[1]];
      this.mode = 'gained';
      this.focus = null;
      this.sort = { key: 'change', down: true };
      this.build();
    }

    build() {
      const root = this.root;
      root.querySelectorAll('.ex-static').forEach((e) => e.remove());
      const section = root.closest('section');
      if (section) {
        section.querySelectorAll('figure.chart, figure.flame').forEach((f) => (f.hidden = true));
      }
      const legend = el('div', { class: 'ex-legend' });
      const t = this.timeline;
      const items = [
        ['heap', 'heap in use (profile)', t.heap.length],
        ['cgroup', 'cgroup memory', t.cgroup.length],
        ['rss', 'process RSS', t.rss.length],
        ['goroutines', 'goroutines (right axis)', t.goroutines.length],
      ];
      for (const [key, words, n] of items) {
        if (!n) continue;
        const item = el('span', {}, words);
        const swatch = el('i');
        swatch.style.background = COLORS[key];
        item.prepend(swatch);
        legend.append(item);
      }
      const shade = (color, words) => {
        const item = el('span', {}, words);
        const swatch = el('i');
        swatch.style.background = color;
        swatch.style.height = '10px';
        item.prepend(swatch);
        legend.append(item);
      };
      if (t.bursts.length) shade(COLORS.burst, 'burst captures');
      shade('rgba(31,119,180,0.25)', 'the span');
      legend.append(el('span', {}, 'Drag across the chart to choose a span.'));
      this.chart = svg('svg', {
        class: 'ex-chart',
        viewBox: '0 0 ' + W + ' ' + H,
        role: 'img',
        'aria-label': 'timeline of life ' + this.index,
      });
      const bar = el('div', { class: 'ex-bar' });
      this.spanText = el('span', { class: 'ex-span' });
      this.wholeButton = el('button', { type: 'button' }, 'whole life');
      this.zoomButton = el('button', { type: 'button' }, 'zoom to the span');
      this.link = el('a', { class: 'ex-link' }, 'link to this view');
      bar.append(this.spanText, this.wholeButton, this.zoomButton, this.link);
      this.summary = el('p', { class: 'ex-summary' });

      const flameBar = el('div', { class: 'ex-bar' });
      this.gainedButton = el('button', { type: 'button', class: 'on' }, 'gained');
      this.lostButton = el('button', { type: 'button' }, 'lost');
      this.search = el('input', { type: 'search', placeholder: 'search frames', 'aria-label': 'search frames' });
      this.found = el('span', { class: 'ex-found note' });
      this.resetButton = el('button', { type: 'button', class: 'ex-reset' }, 'reset zoom');
      flameBar.append(el('span', {}, 'flamegraph of what the heap'), this.gainedButton, this.lostButton, this.search, this.found, this.resetButton);
      this.flame = svg('svg', { class: 'ex-flame', viewBox: '0 0 ' + W + ' 40' });

      const siteBar = el('div', { class: 'ex-bar' });
      this.filter = el('input', { type: 'search', placeholder: 'filter sites', 'aria-label': 'filter sites' });
      this.shown = el('span', { class: 'note' });
      siteBar.append(el('span', {}, 'Sites (leaf functions, in-use bytes at the two captures)'), this.filter, this.shown);
      this.table = el('table', { class: 'ex-sites' });

      root.append(legend, this.chart, bar, this.summary, flameBar, this.flame, siteBar, this.table);
      this.listen();
      this.show(false);
    }

    listen() {
      const at = (e) => {
        const r = this.chart.getBoundingClientRect();
        return ((e.clientX - r.left) * W) / r.width;
      };
      this.chart.addEventListener('mousedown', (e) => {
        const x = at(e);
        if (e.button !== 0 || x < this.plot.left || x > this.plot.right) return;
        this.drag = { a: x, b: x };
        e.preventDefault();
      });
      window.addEventListener('mousemove', (e) => {
        if (!this.drag) return;
        this.drag.b = Math.min(Math.max(at(e), this.plot.left), this.plot.right);
        this.drawDrag();
      });
      window.addEventListener('mouseup', () => {
        const d = this.drag;
        if (!d) return;
        this.drag = null;
        const a = Math.min(d.a, d.b);
        const b = Math.max(d.a, d.b);
        if (b - a < 3) {
          this.drawChart();
          return;
        }
        this.select(this.plot.inv(a), this.plot.inv(b));
      });
      this.wholeButton.addEventListener('click', () => {
        this.domain = this.full.slice();
        this.drawChart();
      });
      this.zoomButton.addEventListener('click', () => {
        this.zoomToSpan();
        this.drawChart();
      });
      this.gainedButton.addEventListener('click', () => this.setMode('gained'));
      this.lostButton.addEventListener('click', () => this.setMode('lost'));
      this.resetButton.addEventListener('click', () => {
        this.focus = null;
        this.drawFlame();
      });
      this.search.addEventListener('input', () => this.drawFlame());
      this.filter.addEventListener('input', () => this.drawTable());
      this.flame.addEventListener('click', (e) => {
        const g = e.target.closest('g.frame');
        if (!g || !this.frameNodes.has(g)) return;
        const node = this.frameNodes.get(g);
        this.focus = node.parent ? node : null;
        this.drawFlame();
      });
    }

    // A span chosen with the mouse: the view, kept in the fragment and named in the title.
    select(from, to) {
      this.span = [Math.max(from, this.full[0]), Math.min(to, this.full[1])];
      this.zoomToSpan();
      this.show(true);
    }

    zoomToSpan() {
      const pad = Math.max((this.span[1] - this.span[0]) * 0.06, 0.05);
      this.domain = [Math.max(this.span[0] - pad, this.full[0]), Math.min(this.span[1] + pad, this.full[1])];
    }

    setMode(mode) {
      this.mode = mode;
      this.focus = null;
      this.gainedButton.classList.toggle('on', mode === 'gained');
      this.lostButton.classList.toggle('on', mode === 'lost');
      this.drawFlame();
    }

    fragment() {
      return 'life=' + this.index + '&from=' + short(this.span[0]) + '&to=' + short(this.span[1]);
    }

    // Draws the view of the current span; `named` puts it in the fragment and the title.
    show(named) {
      const [from, to] = this.span;
      this.view = compute(this, from, to);
      this.focus = null;
      this.title = titleOf(this, from, to, this.view);
      const frag = this.fragment();
      this.link.setAttribute('href', '#' + frag);
      if (named) {
        history.replaceState(null, '', '#' + frag);
        document.title = this.title;
      }
      const v = this.view;
      this.spanText.textContent = 'span ' + seconds(from) + ' \u2192 ' + seconds(to);
      this.summary.textContent = v.same
        ? 'Both ends of the span fall on capture #' + v.from.seq + ' (taken at ' + seconds(v.from.t) + '): nothing to compare; choose a wider span.'
        : 'From capture #' + v.from.seq + ' at ' + seconds(v.from.t) + ' to capture #' + v.to.seq + ' at ' + seconds(v.to.t) +
          ' (the captures in effect at the span\u2019s ends): heap in use ' + bytes(v.totalBefore) + ' \u2192 ' + bytes(v.totalAfter) +
          ' (' + signed(v.totalAfter - v.totalBefore) + '); the sites that grew gained ' + bytes(v.gained) + ', those that shrank lost ' + bytes(v.lost) + '.';
      this.drawChart();
      this.drawFlame();
      this.drawTable();
    }

    drawChart() {
      const c = this.chart;
      clear(c);
      const t = this.timeline;
      const [x0, x1] = this.domain;
      const right = W - (t.goroutines.length ? 56 : 16);
      const plot = { left: 74, right: right, top: 12, bottom: H - 34 };
      const visible = (pts) => pts.filter((p) => p[0] >= x0 && p[0] <= x1);
      let top = 1;
      for (const key of ['heap', 'cgroup', 'rss']) visible(t[key]).forEach((p) => (top = Math.max(top, p[1])));
      if (t.limit !== null && t.limit < top * 3) top = Math.max(top, t.limit);
      top *= 1.08;
      let gtop = 10;
      visible(t.goroutines).forEach((p) => (gtop = Math.max(gtop, p[1])));
      gtop *= 1.15;
      const X = (x) => plot.left + ((x - x0) / (x1 - x0)) * (plot.right - plot.left);
      const Y = (y) => plot.bottom - (y / top) * (plot.bottom - plot.top);
      const G = (y) => plot.bottom - (y / gtop) * (plot.bottom - plot.top);
      plot.inv = (px) => x0 + ((px - plot.left) / (plot.right - plot.left)) * (x1 - x0);
      this.plot = plot;
      c.setAttribute('data-x0', short(x0));
      c.setAttribute('data-x1', short(x1));
      c.setAttribute('data-plot', plot.left + ' ' + plot.right);

      const clipId = 'ex-clip-' + this.index;
      const defs = svg('defs');
      const clip = svg('clipPath', { id: clipId });
      clip.append(svg('rect', { x: plot.left, y: plot.top - 2, width: plot.right - plot.left, height: plot.bottom - plot.top + 4 }));
      defs.append(clip);
      c.append(defs, svg('rect', { x: 0, y: 0, width: W, height: H, fill: '#fff' }));

      // Axes and grid.
      const step = niceStep(x1 - x0, 10);
      const decimals = Math.min(Math.max(-Math.floor(Math.log10(step)), 0), 3);
      for (let x = Math.ceil(x0 / step) * step; x <= x1 + 1e-9; x += step) {
        c.append(svg('line', { x1: X(x), x2: X(x), y1: plot.top, y2: plot.bottom, stroke: '#eee' }));
        c.append(svg('text', { x: X(x), y: plot.bottom + 14, 'text-anchor': 'middle' }, x.toFixed(decimals)));
      }
      const ystep = bytesStep(top / 1.08, 5);
      for (let y = 0; y <= top; y += ystep) {
        c.append(svg('line', { x1: plot.left, x2: plot.right, y1: Y(y), y2: Y(y), stroke: '#eee' }));
        c.append(svg('text', { x: plot.left - 6, y: Y(y) + 4, 'text-anchor': 'end' }, bytes(Math.round(y))));
      }
      if (t.goroutines.length) {
        const gstep = niceStep(gtop / 1.15, 5);
        for (let y = 0; y <= gtop; y += gstep) {
          c.append(svg('text', { x: plot.right + 6, y: G(y) + 4, fill: COLORS.goroutines }, String(Math.round(y))));
        }
      }
      c.append(svg('text', { x: (plot.left + plot.right) / 2, y: H - 4, 'text-anchor': 'middle', fill: '#5b6570' }, 'seconds since the life\u2019s first capture'));
      c.append(svg('rect', { x: plot.left, y: plot.top, width: plot.right - plot.left, height: plot.bottom - plot.top, fill: 'none', stroke: '#999' }));

      const layer = svg('g', { 'clip-path': 'url(#' + clipId + ')' });
      c.append(layer);
      for (const [a, b] of t.bursts) {
        const w = Math.max(X(b) - X(a), 2);
        layer.append(svg('rect', { x: X(a), y: plot.top, width: w, height: plot.bottom - plot.top, fill: COLORS.burst }));
      }
      // The span chosen.
      const [s0, s1] = this.span;
      layer.append(svg('rect', {
        class: 'ex-selection',
        x: X(s0),
        y: plot.top,
        width: Math.max(X(s1) - X(s0), 1),
        height: plot.bottom - plot.top,
        fill: 'rgba(31,119,180,0.10)',
        stroke: 'rgba(31,119,180,0.6)',
      }));
      if (t.limit !== null && t.limit <= top) {
        layer.append(svg('line', { x1: plot.left, x2: plot.right, y1: Y(t.limit), y2: Y(t.limit), stroke: COLORS.cgroup, 'stroke-opacity': 0.6 }));
        layer.append(svg('text', { x: (plot.left + plot.right) / 2, y: Y(t.limit) + 13, 'text-anchor': 'middle', fill: COLORS.cgroup }, 'limit ' + bytes(t.limit)));
      }
      const line = (pts, color, width, scale) => {
        for (const seg of segments(pts)) {
          if (!seg.length) continue;
          const d = seg.map((p) => X(p[0]).toFixed(1) + ',' + scale(p[1]).toFixed(1)).join(' ');
          layer.append(svg('polyline', { points: d, fill: 'none', stroke: color, 'stroke-width': width }));
        }
      };
      line(t.cgroup, COLORS.cgroup, 2, Y);
      line(t.rss, COLORS.rss, 2, Y);
      line(t.goroutines, COLORS.goroutines, 1, G);
      line(t.heap, COLORS.heap, 2, Y);
      for (const p of visible(t.heap)) layer.append(svg('circle', { cx: X(p[0]), cy: Y(p[1]), r: 2.2, fill: COLORS.heap }));
      for (const x of t.failures) {
        const px = X(x);
        const py = plot.bottom - 6;
        layer.append(svg('path', { d: 'M' + (px - 4) + ' ' + (py - 4) + 'l8 8m0 -8l-8 8', stroke: COLORS.cgroup, 'stroke-width': 2 }));
      }
      // Marks: kills, the end, the onset, events.
      const marks = [];
      if (t.onset !== null && t.onset > 0) marks.push([t.onset, 'growth onset ' + seconds(t.onset), COLORS.heap, false]);
      t.kills.forEach((k) => marks.push([k, 'OOM kill ' + seconds(k), COLORS.cgroup, false]));
      if (t.stopped !== null) marks.push([t.stopped, t.end_words + ' ' + seconds(t.stopped), COLORS.mark, false]);
      t.events.forEach((e) => marks.push([e[0], e[1] + ' ' + seconds(e[0]), COLORS.event, true]));
      marks
        .filter((m) => m[0] >= x0 && m[0] <= x1)
        .forEach((m, k) => {
          const px = X(m[0]);
          const attrs = { x1: px, x2: px, y1: plot.top, y2: plot.bottom, stroke: m[2] };
          if (m[3]) attrs['stroke-dasharray'] = '4 3';
          layer.append(svg('line', attrs));
          const endward = px > plot.right - 160;
          layer.append(svg('text', {
            x: endward ? px - 4 : px + 4,
            y: plot.top + 12 + (k % 4) * 13,
            'text-anchor': endward ? 'end' : 'start',
            fill: m[2],
          }, m[1]));
        });
      this.dragRect = svg('rect', { y: plot.top, height: plot.bottom - plot.top, fill: 'rgba(31,119,180,0.18)', width: 0, x: 0 });
      c.append(this.dragRect);
    }

    drawDrag() {
      const a = Math.min(this.drag.a, this.drag.b);
      const b = Math.max(this.drag.a, this.drag.b);
      this.dragRect.setAttribute('x', a);
      this.dragRect.setAttribute('width', b - a);
    }

    // ---- the flamegraph ----

    tree() {
      const root = { name: 'all', value: 0, self: 0, children: new Map(), parent: null, depth: 0 };
      const sign = this.mode === 'gained' ? 1 : -1;
      this.view.change.forEach((d, s) => {
        const v = d * sign;
        if (v <= 0) return;
        let node = root;
        root.value += v;
        for (const f of stacks[s]) {
          let next = node.children.get(f);
          if (!next) {
            next = { name: frames[f], value: 0, self: 0, children: new Map(), parent: node, depth: node.depth + 1 };
            node.children.set(f, next);
          }
          next.value += v;
          node = next;
        }
        node.self += v;
      });
      return root;
    }

    drawFlame() {
      const f = this.flame;
      clear(f);
      this.frameNodes = new Map();
      const root = this.tree();
      this.flameRoot = root;
      const term = this.search.value.trim().toLowerCase();
      const matches = (n) => term !== '' && n.name.toLowerCase().includes(term);
      // Lay out: x in bytes from the left, children in name order, as inferno does.
      let depth = 0;
      const place = (n, x) => {
        n.x = x;
        depth = Math.max(depth, n.depth);
        let at = x;
        [...n.children.values()].sort((p, q) => (p.name < q.name ? -1 : p.name > q.name ? 1 : 0)).forEach((child) => {
          place(child, at);
          at += child.value;
        });
      };
      place(root, 0);
      const focus = this.focus && this.focus.value > 0 ? this.focus : root;
      const ROW = 17;
      const height = Math.max((depth + 1) * ROW + 8, 40);
      f.setAttribute('viewBox', '0 0 ' + W + ' ' + height);
      if (root.value === 0) {
        f.append(svg('text', { x: 8, y: 24 }, this.view.same ? 'one capture: nothing to compare' : 'nothing ' + this.mode + ' between these captures'));
        this.found.textContent = '';
        return;
      }
      const scale = W / focus.value;
      const isAncestor = (n) => {
        for (let p = focus; p; p = p.parent) if (p === n) return true;
        return false;
      };
      let matched = 0;
      let matchedFrames = 0;
      const visit = (n, underMatch) => {
        const hit = matches(n);
        if (hit) matchedFrames += 1;
        if (hit && !underMatch) matched += n.value;
        n.children.forEach((c) => visit(c, underMatch || hit));
      };
      visit(root, false);
      const draw = (n) => {
        let x;
        let w;
        if (isAncestor(n)) {
          x = 0;
          w = W;
        } else {
          x = (n.x - focus.x) * scale;
          w = n.value * scale;
          if (x + w <= 0 || x >= W) return;
        }
        if (w < 0.5) return;
        const y = height - (n.depth + 1) * ROW;
        const g = svg('g', {
          class: 'frame' + (matches(n) ? ' match' : '') + (isAncestor(n) && n !== focus ? ' dim' : ''),
          'data-name': n.name,
          'data-bytes': String(n.value),
          'data-self': String(n.self),
        });
        const share = percent(n.value, root.value);
        g.append(svg('title', {}, n.name + ': ' + bytes(n.value) + ' ' + this.mode + ' (' + share + ' of it), ' + bytes(n.self) + ' in the frame itself'));
        g.append(svg('rect', { x: x.toFixed(2), y: y, width: Math.max(w - 0.6, 0.4).toFixed(2), height: ROW - 1, rx: 2, fill: colour(n.name, this.mode) }));
        const room = Math.floor((w - 6) / 6.7);
        if (room >= 3) {
          const label = n.name.length > room ? n.name.slice(0, room - 2) + '..' : n.name;
          g.append(svg('text', { x: (x + 3).toFixed(2), y: y + 12 }, label));
        }
        f.append(g);
        this.frameNodes.set(g, n);
        n.children.forEach(draw);
      };
      draw(root);
      this.found.textContent = term === ''
        ? ''
        : matchedFrames + ' frame' + (matchedFrames === 1 ? '' : 's') + ' match: ' + bytes(matched) + ', ' + percent(matched, root.value) + ' of what the heap ' + this.mode;
    }

    // ---- the sites ----

    drawTable() {
      const table = this.table;
      clear(table);
      const columns = [
        ['name', 'site'],
        ['before', 'at #' + this.view.from.seq],
        ['after', 'at #' + this.view.to.seq],
        ['change', 'change'],
        ['share', 'share of the gain'],
      ];
      const head = el('tr');
      for (const [key, words] of columns) {
        const th = el('th', key === 'name' ? {} : { class: 'num' });
        const arrow = this.sort.key === key ? (this.sort.down ? ' \u25be' : ' \u25b4') : '';
        const button = el('button', { type: 'button', 'data-key': key }, words + arrow);
        button.addEventListener('click', () => {
          this.sort = { key: key, down: this.sort.key === key ? !this.sort.down : key !== 'name' };
          this.drawTable();
        });
        th.append(button);
        head.append(th);
      }
      table.append(head);
      const gained = this.view.gained;
      const term = this.filter.value.trim().toLowerCase();
      const value = (r, key) => (key === 'share' ? Math.max(r.change, 0) : r[key]);
      const rows = this.view.rows
        .filter((r) => term === '' || r.name.toLowerCase().includes(term))
        .sort((p, q) => {
          const a = value(p, this.sort.key);
          const b = value(q, this.sort.key);
          const order = a < b ? -1 : a > b ? 1 : 0;
          return this.sort.down ? -order : order;
        });
      const LIMIT = 50;
      for (const r of rows.slice(0, LIMIT)) {
        const tr = el('tr');
        tr.append(
          el('td', { class: 'site' }, r.name),
          el('td', { class: 'num' }, bytes(r.before)),
          el('td', { class: 'num' }, bytes(r.after)),
          el('td', { class: 'num' }, signed(r.change)),
          el('td', { class: 'num' }, r.change > 0 ? percent(r.change, gained) : ''),
        );
        table.append(tr);
      }
      this.shown.textContent = rows.length > LIMIT
        ? 'showing ' + LIMIT + ' of ' + rows.length + ' changed sites'
        : rows.length + ' changed site' + (rows.length === 1 ? '' : 's');
    }
  }

  // Frame colours: warm for what was gained, cool for what was lost, by the name's hash.
  function colour(name, mode) {
    let h = 2166136261;
    for (let k = 0; k < name.length; k++) h = Math.imul(h ^ name.charCodeAt(k), 16777619);
    const a = (h >>> 0) % 1000 / 1000;
    const b = (h >>> 10) % 1000 / 1000;
    return mode === 'gained'
      ? 'rgb(' + Math.round(205 + 50 * a) + ',' + Math.round(80 + 130 * b) + ',' + Math.round(40 + 40 * a) + ')'
      : 'rgb(' + Math.round(60 + 50 * a) + ',' + Math.round(120 + 70 * b) + ',' + Math.round(200 + 55 * a) + ')';
  }

  // ---- the page ----

  const lives = new Map();
  for (const meta of data.lives) {
    const root = document.getElementById('explore-' + meta.index);
    if (root && meta.captures.length) lives.set(meta.index, new Life(meta, root));
  }

  // The view a fragment names (#life=N&from=S&to=S), when it names a life of this page.
  function apply() {
    const p = new URLSearchParams(location.hash.replace(/^#/, ''));
    const life = lives.get(Number(p.get('life')));
    if (!life) return;
    let from = Number(p.get('from'));
    let to = Number(p.get('to'));
    if (!p.has('from') || !isFinite(from)) from = life.captures[0].t;
    if (!p.has('to') || !isFinite(to)) to = life.captures[life.captures.length - 1].t;
    if (to < from) [from, to] = [to, from];
    life.span = [from, to];
    life.zoomToSpan();
    life.show(false);
    document.title = life.title;
    life.root.scrollIntoView();
  }

  window.addEventListener('hashchange', apply);
  apply();
  document.documentElement.setAttribute('data-explorer-ready-ms', String(Math.round(performance.now())));
})();
