// kubetrain ui charts: small hand-written SVG charts for a tuning study
// (objective by trial, learning curves, parallel coordinates), and the
// number formatting the pages share with the CLI.
//
// Every value taken from a job reaches the DOM through textContent or a
// numeric attribute, never through markup, so a job cannot inject script.
// Pure helpers (scales, ticks, best-so-far, formatting) are exported for the
// tests, which run them in the browser.
(function (global) {
  'use strict';

  const SVG_NS = 'http://www.w3.org/2000/svg';

  // ---- numbers

  // A number as the CLI prints it (nlohmann::json's dump of the value): an
  // integer as an integer; otherwise the shortest digits that read back the
  // same double, in fixed notation when the decimal point falls within
  // -4..15 places of the first digit, else as d.ddde+XX.
  function formatNumber(x) {
    if (x === null || x === undefined || x === '') return '';
    if (typeof x === 'string') {
      const parsed = Number(x);
      if (x.trim() === '' || !isFinite(parsed)) return x;
      x = parsed;
    }
    if (!isFinite(x)) return 'null';
    if (Number.isInteger(x) && Math.abs(x) < 1e15) return String(x);
    const sign = x < 0 ? '-' : '';
    const [mantissa, exponentText] = Math.abs(x).toExponential().split('e');
    const digits = mantissa.replace('.', '');
    const k = digits.length;
    const n = parseInt(exponentText, 10) + 1;  // the point sits after n digits
    if (k <= n && n <= 15) return sign + digits + '0'.repeat(n - k) + '.0';
    if (n > 0 && n <= 15) return sign + digits.slice(0, n) + '.' + digits.slice(n);
    if (n > -4 && n <= 0) return sign + '0.' + '0'.repeat(-n) + digits;
    const e = n - 1;
    const exponent = (e < 0 ? '-' : '+') + String(Math.abs(e)).padStart(2, '0');
    return sign + digits[0] + (k > 1 ? '.' + digits.slice(1) : '') + 'e' + exponent;
  }

  // A tick label: at most 4 significant digits, no trailing zeros.
  function formatTick(x) {
    if (x === 0) return '0';
    const a = Math.abs(x);
    if (a >= 1e5 || a < 1e-3) return Number(x.toPrecision(3)).toExponential();
    return String(Number(x.toPrecision(4)));
  }

  // "45s", "3m 05s", "2h 07m", "3d 04h".
  function formatDuration(seconds) {
    if (seconds === null || seconds === undefined || !isFinite(seconds)) return '';
    const s = Math.max(0, Math.round(seconds));
    const pad = (v) => String(v).padStart(2, '0');
    if (s < 60) return s + 's';
    if (s < 3600) return Math.floor(s / 60) + 'm ' + pad(s % 60) + 's';
    if (s < 86400) return Math.floor(s / 3600) + 'h ' + pad(Math.floor(s / 60) % 60) + 'm';
    return Math.floor(s / 86400) + 'd ' + pad(Math.floor(s / 3600) % 24) + 'h';
  }

  // ---- scales and ticks

  function extent(values) {
    let lo = Infinity, hi = -Infinity;
    for (const v of values) {
      if (typeof v === 'number' && isFinite(v)) {
        lo = Math.min(lo, v);
        hi = Math.max(hi, v);
      }
    }
    return lo <= hi ? [lo, hi] : null;
  }

  // A domain with room: a single value gets a band around it.
  function padDomain(lo, hi) {
    if (lo === hi) {
      const d = lo === 0 ? 1 : Math.abs(lo) * 0.1;
      return [lo - d, hi + d];
    }
    return [lo, hi];
  }

  // The same with a margin, so that marks at the ends stay off the axes.
  function roomyDomain(lo, hi) {
    const [a, b] = padDomain(lo, hi);
    const m = (b - a) * 0.06;
    return [a - m, b + m];
  }

  // Round tick values covering [lo, hi], about `count` of them.
  function niceTicks(lo, hi, count) {
    if (!(hi > lo)) return [lo];
    const raw = (hi - lo) / Math.max(1, count);
    const power = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 2.5, 5, 10].map((m) => m * power).find((s) => s >= raw) || 10 * power;
    const ticks = [];
    for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) {
      ticks.push(Number(v.toPrecision(12)));
    }
    return ticks;
  }

  // Powers of ten in [lo, hi] (lo > 0), with 2 and 5 between them when the
  // range spans less than two decades; the ends when nothing else falls in.
  function logTicks(lo, hi) {
    const ticks = [];
    const decades = Math.log10(hi) - Math.log10(lo);
    const multiples = decades < 2 ? [1, 2, 5] : [1];
    for (let p = Math.floor(Math.log10(lo)); p <= Math.ceil(Math.log10(hi)); ++p) {
      for (const m of multiples) {
        const v = Number((m * Math.pow(10, p)).toPrecision(12));
        if (v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9)) ticks.push(v);
      }
    }
    return ticks.length >= 2 ? ticks : [lo, hi];
  }

  function linearScale(lo, hi, r0, r1) {
    const f = (v) => (hi === lo ? (r0 + r1) / 2 : r0 + ((v - lo) / (hi - lo)) * (r1 - r0));
    f.ticks = (count) => niceTicks(lo, hi, count);
    f.kind = 'linear';
    return f;
  }

  function logScale(lo, hi, r0, r1) {
    const a = Math.log(lo), b = Math.log(hi);
    const f = (v) => (b === a ? (r0 + r1) / 2 : r0 + ((Math.log(v) - a) / (b - a)) * (r1 - r0));
    f.ticks = () => logTicks(lo, hi);
    f.kind = 'log';
    return f;
  }

  // The best objective so far at each point, in trial order:
  // points [{x, y}] sorted by x; MINIMIZE keeps the lowest.
  function bestSoFar(points, goal) {
    const minimize = goal === 'MINIMIZE';
    const sorted = points.slice().sort((p, q) => p.x - q.x);
    const out = [];
    let best = null;
    for (const p of sorted) {
      if (best === null || (minimize ? p.y < best : p.y > best)) best = p.y;
      out.push({ x: p.x, y: best });
    }
    return out;
  }

  // A sequential palette (dark blue -> teal -> yellow), t in [0, 1].
  const PALETTE = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
  function colorAt(t) {
    const x = Math.min(1, Math.max(0, isFinite(t) ? t : 0)) * (PALETTE.length - 1);
    const i = Math.min(PALETTE.length - 2, Math.floor(x));
    const f = x - i;
    const c = PALETTE[i].map((v, j) => Math.round(v + (PALETTE[i + 1][j] - v) * f));
    return 'rgb(' + c.join(',') + ')';
  }

  // ---- SVG building

  function svgEl(name, attrs, parent) {
    const node = document.createElementNS(SVG_NS, name);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value !== undefined && value !== null) node.setAttribute(key, String(value));
    }
    if (parent) parent.appendChild(node);
    return node;
  }

  function svgText(parent, attrs, text) {
    const node = svgEl('text', attrs, parent);
    node.textContent = text;
    return node;
  }

  // A tooltip for a mark (shown on hover, read by screen readers).
  function addTitle(node, text) {
    const title = svgEl('title', {}, node);
    title.textContent = text;
  }

  function newChart(width, height, label, className) {
    const svg = svgEl('svg', {
      viewBox: '0 0 ' + width + ' ' + height,
      class: 'chart ' + className,
      role: 'img',
      'aria-label': label,
      preserveAspectRatio: 'xMidYMid meet',
    });
    addTitle(svg, label);
    return svg;
  }

  function pathData(points) {
    return points.map((p, i) => (i === 0 ? 'M' : 'L') + p[0].toFixed(2) + ',' + p[1].toFixed(2)).join('');
  }

  function axisLeft(svg, scale, ticks, x, y0, y1, label) {
    const g = svgEl('g', { class: 'axis axis-y' }, svg);
    svgEl('line', { x1: x, x2: x, y1: y0, y2: y1 }, g);
    for (const t of ticks) {
      const y = scale(t);
      svgEl('line', { class: 'grid', x1: x, x2: x + 4, y1: y, y2: y }, g);
      svgText(g, { x: x - 6, y: y + 4, 'text-anchor': 'end' }, formatTick(t));
    }
    if (label) {
      svgText(g, { class: 'axis-label', x: 12, y: (y0 + y1) / 2, 'text-anchor': 'middle',
                   transform: 'rotate(-90 12 ' + (y0 + y1) / 2 + ')' }, label);
    }
    return g;
  }

  function axisBottom(svg, scale, ticks, y, x0, x1, label, format) {
    const g = svgEl('g', { class: 'axis axis-x' }, svg);
    svgEl('line', { x1: x0, x2: x1, y1: y, y2: y }, g);
    for (const t of ticks) {
      const x = scale(t);
      svgEl('line', { x1: x, x2: x, y1: y, y2: y + 4 }, g);
      svgText(g, { x: x, y: y + 17, 'text-anchor': 'middle' }, (format || formatTick)(t));
    }
    if (label) svgText(g, { class: 'axis-label', x: (x0 + x1) / 2, y: y + 34, 'text-anchor': 'middle' }, label);
    return g;
  }

  function emptyChart(svg, width, height, message) {
    svgText(svg, { class: 'empty', x: width / 2, y: height / 2, 'text-anchor': 'middle' }, message);
    return svg;
  }

  const W = 640, H = 320;
  const M = { left: 64, right: 20, top: 16, bottom: 48 };

  // Objective by trial number: one mark per trial with an objective
  // (<circle class="mark" data-trial>), and the best-so-far line.
  // trials: [{id (number), label (trial id text), objective, stoppedEarly}].
  function objectiveChart(trials, options) {
    const goal = (options && options.goal) || 'MAXIMIZE';
    const points = trials.filter((t) => typeof t.objective === 'number' && isFinite(t.objective));
    const svg = newChart(W, H, 'Objective by trial number, ' + points.length + ' trials, with the best so far (' +
      goal.toLowerCase() + ')', 'objective-chart');
    if (points.length === 0) return emptyChart(svg, W, H, 'No trial has reported an objective yet.');
    const xs = extent(points.map((t) => t.id));
    const ys = roomyDomain(...extent(points.map((t) => t.objective)));
    const x = linearScale(xs[0] - 0.5, xs[1] + 0.5, M.left, W - M.right);
    const y = linearScale(ys[0], ys[1], H - M.bottom, M.top);
    const xTicks = niceTicks(xs[0], xs[1], Math.min(10, xs[1] - xs[0] + 1)).filter(Number.isInteger);
    axisLeft(svg, y, y.ticks(5), M.left, M.top, H - M.bottom, 'objective');
    axisBottom(svg, x, xTicks, H - M.bottom, M.left, W - M.right, 'trial', String);
    const best = bestSoFar(points.map((t) => ({ x: t.id, y: t.objective })), goal);
    // A step line: the best holds until a better trial arrives.
    const steps = [];
    best.forEach((p, i) => {
      if (i > 0) steps.push([x(p.x), y(best[i - 1].y)]);
      steps.push([x(p.x), y(p.y)]);
    });
    if (steps.length > 0) steps.push([x(xs[1] + 0.5), y(best[best.length - 1].y)]);
    const line = svgEl('path', { class: 'best-line', d: pathData(steps) }, svg);
    addTitle(line, 'best so far: ' + formatNumber(best[best.length - 1].y));
    const marks = svgEl('g', { class: 'marks' }, svg);
    for (const t of points) {
      const mark = svgEl('circle', {
        class: 'mark' + (t.stoppedEarly ? ' stopped-early' : ''),
        'data-trial': t.label, cx: x(t.id).toFixed(2), cy: y(t.objective).toFixed(2), r: 5,
      }, marks);
      addTitle(mark, 'trial ' + t.label + ': objective ' + formatNumber(t.objective) +
        (t.stoppedEarly ? ' (stopped early)' : ''));
    }
    return svg;
  }

  // Every trial's learning curve (objective by training step) on one chart:
  // <g class="curve" data-trial data-state data-stopped-early> holding the
  // line and a mark at its last report. Stopped-early curves are dashed.
  // curves: [{label, state, stoppedEarly, points: [[step, value], ...]}].
  function curvesChart(curves, options) {
    const drawn = curves.filter((c) => c.points.length > 0);
    const stopped = drawn.filter((c) => c.stoppedEarly).length;
    const svg = newChart(W, H, 'Learning curves of ' + drawn.length + ' trials (objective by training step), ' +
      stopped + ' stopped early', 'curves-chart');
    if (drawn.length === 0) return emptyChart(svg, W, H, 'No trial has reported a metric yet.');
    const all = drawn.flatMap((c) => c.points);
    const xs = padDomain(...extent(all.map((p) => p[0])));
    const ys = roomyDomain(...extent(all.map((p) => p[1])));
    const x = linearScale(xs[0], xs[1], M.left, W - M.right);
    const y = linearScale(ys[0], ys[1], H - M.bottom, M.top);
    axisLeft(svg, y, y.ticks(5), M.left, M.top, H - M.bottom, 'objective');
    axisBottom(svg, x, x.ticks(6), H - M.bottom, M.left, W - M.right, 'training step');
    const group = svgEl('g', { class: 'curves' }, svg);
    drawn.forEach((c, i) => {
      const g = svgEl('g', {
        class: 'curve' + (c.stoppedEarly ? ' stopped-early' : '') + (c.state === 'RUNNING' ? ' running' : ''),
        'data-trial': c.label, 'data-state': c.state, 'data-stopped-early': c.stoppedEarly ? 'true' : 'false',
      }, group);
      const color = c.stoppedEarly ? null : colorAt(drawn.length === 1 ? 0.5 : i / (drawn.length - 1));
      const pts = c.points.slice().sort((p, q) => p[0] - q[0]).map((p) => [x(p[0]), y(p[1])]);
      svgEl('path', { class: 'curve-line', d: pathData(pts), stroke: color }, g);
      const last = c.points.reduce((a, b) => (b[0] >= a[0] ? b : a));
      const end = svgEl(c.stoppedEarly ? 'rect' : 'circle', c.stoppedEarly
        ? { class: 'curve-end', x: (x(last[0]) - 4).toFixed(2), y: (y(last[1]) - 4).toFixed(2), width: 8, height: 8 }
        : { class: 'curve-end', cx: x(last[0]).toFixed(2), cy: y(last[1]).toFixed(2), r: 3.5, fill: color }, g);
      addTitle(g, 'trial ' + c.label + ': ' + c.points.length + ' reports, last ' + formatNumber(last[1]) +
        ' at step ' + last[0] + (c.stoppedEarly ? ' (stopped early)' : ''));
      void end;
    });
    const legend = svgEl('g', { class: 'legend', transform: 'translate(' + (W - M.right - 220) + ',' + (M.top + 4) + ')' }, svg);
    svgEl('line', { class: 'legend-full', x1: 0, x2: 22, y1: 0, y2: 0 }, legend);
    svgText(legend, { x: 28, y: 4 }, 'ran to the end');
    svgEl('line', { class: 'legend-stopped', x1: 110, x2: 132, y1: 0, y2: 0 }, legend);
    svgText(legend, { x: 138, y: 4 }, 'stopped early');
    return svg;
  }

  // Parallel coordinates: one axis per hyperparameter (log-scaled for
  // UNIT_LOG_SCALE, one point per category for CATEGORICAL) and the
  // objective last; one line per trial (<path class="line" data-trial>),
  // coloured by objective. Trials without an objective are grey and dashed.
  // params: [{name, type, scaleType, minValue, maxValue, categoricalValues,
  // discreteValues}] (the spec); trials: [{label, values: {name: text},
  // objective, stoppedEarly}].
  function parallelCoordinates(params, trials, options) {
    const goal = (options && options.goal) || 'MAXIMIZE';
    const axes = params.map((p) => buildAxis(p, trials));
    const withObjective = trials.filter((t) => typeof t.objective === 'number' && isFinite(t.objective));
    const objectiveDomain = withObjective.length ? padDomain(...extent(withObjective.map((t) => t.objective))) : [0, 1];
    axes.push({ name: 'objective', kind: 'linear', domain: objectiveDomain, objective: true });
    // Drawn about 1:1 in a wide window; a narrow one scrolls it.
    const width = Math.max(1100, 160 * axes.length);
    const height = 360;
    const top = 36, bottom = 64;
    const svg = newChart(width, height, 'Parallel coordinates of ' + trials.length + ' trials over ' +
      params.length + ' hyperparameters, coloured by objective', 'parallel-chart');
    if (trials.length === 0) return emptyChart(svg, width, height, 'No trial has started yet.');
    const left = 80, right = 80;
    const step = axes.length > 1 ? (width - left - right) / (axes.length - 1) : 0;
    axes.forEach((a, i) => {
      a.x = left + i * step;
      a.scale = scaleFor(a, height - bottom, top);
    });
    const colour = (v) => colorAt((v - objectiveDomain[0]) / (objectiveDomain[1] - objectiveDomain[0]));
    const lines = svgEl('g', { class: 'lines' }, svg);
    // Worst first, so the best lines are drawn on top.
    const ordered = trials.slice().sort((a, b) => {
      const ha = typeof a.objective === 'number', hb = typeof b.objective === 'number';
      if (ha !== hb) return ha ? 1 : -1;
      if (!ha) return 0;
      return goal === 'MINIMIZE' ? b.objective - a.objective : a.objective - b.objective;
    });
    for (const t of ordered) {
      const pts = [];
      for (const a of axes) {
        const v = a.objective ? t.objective : positionValue(a, t.values[a.name]);
        if (v === null || v === undefined || (typeof v === 'number' && !isFinite(v))) continue;
        pts.push([a.x, a.scale(v)]);
      }
      if (pts.length === 0) continue;
      const has = typeof t.objective === 'number' && isFinite(t.objective);
      const path = svgEl('path', {
        class: 'line' + (has ? '' : ' no-objective') + (t.stoppedEarly ? ' stopped-early' : ''),
        'data-trial': t.label, 'data-objective': has ? String(t.objective) : null,
        d: pathData(pts), stroke: has ? colour(t.objective) : null,
      }, lines);
      const parts = params.map((p) => p.parameterName + '=' + (t.values[p.parameterName] ?? '—'));
      addTitle(path, 'trial ' + t.label + ': ' + parts.join(', ') + '; objective ' +
        (has ? formatNumber(t.objective) : 'none') + (t.stoppedEarly ? ' (stopped early)' : ''));
    }
    for (const a of axes) drawParallelAxis(svg, a, top, height - bottom);
    // The colour key.
    const key = svgEl('g', { class: 'colour-key', transform: 'translate(' + left + ',' + (height - 22) + ')' }, svg);
    const defs = svgEl('defs', {}, svg);
    const gradient = svgEl('linearGradient', { id: 'objective-gradient' }, defs);
    PALETTE.forEach((c, i) => svgEl('stop', { offset: (i / (PALETTE.length - 1)).toFixed(2), 'stop-color': 'rgb(' + c.join(',') + ')' }, gradient));
    svgText(key, { x: 0, y: 10, 'text-anchor': 'start' }, 'objective ' + formatTick(objectiveDomain[0]));
    svgEl('rect', { x: 110, y: 0, width: 160, height: 12, fill: 'url(#objective-gradient)' }, key);
    svgText(key, { x: 276, y: 10, 'text-anchor': 'start' }, formatTick(objectiveDomain[1]));
    return svg;
  }

  // An axis's kind and domain from the parameter's spec and the values seen.
  function buildAxis(p, trials) {
    const name = p.parameterName;
    if (p.type === 'CATEGORICAL') {
      const categories = (p.categoricalValues || []).slice();
      for (const t of trials) {
        const v = t.values[name];
        if (v !== undefined && !categories.includes(v)) categories.push(v);
      }
      return { name, kind: 'category', categories, spec: p };
    }
    const seen = trials.map((t) => parseFloat(t.values[name])).filter(isFinite);
    const bounds = p.type === 'DISCRETE' ? (p.discreteValues || []).map(Number) : [p.minValue, p.maxValue].map(Number);
    const e = extent(bounds.concat(seen)) || [0, 1];
    const log = p.scaleType === 'UNIT_LOG_SCALE' && e[0] > 0;
    return { name, kind: log ? 'log' : 'linear', domain: log ? e : padDomain(e[0], e[1]), spec: p };
  }

  function scaleFor(a, r0, r1) {
    if (a.kind === 'category') {
      const n = a.categories.length;
      const f = (i) => (n <= 1 ? (r0 + r1) / 2 : r0 + (i / (n - 1)) * (r1 - r0));
      f.kind = 'category';
      return f;
    }
    return a.kind === 'log' ? logScale(a.domain[0], a.domain[1], r0, r1) : linearScale(a.domain[0], a.domain[1], r0, r1);
  }

  // Where a trial's value (text) sits on an axis: a category's index, or
  // the number; null when the trial has none.
  function positionValue(a, text) {
    if (text === undefined || text === null) return null;
    if (a.kind === 'category') {
      const i = a.categories.indexOf(text);
      return i < 0 ? null : i;
    }
    const v = parseFloat(text);
    return isFinite(v) ? v : null;
  }

  function drawParallelAxis(svg, a, top, bottom) {
    const g = svgEl('g', {
      class: 'axis parallel-axis', 'data-param': a.name,
      'data-scale': a.objective ? 'objective' : a.kind,
    }, svg);
    svgEl('line', { x1: a.x, x2: a.x, y1: top, y2: bottom }, g);
    const heading = svgText(g, { class: 'axis-label', x: a.x, y: top - 14, 'text-anchor': 'middle' },
      a.name.length > 18 ? a.name.slice(0, 17) + '…' : a.name);
    addTitle(heading, a.name + (a.kind === 'log' ? ' (log scale)' : a.kind === 'category' ? ' (categories)' : ''));
    if (a.kind === 'category') {
      a.categories.forEach((c, i) => {
        const y = a.scale(i);
        svgEl('line', { x1: a.x - 4, x2: a.x + 4, y1: y, y2: y }, g);
        const label = svgText(g, { class: 'category', x: a.x + 7, y: y + 4, 'text-anchor': 'start' },
          c.length > 14 ? c.slice(0, 13) + '…' : c);
        addTitle(label, c);
      });
      return;
    }
    for (const t of a.scale.ticks(5)) {
      const y = a.scale(t);
      svgEl('line', { x1: a.x - 4, x2: a.x, y1: y, y2: y }, g);
      svgText(g, { x: a.x - 7, y: y + 4, 'text-anchor': 'end' }, formatTick(t));
    }
    if (a.kind === 'log') svgText(g, { class: 'scale-note', x: a.x, y: bottom + 18, 'text-anchor': 'middle' }, 'log');
  }

  global.KTCharts = {
    formatNumber, formatTick, formatDuration, niceTicks, logTicks, linearScale, logScale,
    bestSoFar, colorAt, extent, objectiveChart, curvesChart, parallelCoordinates,
  };
})(window);
