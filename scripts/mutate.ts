// The mutation run that proves docs/testing.md: for each listed one-line mutation, check that
// its named test passes unmutated (baseline), apply the mutation, run only that test, record
// whether it failed (KILLED, as it must) or passed (SURVIVED: the guarantee has no test), and
// restore the file. Nightly (`npm run test:chaos` runs it), not in CI: some tests need the stack.
//
//   npx tsx scripts/mutate.ts [--no-baseline] [id ...]     (default: every mutation)
//
// Writes test-results/mutation-report.md; exits 1 if any mutation survived or could not run.
// The original file is also saved under .dev/mutate-backup/ until restored, so a run killed
// half-way is repaired by the next one.
import fs from 'node:fs';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { MUTATIONS, Mutation } from './mutations';

const ROOT = path.join(__dirname, '..');
const BACKUP_DIR = path.join(ROOT, '.dev', 'mutate-backup');
const RESULTS = path.join(ROOT, 'test-results');

type Outcome = 'KILLED' | 'SURVIVED' | 'BASELINE FAILED' | 'NOT RUN';
interface Row {
  m: Mutation;
  outcome: Outcome;
  detail: string;
  seconds: number;
}

const escapeRegex = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/** Restores files a killed earlier run left mutated. */
function restoreLeftovers() {
  if (!fs.existsSync(BACKUP_DIR)) return;
  for (const f of fs.readdirSync(BACKUP_DIR)) {
    const { file, text } = JSON.parse(fs.readFileSync(path.join(BACKUP_DIR, f), 'utf8'));
    fs.writeFileSync(path.join(ROOT, file), text);
    fs.rmSync(path.join(BACKUP_DIR, f));
    process.stderr.write(`mutate: restored ${file} left mutated by an earlier run\n`);
    const m = MUTATIONS.find((x) => x.file === file && x.reinstall);
    if (m) reinstall(m, 'after restoring a leftover');
  }
}

/** Runs only the named test; returns how many of its tests passed and failed (null: no report). */
function runTest(m: Mutation, label: string): { passed: number; failed: number; ran: number } | null {
  const json = path.join(RESULTS, 'mutate', `${m.id}-${label}.json`);
  fs.mkdirSync(path.dirname(json), { recursive: true });
  fs.rmSync(json, { force: true });
  const r = spawnSync('npx', ['vitest', 'run', m.testFile, '-t', escapeRegex(m.testName), '--reporter=dot', '--reporter=json', `--outputFile.json=${json}`], {
    cwd: ROOT,
    encoding: 'utf8',
    env: { ...process.env, SHARDCTL_KEEP_STACK: '1' },
    timeout: 600_000,
  });
  fs.writeFileSync(json.replace(/\.json$/, '.log'), `${r.stdout ?? ''}\n${r.stderr ?? ''}`);
  if (!fs.existsSync(json)) return null;
  const rep = JSON.parse(fs.readFileSync(json, 'utf8'));
  return { passed: rep.numPassedTests, failed: rep.numFailedTests, ran: rep.numPassedTests + rep.numFailedTests };
}

/** Re-installs what the file defines outside this process (e.g. the fence SQL on the shards). */
function reinstall(m: Mutation, when: string) {
  if (!m.reinstall) return;
  const r = spawnSync(m.reinstall[0], m.reinstall.slice(1), { cwd: ROOT, encoding: 'utf8', timeout: 120_000 });
  if (r.status !== 0) throw new Error(`${m.id}: ${m.reinstall.join(' ')} ${when} failed: ${r.stderr}`);
}

function runMutation(m: Mutation, baseline: boolean): Row {
  const t0 = Date.now();
  const done = (outcome: Outcome, detail: string): Row => ({ m, outcome, detail, seconds: Math.round((Date.now() - t0) / 1000) });
  const abs = path.join(ROOT, m.file);
  const text = fs.readFileSync(abs, 'utf8');
  const hits = text.split(m.from).length - 1;
  if (hits !== 1) return done('NOT RUN', `the line to mutate occurs ${hits} times in ${m.file}`);
  if (baseline) {
    const b = runTest(m, 'baseline');
    if (!b || b.ran === 0) return done('NOT RUN', `no test matched "${m.testName}" in ${m.testFile}`);
    if (b.failed > 0) return done('BASELINE FAILED', `${b.failed} failed before mutating: the test proves nothing here`);
  }
  const backup = path.join(BACKUP_DIR, `${m.id}.json`);
  fs.mkdirSync(BACKUP_DIR, { recursive: true });
  fs.writeFileSync(backup, JSON.stringify({ file: m.file, text }));
  try {
    fs.writeFileSync(abs, text.replace(m.from, m.to));
    reinstall(m, 'with the mutation');
    const r = runTest(m, 'mutated');
    if (!r) return done('KILLED', 'the test run died (no report)');
    if (r.ran === 0) return done('NOT RUN', `no test matched "${m.testName}" in ${m.testFile}`);
    return r.failed > 0 ? done('KILLED', `${r.failed} of ${r.ran} failed`) : done('SURVIVED', `${r.passed} of ${r.ran} passed with the mutation`);
  } finally {
    fs.writeFileSync(abs, text);
    fs.rmSync(backup, { force: true });
    reinstall(m, 'after restoring');
  }
}

function main(argv: string[]): number {
  const baseline = !argv.includes('--no-baseline');
  const ids = argv.filter((a) => !a.startsWith('--'));
  const unknown = ids.filter((id) => !MUTATIONS.some((m) => m.id === id));
  if (unknown.length) {
    process.stderr.write(`mutate: unknown mutation ${unknown.join(', ')}; known: ${MUTATIONS.map((m) => m.id).join(', ')}\n`);
    return 2;
  }
  restoreLeftovers();
  const selected = ids.length ? MUTATIONS.filter((m) => ids.includes(m.id)) : MUTATIONS;
  const rows: Row[] = [];
  const restoreAndExit = () => {
    restoreLeftovers();
    process.exit(130);
  };
  process.on('SIGINT', restoreAndExit);
  process.on('SIGTERM', restoreAndExit);
  for (const m of selected) {
    process.stdout.write(`mutate: ${m.id} (${m.file}) -> ${m.testFile} "${m.testName}" ... `);
    const row = runMutation(m, baseline);
    rows.push(row);
    process.stdout.write(`${row.outcome} (${row.detail}, ${row.seconds} s)\n`);
  }
  const table = [
    '| mutation | file | test that must fail | result | detail | seconds |',
    '|---|---|---|---|---|---|',
    ...rows.map((r) => `| ${r.m.id} | ${r.m.file} | ${r.m.testFile}: ${r.m.testName} | ${r.outcome} | ${r.detail} | ${r.seconds} |`),
  ].join('\n');
  fs.mkdirSync(RESULTS, { recursive: true });
  fs.writeFileSync(path.join(RESULTS, 'mutation-report.md'), `${table}\n`);
  const bad = rows.filter((r) => r.outcome !== 'KILLED');
  process.stdout.write(`${table}\n${rows.length - bad.length} of ${rows.length} mutations killed\n`);
  return bad.length ? 1 : 0;
}

if (require.main === module) process.exitCode = main(process.argv.slice(2));
