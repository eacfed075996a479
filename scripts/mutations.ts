// The mutations behind docs/testing.md: each is a one-line patch that removes or weakens one
// safety check, and names the one test that must fail when it is applied. scripts/mutate.ts
// applies them one at a time; test/unit/mutations.test.ts keeps this list, the code and the
// table from drifting apart (each `from` occurs exactly once in its file; each id is in the doc).
/* eslint-disable no-template-curly-in-string -- the patches quote source lines that hold template literals */

export interface Mutation {
  id: string;
  /** What breaks, in the words of DESIGN.md. */
  guarantee: string;
  file: string;
  /** Exact text to replace; must occur exactly once in `file`. */
  from: string;
  to: string;
  /** The test that must fail: its file and its name (or a unique part of it). */
  testFile: string;
  testName: string;
  /** Run after applying and after restoring (e.g. re-install SQL the file defines on the shards). */
  reinstall?: string[];
}

// The fence's trigger function lives in the shards: a mutation of its SQL is installed by a
// prepare before the test and replaced by a prepare after the file is restored.
const PREPARE = ['node', 'cli/shardctl.js', 'shards', 'prepare'];

export const MUTATIONS: Mutation[] = [
  {
    id: 'retire-directory-guard',
    guarantee: 'retire deletes only when the directory shows the target active at the new epoch (§4.8, §5.6)',
    file: 'activities/move/lifecycle.ts',
    from: "if (!p || p.shard !== ref.target || p.epoch !== ref.epoch || p.state !== 'active') {",
    to: 'if (!p) {',
    testFile: 'test/integration/retire-guards.test.ts',
    testName: 'refuses while a rollback holds the unit frozen on the target',
  },
  {
    id: 'retire-fence-owned-guard',
    guarantee: 'retire refuses while the source fence still owns the unit (§4.8, §5.1)',
    file: 'activities/move/lifecycle.ts',
    from: 'if (!f || f.owned || f.epoch > ref.epoch) {',
    to: 'if (!f || f.epoch > ref.epoch) {',
    testFile: 'test/integration/retire-guards.test.ts',
    testName: 'refuses while the source fence still owns the unit',
  },
  {
    id: 'retire-fence-epoch-guard',
    guarantee: 'retire refuses when the source fence has seen a newer epoch than the move (§4.8)',
    file: 'activities/move/lifecycle.ts',
    from: 'if (!f || f.owned || f.epoch > ref.epoch) {',
    to: 'if (!f || f.owned) {',
    testFile: 'test/integration/retire-guards.test.ts',
    testName: 'refuses when the source fence has seen a newer epoch',
  },
  {
    id: 'delete-copy-directory-owner',
    guarantee: 'deleteCopy never deletes the copy the directory names as owner (§5.2, §5.6)',
    file: 'activities/move/lifecycle.ts',
    from: 'if (!p || p.shard === side || fence?.owned) {',
    to: 'if (!p || fence?.owned) {',
    testFile: 'test/integration/retire-guards.test.ts',
    testName: 'rollback clean-up refuses to delete the target when the directory names it the owner',
  },
  {
    id: 'delete-copy-fence-owner',
    guarantee: 'deleteCopy never deletes a copy whose fence accepts the unit (§5.1, §5.2)',
    file: 'activities/move/lifecycle.ts',
    from: 'if (!p || p.shard === side || fence?.owned) {',
    to: 'if (!p || p.shard === side) {',
    testFile: 'test/integration/retire-guards.test.ts',
    testName: 'cancel refuses to delete the target when its fence already accepts the new epoch',
  },
  {
    id: 'validate-missing-verdict',
    guarantee: 'a row missing on the target blocks the move (§4.4, §5.7)',
    file: 'lib/validate/compare.ts',
    from: 'const ok = out.every((t) => t.missingCount === 0 && t.extraCount === 0 && t.differentCount === 0);',
    to: 'const ok = out.every((t) => t.extraCount === 0 && t.differentCount === 0);',
    testFile: 'test/integration/validate.test.ts',
    testName: 'fails the verdict when the only divergence is a row missing on the target',
  },
  {
    id: 'validate-extra-verdict',
    guarantee: 'a row extra on the target blocks the move (§4.4, §5.7)',
    file: 'lib/validate/compare.ts',
    from: 'const ok = out.every((t) => t.missingCount === 0 && t.extraCount === 0 && t.differentCount === 0);',
    to: 'const ok = out.every((t) => t.missingCount === 0 && t.differentCount === 0);',
    testFile: 'test/integration/validate.test.ts',
    testName: 'fails the verdict when the only divergence is a row extra on the target',
  },
  {
    id: 'settle-missing-verdict',
    guarantee: 'a persisting missing row still blocks validation of a live source (§4.4)',
    file: 'lib/validate/settle.ts',
    from: 'const ok = tables.every((t) => t.missingCount + t.extraCount + t.differentCount === 0);',
    to: 'const ok = tables.every((t) => t.extraCount + t.differentCount === 0);',
    testFile: 'test/unit/validate-settle.test.ts',
    testName: 'fails the verdict on a missing row seen in both rounds',
  },
  {
    id: 'fence-stale-epoch',
    guarantee: 'a router with a stale epoch can never write (§3, §5.4, §5.1)',
    file: 'lib/shard/schema.ts',
    from: 'if not found or not f.owned or f.epoch <> v_epoch then',
    to: 'if not found or not f.owned then',
    testFile: 'test/integration/fence.test.ts',
    testName: 'refuses a stale epoch with SC421 before any row changes',
    reinstall: PREPARE,
  },
  {
    id: 'fence-frozen',
    guarantee: 'a write refused during the fence never appears (§3, §5.3)',
    file: 'lib/shard/schema.ts',
    from: 'if f.frozen then',
    to: 'if false then',
    testFile: 'test/integration/fence.test.ts',
    testName: 'refuses writes to a frozen unit with SC423 while reads continue',
    reinstall: PREPARE,
  },
  {
    id: 'prepare-allow-unfenced',
    guarantee: 'a write without an epoch is refused unless configured otherwise (§3), as prepare sets it',
    file: 'lib/shard/prepare.ts',
    from: '[String(config.tenant.allowUnfencedWrites)],',
    to: "['false'],",
    testFile: 'test/integration/prepare.test.ts',
    testName: 'turns allowUnfencedWrites into the shard',
  },
  {
    id: 'lost-switch-takes-back',
    guarantee: "a switch that loses the directory compare-and-set takes the next owner's acceptance back (§5.1)",
    file: 'lib/cutover/live.ts',
    from: 'await takeBackAcceptance(env.nextPool, unit, newEpoch, freezeGen);',
    to: 'void newEpoch;',
    testFile: 'test/integration/cutover-lost-switch.test.ts',
    testName: 'takes back the next owner',
  },
  {
    id: 'delta-records-keys',
    guarantee: 'the stream records every key it writes after a validation, so the cutover compares each changed row under the fence (§5.2)',
    file: 'lib/cdc/applier.ts',
    from: 'await recordTouched(this.client, this.moveId, this.stream, this.touched, this.touchedCount > MAX_TRACKED_KEYS_PER_TRANSACTION);',
    to: 'void MAX_TRACKED_KEYS_PER_TRANSACTION;',
    testFile: 'test/integration/cutover-delta.test.ts',
    testName: 'a changed row that differs on the target aborts the cutover',
  },
  {
    id: 'delta-audit-checked',
    guarantee: "a write on the next owner behind the stream's back since the validation fails the cutover's delta comparison (§5.2)",
    file: 'lib/cutover/live.ts',
    from: 'if (written.count > 0)',
    to: 'if (written.count < 0)',
    testFile: 'test/integration/cutover-delta.test.ts',
    testName: 'caught by the write audit',
  },
  {
    id: 'delta-token-checked',
    guarantee: 'a delta restarted after the validation the move knows is never trusted: the cutover compares the whole unit (§5.2)',
    file: 'lib/cdc/delta.ts',
    from: "if (expect !== 'any' && m.rows[0].token !== expect.token) return { tracked: false, why: 'the delta was restarted after the comparison the move knows' };",
    to: 'void expect;',
    testFile: 'test/integration/cutover-delta.test.ts',
    testName: 'a delta restarted after the validation',
  },
  {
    id: 'accept-refuses-superseded',
    guarantee:
      "a superseded cutover attempt cannot overwrite (and so take back) the acceptance of the attempt that switches: the directory's owner takes the unit's writes (§5.1)",
    file: 'lib/shard/fence.ts',
    from: '(opts.acceptGen !== undefined && current?.epoch === next.epoch && current.acceptGen !== undefined && current.acceptGen > opts.acceptGen) ||',
    to: 'false ||',
    testFile: 'test/integration/cutover-lost-switch.test.ts',
    testName: 'a superseded attempt that accepted first',
  },
  {
    id: 'take-back-only-own',
    guarantee: 'a lost switch takes back only its own acceptance, never the one of the attempt switching now (§5.1)',
    file: 'lib/shard/fence.ts',
    from: '(opts.onlyAcceptGen !== undefined && !(current?.epoch === next.epoch && current.acceptGen === opts.onlyAcceptGen));',
    to: 'false;',
    testFile: 'test/integration/cutover-lost-switch.test.ts',
    testName: 'takes back only its own acceptance',
  },
  {
    id: 'directory-epoch-rises',
    guarantee: 'epochs only increase: a switch raises the epoch by one (§2, §5.4)',
    file: 'lib/directory/placements.ts',
    from: 'epoch = epoch + case when shard <> $5 then 1 else 0 end,',
    to: 'epoch = epoch,',
    testFile: 'test/integration/directory.test.ts',
    testName: 'raises the epoch by exactly one on a switch',
  },
  {
    id: 'directory-cas-epoch',
    guarantee: 'every placement change is a compare-and-set on the epoch too (§2)',
    file: 'lib/directory/placements.ts',
    from: 'where unit = $1 and shard = $2 and epoch = $3 and state = $4',
    to: 'where unit = $1 and shard = $2 and $3::bigint > 0 and state = $4',
    testFile: 'test/integration/directory.test.ts',
    testName: 'refuses a compare-and-set with a stale epoch and changes nothing',
  },
  {
    id: 'sequence-advance',
    guarantee: "after a move the next write on the new owner succeeds: sequences move past the unit's values (§5.9)",
    file: 'lib/shard/sequences.ts',
    from: 'then pg_catalog.setval($1::regclass, ($2::numeric + 1)::bigint, false)::text end as set_to',
    to: 'then null::text end as set_to',
    testFile: 'test/integration/sequences.test.ts',
    testName: 'advances each sequence past the unit values, so the next draw is max + 1',
  },
  {
    id: 'verify-lost-row',
    guarantee: 'verify names an acknowledged row lost on the owner (§5.2 evidence)',
    file: 'lib/loadgen/verify.ts',
    from: "report.missing.push({ ...base, expected, actual: 'absent' });",
    to: 'void base;',
    testFile: 'test/integration/loadgen.test.ts',
    testName: 'reports a lost acked row, a changed value',
  },
  {
    id: 'verify-unit-rows',
    guarantee: 'verify checks the whole unit: a lost seeded row or a stray row (§5.2, §5.7 evidence)',
    file: 'lib/loadgen/baseline.ts',
    from: "if (rest.rows !== want.rows) note(`${name}: ${rest.rows} rows outside loadgen's keys on ${shard}, the baseline had ${want.rows}`);",
    to: 'if (false) note(name);',
    testFile: 'test/integration/loadgen.test.ts',
    testName: 'checks the whole unit against a baseline',
  },
  {
    id: 'wait-for-predicate-errors',
    guarantee: 'a move test fails at once when the move ends in the wrong phase',
    file: 'test/helpers/move.ts',
    from: '      if (pred(current)) return current;',
    to: '      if ((() => { try { return pred(current); } catch { return false; } })()) return current;',
    testFile: 'test/unit/wait-for.test.ts',
    testName: 'fails at once with what the predicate throws',
  },
  {
    id: 'summary-unhandled-errors',
    guarantee: 'npm test never reads "0 failed" after an unhandled error',
    file: 'scripts/test-summary.ts',
    from: "for (const e of runEnd.unhandledErrors) problem(`${step.name}: unhandled error: ${e.message.split('\\n')[0]}`);",
    to: 'void runEnd.unhandledErrors;',
    testFile: 'test/unit/test-summary.test.ts',
    testName: 'each unhandled error counts as a failure even when every test passed',
  },
  {
    id: 'summary-missing-report',
    guarantee: 'npm test never reads "0 failed" for a vitest run that died without its report',
    file: 'scripts/test-summary.ts',
    from: 'problem(`${step.name}: vitest wrote no JSON report (exit ${step.exitCode}); the run died`);',
    to: '// (mutated: a missing report is ignored)',
    testFile: 'test/unit/test-summary.test.ts',
    testName: 'a run that wrote no JSON report counts as a failure',
  },
  {
    id: 'scatter-incomplete-refused',
    guarantee: 'a fleet read never returns an answer missing a shard as if it were whole (issue 11)',
    file: 'lib/router/router.ts',
    from: 'if (!result.complete && !plan.allowPartial) {',
    to: 'if (!result.complete && false) {',
    testFile: 'test/integration/scatter.test.ts',
    testName: 'refuses the read as incomplete, naming the slow shard (timeout) and the unreachable one',
  },
  {
    id: 'scatter-topk-pushdown',
    guarantee: 'an ordered top-k fetches at most k rows from each shard, not everything (issue 11)',
    file: 'lib/router/scatter.ts',
    from: "const limit = plan.limit === undefined ? '' : ` limit ${plan.limit}`;",
    to: "const limit = '';",
    testFile: 'test/integration/scatter.test.ts',
    testName: 'limit 25 equals the single-database reference, and no shard sent more than 25 rows',
  },
  {
    id: 'scatter-discard-session',
    guarantee: "nothing a fleet read's statement leaves in the session (an advisory lock) outlives the read on the pooled connection",
    file: 'lib/router/scatter.ts',
    from: "    await client.query('discard all');",
    to: '    // (mutated: the session is not discarded)',
    testFile: 'test/integration/scatter.test.ts',
    testName: 'leaves nothing of the statement in the pooled session',
  },
];
