#!/usr/bin/env node
// Compares MCP conformance-suite results with scripts/conformance-expected-failures.txt.
// Used by scripts/conformance.sh; runs on the Node 22 that script installs (no dependencies).
//
//   node conformance-compare.mjs --results DIR --expected FILE --versions "0.1.16 0.2.0-alpha.12"
//        [--scenarios "a b c"] [--fail-on-warning]
//
// DIR/<version>/scenarios.txt lists the scenarios that were run (one per line); each scenario
// leaves DIR/<version>/server-<scenario>-<ISO timestamp>/checks.json (the suite's -o layout).
//
// Expected-failures file: one entry per line, `VERSION SCENARIO  # reason` (the whole scenario
// is expected to fail) or `VERSION SCENARIO:CHECK_ID  # reason` (that check is expected to fail,
// every other check of the scenario must pass). The reason is required. Blank lines and lines
// starting with `#` are ignored.
//
// A scenario fails when one of its checks has status FAILURE (or WARNING with --fail-on-warning),
// or when it left no checks.json (crash or timeout). Exit 1 on any unexpected failure, on any
// expectation that no longer fails (stale), and on a malformed or unknown entry; else 0.
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

function parseArgs(argv) {
  const a = { failOnWarning: false, scenarios: null };
  for (let i = 0; i < argv.length; i++) {
    const k = argv[i];
    if (k === '--results') a.results = argv[++i];
    else if (k === '--expected') a.expected = argv[++i];
    else if (k === '--versions') a.versions = argv[++i].split(/\s+/).filter(Boolean);
    else if (k === '--scenarios') a.scenarios = new Set(argv[++i].split(/\s+/).filter(Boolean));
    else if (k === '--fail-on-warning') a.failOnWarning = true;
    else throw new Error(`unknown argument ${k}`);
  }
  if (!a.results || !a.expected || !a.versions) throw new Error('--results, --expected and --versions are required');
  return a;
}

function parseExpected(file) {
  const entries = [];
  const errors = [];
  const text = existsSync(file) ? readFileSync(file, 'utf8') : '';
  if (!existsSync(file)) errors.push(`expected-failures file not found: ${file}`);
  text.split('\n').forEach((raw, idx) => {
    const line = raw.trim();
    if (!line || line.startsWith('#')) return;
    const hash = line.indexOf('#');
    const spec = (hash < 0 ? line : line.slice(0, hash)).trim();
    const reason = hash < 0 ? '' : line.slice(hash + 1).trim();
    const parts = spec.split(/\s+/);
    const where = `${file}:${idx + 1}`;
    if (parts.length !== 2) return errors.push(`${where}: expected "VERSION SCENARIO[:CHECK]  # reason", got "${line}"`);
    if (!reason) return errors.push(`${where}: entry "${spec}" has no "# reason"`);
    const [version, target] = parts;
    const colon = target.indexOf(':');
    const scenario = colon < 0 ? target : target.slice(0, colon);
    const check = colon < 0 ? null : target.slice(colon + 1);
    if (!scenario || check === '') return errors.push(`${where}: malformed target "${target}"`);
    entries.push({ version, scenario, check, reason, where });
  });
  return { entries, errors };
}

const DIR_RE = /^server-(.+)-\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}-\d{3}Z$/;

function loadResults(dir) {
  const out = new Map();
  if (!existsSync(dir)) return out;
  for (const name of readdirSync(dir).sort()) {
    const m = DIR_RE.exec(name);
    const file = join(dir, name, 'checks.json');
    if (!m || !existsSync(file)) continue;
    let checks;
    try {
      checks = JSON.parse(readFileSync(file, 'utf8'));
    } catch (e) {
      checks = [{ id: '(unreadable checks.json)', status: 'FAILURE', errorMessage: String(e) }];
    }
    out.set(m[1], [...(out.get(m[1]) ?? []), ...checks]);
  }
  return out;
}

function oneLine(s, n = 240) {
  const t = String(s ?? '').replace(/\s+/g, ' ').trim();
  return t.length > n ? `${t.slice(0, n - 1)}…` : t;
}

