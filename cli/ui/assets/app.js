// kubetrain ui: the jobs page (#/) and a job's page (#/jobs/ID), drawn from
// the server's read-only JSON endpoints and refreshed by polling.
//
// The DOM is built with createElement and text nodes only (no HTML is ever
// parsed from data), so every value taken from a job (names, hyperparameter values, messages,
// log lines) is shown as text, whatever it holds.
(function () {
  'use strict';

  const C = window.KTCharts;
  const POLL_MS = 800;  // a change shows within about a second
  const LOG_LINES_KEPT = 2000;
  const TERMINAL = ['SUCCEEDED', 'FAILED', 'CANCELLED'];
  const STATES = ['QUEUED', 'PREPARING', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELLING', 'CANCELLED'];

  const main = document.getElementById('main');
  const crumbs = document.getElementById('crumbs');
  const backendNote = document.getElementById('backend');
  const liveStatus = document.getElementById('live-status');

  // ---- DOM helpers

  // h('td', {class: 'x'}, 'text', childNode, ...): attributes by
  // setAttribute, string children as text nodes.
  function h(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (key.startsWith('on') && typeof value === 'function') {
        node.addEventListener(key.slice(2), value);
      } else {
        node.setAttribute(key, value === true ? '' : String(value));
      }
    }
    for (const child of children.flat(Infinity)) {
      if (child === undefined || child === null || child === false) continue;
      node.appendChild(typeof child === 'string' || typeof child === 'number'
        ? document.createTextNode(String(child)) : child);
    }
    return node;
  }

  // Replaces a node's children, keeping keyboard focus on the element with
  // the same data-key when there was one.
  function replaceChildren(node, ...children) {
    const active = document.activeElement;
    const key = active && node.contains(active) ? active.getAttribute('data-key') : null;
    node.replaceChildren(...children.flat(Infinity).filter((c) => c));
    if (key) {
      const again = node.querySelector('[data-key="' + CSS.escape(key) + '"]');
      if (again) again.focus();
    }
  }

  function stateBadge(state) {
    return h('span', { class: 'state state-' + String(state).toLowerCase() }, state);
  }

  function num(value) {
    return value === undefined || value === null ? null : Number(value);
  }

  function secondsBetween(start, end) {
    if (!start) return null;
    const a = Date.parse(start), b = end ? Date.parse(end) : Date.now();
    return isFinite(a) && isFinite(b) ? (b - a) / 1000 : null;
  }

  // A table in a scrollable, focusable region (narrow windows).
  function tableBox(label, table) {
    return h('div', { class: 'table-box', role: 'region', 'aria-label': label, tabindex: '0' }, table);
  }

  // A header row; the columns named in `numeric` are right-aligned, as
  // their cells are.
  function headRow(labels, numeric) {
    return h('tr', {}, labels.map((t) => h('th', { scope: 'col', class: (numeric || []).includes(t) ? 'num' : null }, t)));
  }

  async function getJson(url) {
    const response = await fetch(url, { cache: 'no-store', credentials: 'same-origin' });
    const text = await response.text();
    let body = null;
    try {
      body = JSON.parse(text);
    } catch (e) {
      body = { error: 'unreadable reply: ' + text.slice(0, 200) };
    }
    return { ok: response.ok, status: response.status, text, body };
  }

  function errorBox(message) {
    return h('p', { class: 'error', role: 'alert' }, message);
  }

  // ---- routing and polling

  let view = null;  // {stop()}

  function route() {
    if (view) view.stop();
    const hash = location.hash || '#/';
    const match = /^#\/jobs\/([^?]*)/.exec(hash);
    if (match) {
      let id;
      try {
        id = decodeURIComponent(match[1]);
      } catch (e) {
        id = match[1];
      }
      view = jobView(id);
    } else {
      const state = new URLSearchParams(hash.split('?')[1] || '').get('state') || '';
      view = jobsView(state);
    }
  }

  // Calls `tick` now and every POLL_MS until stopped; a tick that is still
  // running is not started again.
  function poller(tick) {
    let stopped = false, busy = false;
    const run = async () => {
      if (stopped || busy) return;
      busy = true;
      try {
        await tick();
      } finally {
        busy = false;
      }
    };
    run();
    const timer = setInterval(run, POLL_MS);
    return { stop() { stopped = true; clearInterval(timer); } };
  }

  function announce(text) {
    liveStatus.textContent = text;
  }

  // ---- the jobs page

  function jobsView(state) {
    document.title = 'Jobs · kubetrain';
    replaceChildren(crumbs, h('span', { 'aria-current': 'page' }, 'Jobs'));
    const select = h('select', { id: 'state-filter', 'data-key': 'state-filter' },
      h('option', { value: '' }, 'all states'),
      STATES.map((s) => h('option', { value: s, selected: s === state }, s)));
    select.addEventListener('change', () => {
      location.hash = select.value ? '#/?state=' + encodeURIComponent(select.value) : '#/';
    });
    const warning = h('div', { id: 'warning' });
    const region = h('div', { id: 'jobs-region' }, h('p', { class: 'muted' }, 'Loading…'));
    replaceChildren(main,
      h('h1', {}, 'Jobs'),
      warning,
      h('div', { class: 'toolbar' }, h('label', { for: 'state-filter' }, 'State '), select),
      region);
    let last = null;
    return poller(async () => {
      const reply = await getJson('/api/jobs' + (state ? '?state=' + encodeURIComponent(state) : ''));
      if (reply.text === last) return;
      last = reply.text;
      if (!reply.ok) {
        replaceChildren(region, errorBox(reply.body.error || 'HTTP ' + reply.status));
        return;
      }
      backendNote.textContent = reply.body.backend + ' · ' + reply.body.location;
      replaceChildren(warning, reply.body.warning ? h('p', { class: 'warning', role: 'status' }, reply.body.warning) : null);
      replaceChildren(region, jobsTable(reply.body.jobs, state));
    });
  }

  function jobsTable(jobs, state) {
    if (jobs.length === 0) {
      return h('p', { class: 'muted', id: 'no-jobs' }, state ? 'No ' + state + ' jobs.' : 'No jobs yet.');
    }
    const head = ['Job', 'State', 'Trials', 'Best objective', 'Created', 'Duration'];
    return tableBox('Jobs', h('table', { id: 'jobs-table' },
      h('caption', { class: 'visually-hidden' }, 'Jobs, newest first'),
      h('thead', {}, headRow(head, ['Trials', 'Best objective', 'Duration'])),
      h('tbody', {}, jobs.map((job) => h('tr', { 'data-job': job.jobId },
        h('th', { scope: 'row' }, h('a', { href: '#/jobs/' + encodeURIComponent(job.jobId), 'data-key': 'job:' + job.jobId }, job.jobId)),
        h('td', {}, stateBadge(job.state)),
        h('td', { class: 'num' }, job.trials ? num(job.trials.completed) + '/' + num(job.trials.max) : ''),
        h('td', { class: 'num', title: job.bestTrialId ? 'trial ' + job.bestTrialId : null },
          job.bestObjective !== undefined ? C.formatNumber(job.bestObjective) : ''),
        h('td', {}, h('time', { datetime: job.createTime || '' }, job.createTime || '')),
        h('td', { class: 'num' }, C.formatDuration(job.durationSeconds)))))));
  }

  // ---- a job's page

  function jobView(id) {
    document.title = id + ' · kubetrain';
    replaceChildren(crumbs, h('a', { href: '#/' }, 'Jobs'), ' / ', h('span', { 'aria-current': 'page' }, id));
    const sections = {
      summary: h('section', { id: 'summary', 'aria-labelledby': 'job-title' }),
      spec: h('section', { id: 'spec', 'aria-label': 'Spec' }),
      charts: h('section', { id: 'charts', 'aria-label': 'Study charts' }),
      trials: h('section', { id: 'trials', 'aria-label': 'Trials' }),
      logs: h('section', { id: 'logs', 'aria-label': 'Replica logs' }),
      history: h('section', { id: 'history', 'aria-label': 'State and conditions' }),
      replicas: h('section', { id: 'replica-status', 'aria-label': 'Replica status' }),
      events: h('section', { id: 'events', 'aria-label': 'Events' }),
    };
    replaceChildren(main, h('p', { class: 'muted' }, 'Loading…'), Object.values(sections));
    const state = { sort: null, last: null, logs: null, trialCount: null };
    const poll = poller(async () => {
      const reply = await getJson('/api/jobs/' + encodeURIComponent(id));
      if (reply.text === state.last) return;
      state.last = reply.text;
      if (!reply.ok) {
        replaceChildren(main, h('h1', {}, id), errorBox(reply.body.error || 'HTTP ' + reply.status));
        return;
      }
      if (main.firstChild && main.firstChild.tagName === 'P') main.firstChild.remove();
      backendNote.textContent = reply.body.backend;
      renderJob(reply.body, sections, state);
      if (!state.logs) state.logs = logsPanel(id, sections.logs);
    });
    return {
      stop() {
        poll.stop();
        if (state.logs) state.logs.stop();
      },
    };
  }

  function renderJob(page, sections, state) {
    const job = page.job;
    const input = job.trainingInput || {};
    const hp = input.hyperparameters;
    const output = job.trainingOutput || {};
    const trials = output.trials || [];
    const study = page.study;

    // Summary.
    const facts = [
      ['State', stateBadge(job.state)],
      ['Created', job.createTime || ''],
      ['Started', job.startTime || ''],
      ['Ended', job.endTime || ''],
      ['Duration', C.formatDuration(page.durationSeconds)],
    ].filter(([k, v]) => v !== '' || k === 'Created');  // no empty "Ended" while it runs
    if (study) {
      facts.push(['Trials', h('span', { id: 'trial-count' }, num(study.completed) + '/' + num(study.max) + ' completed, ' +
        study.running + ' running, ' + (study.paused ? study.paused + ' paused, ' : '') +
        study.failed + ' failed, ' + study.stoppedEarly + ' stopped early')]);
      if (study.earlyStopping) {
        facts.push(['Early stopping', h('span', { id: 'early-stopping' }, study.earlyStopping +
          (study.stoppedAtEachRung ? '; stopped at each rung: ' + study.stoppedAtEachRung : ''))]);
      }
      facts.push(['Best objective', study.best
        ? h('span', { id: 'best-objective' }, C.formatNumber(study.best.objectiveValue) + ' (trial ' + study.best.trialId + ')')
        : '—']);
    }
    replaceChildren(sections.summary,
      h('h1', { id: 'job-title' }, job.jobId),
      h('dl', { class: 'facts' }, facts.map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)])),
      job.errorMessage ? h('p', { class: 'error', id: 'job-error' }, job.errorMessage) : null);
    if (study && state.trialCount !== null && state.trialCount !== num(study.completed)) {
      announce(num(study.completed) + ' of ' + num(study.max) + ' trials completed');
    }
    state.trialCount = study ? num(study.completed) : null;

    // The spec in brief.
    const specFacts = [['Scale tier', input.scaleTier || 'BASIC']];
    if (input.region) specFacts.push(['Region', input.region]);
    if (input.pythonModule) specFacts.push(['Module', input.pythonModule]);
    if (input.jobDir) specFacts.push(['Job dir', input.jobDir]);
    if (input.args && input.args.length) specFacts.push(['Args', h('code', {}, input.args.join(' '))]);
    const specChildren = [h('h2', {}, 'Spec'), h('dl', { class: 'facts' }, specFacts.map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]))];
    if (page.replicas) {
      specChildren.push(tableBox('Replicas', h('table', { id: 'replicas-table' },
        h('caption', {}, 'Replicas per trial'),
        h('thead', {}, headRow(['Role', 'Count', 'Machine type'], ['Count'])),
        h('tbody', {}, page.replicas.map((r) => h('tr', {},
          h('th', { scope: 'row' }, r.role), h('td', { class: 'num' }, num(r.count)),
          h('td', {}, r.machineType + (r.gpus ? ' (' + r.gpus + ' GPU)' : ''))))))));
    }
    if (page.specErrors) specChildren.push(h('ul', { class: 'error' }, page.specErrors.map((e) => h('li', {}, e))));
    if (hp) {
      const algorithm = hp.algorithm || 'ALGORITHM_UNSPECIFIED';
      specChildren.push(h('p', { class: 'study-spec' },
        'Goal ' + (hp.goal || 'MAXIMIZE') + ', ' + (hp.maxTrials || 1) + ' trials, ' + (hp.maxParallelTrials || 1) +
        ' at a time, ' + (algorithm === 'ALGORITHM_UNSPECIFIED' ? 'Bayesian optimisation' : algorithm) +
        (hp.enableTrialEarlyStopping ? ', early stopping' : '') +
        (hp.hyperparameterMetricTag ? ', metric ' + hp.hyperparameterMetricTag : '')));
      specChildren.push(tableBox('Parameters', h('table', { id: 'params-table' },
        h('caption', {}, 'Parameters'),
        h('thead', {}, h('tr', {}, ['Parameter', 'Type', 'Range', 'Scale'].map((t) => h('th', { scope: 'col' }, t)))),
        h('tbody', {}, (hp.params || []).map((p) => h('tr', {},
          h('th', { scope: 'row' }, p.parameterName),
          h('td', {}, p.type),
          h('td', {}, rangeText(p)),
          h('td', {}, p.scaleType || '')))))));
    }
    replaceChildren(sections.spec, specChildren);

    // The study: charts and trials.
    if (hp) {
      replaceChildren(sections.charts, studyCharts(hp, trials));
      replaceChildren(sections.trials, trialsTable(hp, trials, state, () => renderTrials(hp, trials, sections, state)));
    } else {
      replaceChildren(sections.charts);
      replaceChildren(sections.trials);
    }

    // State and conditions over time.
    const status = page.status || {};
    const conditions = (status.conditions || []).slice().sort((a, b) =>
      String(a.lastTransitionTime || '').localeCompare(String(b.lastTransitionTime || '')));
    const timeline = [];
    if (job.createTime) timeline.push([job.createTime, 'created', '', '']);
    if (job.startTime) timeline.push([job.startTime, 'started', '', '']);
    for (const c of conditions) timeline.push([c.lastTransitionTime || '', c.type + ' = ' + c.status, c.reason || '', c.message || '']);
    if (job.endTime) timeline.push([job.endTime, 'ended ' + job.state, '', job.errorMessage || '']);
    timeline.sort((a, b) => String(a[0]).localeCompare(String(b[0])));
    replaceChildren(sections.history, h('h2', {}, 'State and conditions'),
      tableBox('State and conditions', h('table', { id: 'conditions-table' },
        h('thead', {}, h('tr', {}, ['Time', 'What', 'Reason', 'Message'].map((t) => h('th', { scope: 'col' }, t)))),
        h('tbody', {}, timeline.map((row) => h('tr', {}, row.map((cell, i) =>
          i === 0 ? h('td', {}, h('time', { datetime: cell }, cell)) : h('td', {}, cell || ''))))))));

    // Replica status.
    const replicaStatuses = Object.entries(status.replicaStatuses || {});
    replaceChildren(sections.replicas, h('h2', {}, 'Replica status'),
      replicaStatuses.length === 0 ? h('p', { class: 'muted' }, 'No replicas reported.')
        : tableBox('Replica status', h('table', { id: 'replica-status-table' },
          h('thead', {}, headRow(['Role', 'Active', 'Succeeded', 'Failed', 'Restarts'], ['Active', 'Succeeded', 'Failed', 'Restarts'])),
          h('tbody', {}, replicaStatuses.map(([role, r]) => h('tr', {},
            h('th', { scope: 'row' }, role),
            ['active', 'succeeded', 'failed', 'restarts'].map((k) => h('td', { class: 'num' }, String(r[k] || 0)))))))),
      status.restartCount ? h('p', {}, 'Restarts counted against backoffLimit: ' + status.restartCount) : null);

    // Recent events, newest first. The object column only where events name
    // one (a cluster's: the job's and its pods').
    const events = (page.events || []).slice().reverse().slice(0, 50);
    const withObject = events.some((e) => e.object);
    const eventTime = (e) => e.lastTimestamp || '';
    replaceChildren(sections.events, h('h2', {}, 'Recent events'),
      page.eventsError ? h('p', { class: 'warning' }, 'Events could not be read: ' + page.eventsError) : null,
      events.length === 0 ? h('p', { class: 'muted' }, 'No events.')
        : tableBox('Events', h('table', { id: 'events-table' },
          h('thead', {}, headRow(['Time', 'Type', 'Reason', withObject ? 'Object' : null, 'Trial', 'Message']
            .filter((t) => t !== null), ['Trial'])),
          h('tbody', {}, events.map((e) => h('tr', { class: e.type === 'Warning' ? 'warning-row' : null },
            h('td', {}, h('time', { datetime: eventTime(e) }, eventTime(e)),
              e.count > 1 ? ' (×' + e.count + ')' : null),
            h('td', {}, e.type), h('td', {}, e.reason),
            withObject ? h('td', {}, e.object || '') : null,
            h('td', { class: 'num' }, e.trial || ''), h('td', {}, e.message)))))));
  }

  function rangeText(p) {
    if (p.type === 'CATEGORICAL') return (p.categoricalValues || []).join(', ');
    if (p.type === 'DISCRETE') return (p.discreteValues || []).map(C.formatNumber).join(', ');
    return C.formatNumber(p.minValue) + ' … ' + C.formatNumber(p.maxValue);
  }

  // The trials as the charts take them.
  function trialNumber(t) {
    const n = parseInt(t.trialId, 10);
    return isFinite(n) ? n : null;
  }
  function objectiveOf(t) {
    return t.finalMetric && t.finalMetric.objectiveValue !== undefined ? Number(t.finalMetric.objectiveValue) : null;
  }

  function studyCharts(hp, trials) {
    const goal = hp.goal || 'MAXIMIZE';
    const objective = C.objectiveChart(trials.filter((t) => trialNumber(t) !== null).map((t) => ({
      id: trialNumber(t), label: t.trialId, objective: objectiveOf(t), stoppedEarly: !!t.isTrialStoppedEarly,
    })), { goal });
    const curves = C.curvesChart(trials.map((t) => ({
      label: t.trialId, state: t.state || '', stoppedEarly: !!t.isTrialStoppedEarly,
      points: (t.allMetrics || []).map((m) => [Number(m.trainingStep || 0), Number(m.objectiveValue)])
        .filter((p) => isFinite(p[0]) && isFinite(p[1])),
    })));
    const parallel = C.parallelCoordinates(hp.params || [], trials.map((t) => ({
      label: t.trialId, values: t.hyperparameters || {}, objective: objectiveOf(t), stoppedEarly: !!t.isTrialStoppedEarly,
    })), { goal });
    const noObjective = trials.filter((t) => objectiveOf(t) === null && TERMINAL.includes(t.state)).length;
    return [
      h('h2', {}, 'Study'),
      h('div', { class: 'chart-grid' },
        h('figure', { id: 'objective-figure' }, objective,
          h('figcaption', {}, 'Objective by trial, and the best so far' +
            (noObjective ? ' (' + noObjective + ' finished without an objective, not plotted)' : ''))),
        h('figure', { id: 'curves-figure' }, curves,
          h('figcaption', {}, 'Learning curves: every report of every trial; dashed ones were stopped early'))),
      h('figure', { id: 'parallel-figure', class: 'wide' }, h('div', { class: 'chart-scroll', tabindex: '0', role: 'region', 'aria-label': 'Parallel coordinates' }, parallel),
        h('figcaption', {}, 'Hyperparameters of every trial, coloured by objective (grey dashed: no objective)')),
    ];
  }

  // The trial table: best first by default (the server's order), sortable
  // by any column with the header buttons.
  function trialColumns(hp) {
    const params = hp.params || [];
    const cols = [
      { key: 'trial', label: 'Trial', value: (t) => trialNumber(t) ?? t.trialId, text: (t) => t.trialId, num: true },
      { key: 'state', label: 'State', value: (t) => t.state || '', cell: (t) => stateBadge(t.state || '') },
      { key: 'objective', label: 'Objective', value: objectiveOf, text: (t) => (objectiveOf(t) === null ? '' : C.formatNumber(t.finalMetric.objectiveValue)), num: true },
      { key: 'step', label: 'Step', value: (t) => (t.finalMetric ? Number(t.finalMetric.trainingStep || 0) : null), text: (t) => (t.finalMetric ? String(t.finalMetric.trainingStep || 0) : ''), num: true },
    ];
    for (const spec of params) {
      const p = spec.parameterName;
      cols.push({
        key: 'param:' + p, label: p, num: spec.type !== 'CATEGORICAL',
        value: (t) => {
          const v = (t.hyperparameters || {})[p];
          const n = Number(v);
          return v === undefined ? null : (isFinite(n) && v !== '' ? n : v);
        },
        text: (t) => (t.hyperparameters || {})[p] ?? '',
      });
    }
    cols.push({ key: 'duration', label: 'Duration', value: (t) => secondsBetween(t.startTime, t.endTime), text: (t) => C.formatDuration(secondsBetween(t.startTime, t.endTime)), num: true });
    cols.push({ key: 'note', label: 'Note', value: (t) => noteText(t), cell: noteCell });
    return cols;
  }

  // "stopped early", and at which rung under successive halving (the last
  // of the trial's rungMetrics).
  function stoppedText(t) {
    const rungs = (t.rungMetrics || []).length;
    return 'stopped early' + (rungs > 0 ? ' at rung ' + (rungs - 1) : '');
  }

  // earlyStopping.pauseAtRungs: the trial waits at its last rung.
  function pausedText(t) {
    return 'paused at rung ' + ((t.rungMetrics || []).length - 1);
  }

  function noteText(t) {
    return (t.isTrialStoppedEarly ? stoppedText(t) + ' ' : '') + (t.paused ? pausedText(t) + ' ' : '') +
      (t.errorMessage || '');
  }

  function noteCell(t) {
    return [
      t.isTrialStoppedEarly ? h('span', { class: 'badge badge-stopped' }, stoppedText(t)) : null,
      t.paused ? h('span', { class: 'badge badge-paused' }, pausedText(t)) : null,
      t.state === 'FAILED' ? h('span', { class: 'badge badge-failed' }, 'failed') : null,
      t.errorMessage ? h('span', { class: 'trial-error' }, t.errorMessage) : null,
    ];
  }

  function compare(a, b) {
    if (a === b) return 0;
    if (a === null || a === undefined) return 1;
    if (b === null || b === undefined) return -1;
    if (typeof a === 'number' && typeof b === 'number') return a - b;
    return String(a).localeCompare(String(b), undefined, { numeric: true });
  }

  function renderTrials(hp, trials, sections, state) {
    replaceChildren(sections.trials, trialsTable(hp, trials, state, () => renderTrials(hp, trials, sections, state)));
  }

  function trialsTable(hp, trials, state, rerender) {
    const cols = trialColumns(hp);
    let rows = trials.slice();
    if (state.sort) {
      const col = cols.find((c) => c.key === state.sort.key);
      if (col) {
        rows.sort((a, b) => {
          const va = col.value(a), vb = col.value(b);
          // Empty cells last in either direction.
          if (va === null || va === undefined || vb === null || vb === undefined) return compare(va, vb);
          return state.sort.dir * compare(va, vb);
        });
      }
    }
    const header = cols.map((c) => {
      const sorted = state.sort && state.sort.key === c.key;
      const ariaSort = sorted ? (state.sort.dir > 0 ? 'ascending' : 'descending') : (!state.sort && c.key === 'objective' ? (hp.goal === 'MINIMIZE' ? 'ascending' : 'descending') : null);
      const button = h('button', { type: 'button', class: 'sort', 'data-key': 'sort:' + c.key, 'data-sort': c.key },
        c.label, h('span', { class: 'sort-mark', 'aria-hidden': 'true' }, sorted ? (state.sort.dir > 0 ? ' ▲' : ' ▼') : ''));
      button.addEventListener('click', () => {
        state.sort = sorted ? { key: c.key, dir: -state.sort.dir } : { key: c.key, dir: c.key === 'objective' && hp.goal !== 'MINIMIZE' ? -1 : 1 };
        rerender();
      });
      return h('th', { scope: 'col', 'aria-sort': ariaSort, class: c.num ? 'num' : null }, button);
    });
    const body = rows.map((t) => h('tr', {
      class: ['trial-row', t.isTrialStoppedEarly ? 'stopped-early' : '', t.state === 'FAILED' ? 'failed' : ''].join(' ').trim(),
      'data-trial': t.trialId, 'data-state': t.state || '',
    }, cols.map((c, i) => {
      const content = c.cell ? c.cell(t) : c.text(t);
      return i === 0 ? h('th', { scope: 'row', class: 'num' }, content) : h('td', { class: c.num ? 'num' : null }, content);
    })));
    return [
      h('h2', {}, 'Trials'),
      h('div', { class: 'toolbar' },
        h('span', { class: 'muted' }, state.sort ? 'Sorted by ' + cols.find((c) => c.key === state.sort.key).label : 'Best first'),
        state.sort ? h('button', { type: 'button', 'data-key': 'sort:reset', onclick: () => { state.sort = null; rerender(); } }, 'Best first') : null),
      tableBox('Trials', h('table', { id: 'trials-table' },
        h('caption', { class: 'visually-hidden' }, 'Trials of the study'),
        h('thead', {}, h('tr', {}, header)),
        h('tbody', {}, body))),
    ];
  }

  // ---- replica logs (either backend: a cluster's through pods/log)

  function logsPanel(id, section) {
    const select = h('select', { id: 'log-stream', 'data-key': 'log-stream' });
    const follow = h('input', { type: 'checkbox', id: 'log-follow', checked: true });
    const pre = h('pre', { id: 'log-text', tabindex: '0', 'aria-label': 'Log lines', 'aria-live': 'off' });
    const note = h('p', { class: 'muted', id: 'log-note' });
    replaceChildren(section, h('h2', {}, 'Replica logs'),
      h('div', { class: 'toolbar' },
        h('label', { for: 'log-stream' }, 'Log '), select,
        h('label', { class: 'check' }, follow, ' follow')),
      note, pre);
    let streams = [], current = null, offset = -1, stopped = false, busy = false, lines = 0;
    const key = (s) => s.trial + '\u0000' + s.task;

    async function refreshStreams() {
      const reply = await getJson('/api/jobs/' + encodeURIComponent(id) + '/logs');
      if (!reply.ok) {
        note.textContent = reply.body.error || 'HTTP ' + reply.status;
        return;
      }
      const next = reply.body.streams;
      if (next.map(key).join('\n') === streams.map(key).join('\n')) return;
      streams = next;
      const chosen = select.value;
      replaceChildren(select, streams.map((s) => h('option', { value: key(s) },
        (s.trial ? 'trial ' + s.trial + ' · ' : '') + s.task)));
      if (chosen && streams.some((s) => key(s) === chosen)) select.value = chosen;
      if (!current && streams.length) choose(select.value);
      if (!streams.length) note.textContent = 'No replica has written a log yet.';
    }

    function choose(value) {
      current = streams.find((s) => key(s) === value) || null;
      offset = -1;
      lines = 0;
      pre.replaceChildren();
      note.textContent = '';
    }

    async function readMore() {
      if (!current) return;
      const s = current;
      const query = 'task=' + encodeURIComponent(s.task) + (s.trial ? '&trial=' + encodeURIComponent(s.trial) : '') +
        (offset >= 0 ? '&offset=' + offset : '&lines=200');
      const reply = await getJson('/api/jobs/' + encodeURIComponent(id) + '/log?' + query);
      if (s !== current) return;  // switched meanwhile
      if (!reply.ok) {
        note.textContent = reply.body.error || 'HTTP ' + reply.status;
        return;
      }
      if (offset < 0 && reply.body.truncated) note.textContent = 'Showing the last lines only.';
      offset = reply.body.nextOffset;
      if (!reply.body.lines.length) return;
      const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      const fragment = document.createDocumentFragment();
      for (const line of reply.body.lines) {
        fragment.appendChild(h('span', { class: 'log-line sev-' + line.severity },
          (line.time ? line.time + ' ' : '') + line.severity + ' ' + line.message + '\n'));
      }
      pre.appendChild(fragment);
      lines += reply.body.lines.length;
      while (lines > LOG_LINES_KEPT && pre.firstChild) {
        pre.firstChild.remove();
        --lines;
      }
      if (follow.checked && atBottom) pre.scrollTop = pre.scrollHeight;
    }

    select.addEventListener('change', () => {
      choose(select.value);
      readMore();
    });

    async function tick() {
      if (stopped || busy) return;
      busy = true;
      try {
        await refreshStreams();
        // Following: read on; otherwise only the first screenful.
        if (follow.checked || offset < 0) await readMore();
      } finally {
        busy = false;
      }
    }
    tick();
    const timer = setInterval(tick, POLL_MS);
    return { stop() { stopped = true; clearInterval(timer); } };
  }

  window.addEventListener('hashchange', route);
  route();
})();