function main() {
  const args = parseArgs(process.argv.slice(2));
  const { entries, errors } = parseExpected(args.expected);
  const lines = [];
  const log = (s = '') => lines.push(s);
  const totals = { passed: 0, expected: 0, unexpected: 0, stale: 0, warnings: 0 };
  const summary = { versions: {}, errors };

  for (const version of args.versions) {
    const vdir = join(args.results, version);
    const listFile = join(vdir, 'scenarios.txt');
    const all = existsSync(listFile) ? readFileSync(listFile, 'utf8').split('\n').map((s) => s.trim()).filter(Boolean) : [];
    if (all.length === 0) errors.push(`${version}: no scenario list at ${listFile}`);
    const ran = args.scenarios ? all.filter((s) => args.scenarios.has(s)) : all;
    const results = loadResults(vdir);
    const mine = entries.filter((e) => e.version === version);
    for (const e of mine) {
      if (!all.includes(e.scenario)) errors.push(`${e.where}: "${e.scenario}" is not a server scenario of suite ${version}`);
    }
    const vsum = (summary.versions[version] = []);
    log(`== suite ${version} (${ran.length} scenarios) ==`);
    for (const scenario of ran) {
      const checks = results.get(scenario);
      const failing = checks
        ? checks.filter((c) => c.status === 'FAILURE' || (args.failOnWarning && c.status === 'WARNING'))
        : [{ id: '(no result)', status: 'FAILURE', errorMessage: `no checks.json: the scenario crashed or timed out (see ${join(vdir, 'run.log')})` }];
      const warnings = (checks ?? []).filter((c) => c.status === 'WARNING');
      const whole = mine.find((e) => e.scenario === scenario && e.check === null);
      const perCheck = mine.filter((e) => e.scenario === scenario && e.check !== null);
      const counts = checks ? `${checks.filter((c) => c.status === 'SUCCESS').length} ok, ${failing.length} failed, ${warnings.length} warn` : 'no result';
      let status;
      const notes = [];
      if (whole && perCheck.length) errors.push(`${whole.where}: "${scenario}" is listed both whole and per check`);
      if (whole) {
        if (failing.length === 0) {
          status = 'STALE';
          notes.push(`listed as expected failure (${whole.reason}) but it now passes: remove "${version} ${scenario}" from the list`);
          totals.stale++;
        } else status = 'XFAIL';
      } else {
        const unexpected = failing.filter((c) => !perCheck.some((e) => e.check === c.id));
        const stale = perCheck.filter((e) => !failing.some((c) => c.id === e.check));
        for (const c of unexpected) notes.push(`${c.status} ${c.id}: ${oneLine(c.errorMessage || c.description)}`);
        for (const e of stale) notes.push(`check "${e.check}" is listed (${e.reason}) but did not fail: remove "${version} ${scenario}:${e.check}"`);
        status = unexpected.length ? 'FAIL' : stale.length ? 'STALE' : perCheck.length ? 'XFAIL' : 'PASS';
        totals.stale += stale.length;
      }
      if (status === 'PASS') totals.passed++;
      else if (status === 'XFAIL') totals.expected++;
      else if (status === 'FAIL') totals.unexpected++;
      totals.warnings += warnings.length;
      const reason = whole ? `  # ${whole.reason}` : perCheck.length && status === 'XFAIL' ? `  # ${perCheck.length} known failing check(s): ${[...new Set(perCheck.map((e) => e.reason))].join('; ')}` : '';
      log(`  ${status.padEnd(5)} ${scenario} (${counts})${reason}`);
      for (const n of notes) log(`          ${n}`);
      if (status === 'PASS' || status === 'XFAIL') for (const w of warnings) log(`          (warning) ${w.id}: ${oneLine(w.errorMessage)}`);
      vsum.push({ scenario, status, checks: checks ?? null, notes });
    }
    log();
  }
  for (const e of errors) log(`ERROR ${e}`);
  const ok = totals.unexpected === 0 && totals.stale === 0 && errors.length === 0;
  log(
    `conformance summary: ${totals.passed} passed, ${totals.expected} expected failures, ` +
      `${totals.unexpected} unexpected failures, ${totals.stale} stale expectations, ${totals.warnings} warnings`,
  );
  log(ok ? 'CONFORMANCE OK' : 'CONFORMANCE NOT OK (unexpected failures, stale expectations or list errors above)');
  summary.totals = totals;
  summary.ok = ok;
  const text = lines.join('\n');
  console.log(text);
  writeFileSync(join(args.results, 'summary.txt'), `${text}\n`);
  writeFileSync(join(args.results, 'summary.json'), JSON.stringify(summary, null, 2));
  process.exit(ok ? 0 : 1);
}

try {
  main();
} catch (e) {
  console.error(`conformance-compare: ${e instanceof Error ? e.message : String(e)}`);
  process.exit(2);
}
