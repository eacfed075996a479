// What an operator sees of a move in the Temporal Web UI, on the real dev stack: the move's static
// summary and details (tenant, source → target, who started it), its current details (phase,
// progress, what it waits for, the blocked reason), activity summaries, the pending activity's
// heartbeat saying what it is doing — and, in headless Chromium driven by playwright-core, the
// dev server's UI listing `ShardctlBlockedReason IS NOT NULL`, opening the blocked move and
// showing its summary and blocked reason (screenshot: test-results/webui-blocked-move.png).
// Only the browser test is skipped, saying so, when no Chromium is installed (scripts/ensure-deps.sh).
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import fs from 'node:fs';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { workflowMetadataQuery } from '@temporalio/workflow';
import { defaultPayloadConverter } from '@temporalio/common';
import { testConfig, closePools } from '../helpers/stack';
import * as H from '../helpers/move';
import * as M from '../../workflows/messages';
import { projectRoot } from '../../lib/config';
import { moveWorkflowId } from '../../lib/ids';
import { isTerminal } from '../../workflows/phases';

/** A Chromium binary: SHARDCTL_CHROMIUM, else Debian's `chromium` (or `chromium-browser`) on PATH. */
function findChromium(): string | undefined {
  for (const c of [process.env.SHARDCTL_CHROMIUM, 'chromium', 'chromium-browser']) {
    if (!c) continue;
    if (path.isAbsolute(c)) {
      if (fs.existsSync(c)) return c;
      continue;
    }
    const r = spawnSync('sh', ['-c', `command -v ${c}`], { encoding: 'utf8' });
    if (r.status === 0 && r.stdout.trim()) return r.stdout.trim();
  }
  return undefined;
}
const chromium = findChromium();
const NO_CHROMIUM =
  'no Chromium found (SHARDCTL_CHROMIUM, `chromium`, `chromium-browser`): `npm test` installs it as root with apt-get; otherwise run `sudo apt-get install --no-install-recommends -y chromium`';
if (!chromium) console.warn(`webui browser test skipped: ${NO_CHROMIUM}`);

const op = { actor: 'sre-webui' };
let env: Awaited<ReturnType<typeof H.moveEnv>>;

beforeAll(async () => {
  env = await H.moveEnv('webui');
});
afterAll(async () => {
  await env?.close();
  await closePools();
});

const summaryOf = (p: unknown) => (p ? (defaultPayloadConverter.fromPayload(p as never) as string) : undefined);

/** A move of a fresh tenant that stops before its cutover, waiting for approval: blocked, with a reason. */
async function blockedMove(prefix: string) {
  const tenant = await H.newTenant('shard-a', prefix);
  await H.seed(tenant, 120, 1);
  const h = await H.startMove(env.t.client, env.tq, H.moveInput(tenant, 'shard-b', { approveCutover: 'manual', requestedBy: 'alice' }), { source: 'shard-a' });
  const s = await H.waitFor(h, (x) => x.awaitingApproval, 150_000);
  return { tenant, h, s };
}

describe('Temporal Web UI: what a move shows', () => {
  it('a blocked move carries its summary, details, current details (waiting for, blocked reason) and activity summaries', { timeout: 240_000 }, async () => {
    const { tenant, h, s } = await blockedMove('wm');
    try {
      expect(s.blockedReason).toMatch(/approval/);
      const d = await h.describe();
      expect(await d.staticSummary()).toBe(`move ${tenant}: shard-a → shard-b, started by alice`);
      const details = (await d.staticDetails()) ?? '';
      expect(details).toContain(`**tenant** ${tenant}`);
      expect(details).toContain('**started by** alice');
      expect(details).toContain('**cutover approval** manual');
      // Names only: no DSN, password or key of the stack's config in what the UI shows.
      const config = testConfig();
      for (const secret of [config.directory.dsn, ...config.shards.map((x) => x.dsn)]) expect(details).not.toContain(secret);

      const meta = await h.query(workflowMetadataQuery);
      const current = meta.currentDetails ?? '';
      expect(current).toContain('**phase** fence');
      expect(current).toContain('**route** shard-a → shard-b');
      expect(current).toMatch(/\*\*copy\*\* \d+\/\d+ rows 100%/);
      expect(current).toContain(`**waiting for** operator approval of the cutover: \`shardctl move approve ${tenant}\``);
      expect(current).toContain(`**blocked** ${s.blockedReason}`);

      const summaries: string[] = [];
      for (const e of (await h.fetchHistory()).events ?? []) {
        if (e.activityTaskScheduledEventAttributes)
          summaries.push(summaryOf(e.userMetadata?.summary) ?? `(none: ${e.activityTaskScheduledEventAttributes.activityType?.name})`);
      }
      expect(summaries).toContain(`plan: preflight checks for ${tenant} → shard-b`);
      expect(summaries).toContain('copy table public.accounts');
      expect(summaries).toContain('catch-up forward');
      expect(summaries).toContain('validate every row and blob, both directions');
      expect(summaries.filter((x) => x.startsWith('(none'))).toEqual([]);
    } finally {
      await h.executeUpdate(M.cancelUpdate, { args: [op] });
      await H.waitPhase(h, 'cancelled', 120_000);
    }
  });

  it("the pending table copy's heartbeat says which table it copies and how far it got", { timeout: 240_000 }, async () => {
    const tenant = await H.newTenant('shard-a', 'wh');
    await H.seed(tenant, 600, 1);
    // Throttled so the copy is still running when we look, with batches (each beats its progress)
    // further apart than the one-second timer beats between them.
    const h = await H.startMove(env.t.client, env.tq, H.moveInput(tenant, 'shard-b', { rowsPerSecond: 8, copyBatchRows: 40 }), { source: 'shard-a' });
    try {
      await H.waitFor(h, (x) => x.phase === 'copy', 120_000);
      // What the server holds as the pending copy's last heartbeat, looked at every 2 s for 30 s
      // (the SDK sends the latest beat every few seconds): a timer beat must not wipe the last batch's words.
      const looks: unknown[] = [];
      for (let i = 0; i < 15; i++) {
        const pending = (await h.describe()).raw.pendingActivities ?? [];
        const copy = pending.find((a) => a.activityType?.name === 'copyTable');
        // A copy of the next table that has not heartbeated yet has nothing to say: not counted.
        if (copy?.lastHeartbeatTime) {
          const beat = copy.heartbeatDetails?.payloads?.[0];
          looks.push(beat ? defaultPayloadConverter.fromPayload(beat as never) : '(no heartbeat details)');
        }
        await new Promise((r) => setTimeout(r, 2000));
      }
      expect(looks.length).toBeGreaterThanOrEqual(5);
      for (const v of looks) expect(v).toMatchObject({ doing: expect.stringMatching(/^copy table public\.\w+ shard-a → shard-b$/) });
      const progressed = looks.filter((v: any) => typeof v.rowsCopied === 'number' && v.rowsCopied > 0 && /^public\./.test(v.table));
      expect(progressed.length, JSON.stringify(looks)).toBeGreaterThanOrEqual(2);
      // Once a table's copy said how far it got, every later look at it says so too, never less.
      const last = new Map<string, number>();
      for (const v of looks as { doing: string; rowsCopied?: number }[]) {
        const before = last.get(v.doing);
        if (before !== undefined) expect(v.rowsCopied, JSON.stringify(looks)).toBeGreaterThanOrEqual(before);
        if (typeof v.rowsCopied === 'number') last.set(v.doing, v.rowsCopied);
      }
    } finally {
      // Cancelled while it copies; on a stack slow enough for the copy to have finished, it ends done.
      await h.executeUpdate(M.cancelUpdate, { args: [op] }).catch(() => undefined);
      await H.waitFor(h, (x) => isTerminal(x.phase), 120_000);
    }
  });
});

describe.skipIf(!chromium)(`Temporal Web UI in a browser${chromium ? '' : ` (skipped: ${NO_CHROMIUM})`}`, () => {
  it('lists ShardctlBlockedReason IS NOT NULL, opens the blocked move and shows its summary and blocked reason', { timeout: 300_000 }, async () => {
    const { chromium: pw } = await import('playwright-core');
    const config = testConfig();
    const ui = config.temporal.uiUrl;
    expect(ui, 'temporal.uiUrl in the stack config').toBeTruthy();
    const { tenant, h, s } = await blockedMove('wb');
    const browser = await pw.launch({
      executablePath: chromium,
      headless: true,
      args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking'],
    });
    const shot = path.join(projectRoot(), 'test-results', 'webui-blocked-move.png');
    try {
      const page = await browser.newPage({ viewport: { width: 1600, height: 1400 } });
      const query = 'ShardctlBlockedReason IS NOT NULL';
      await page.goto(`${ui}/namespaces/${config.temporal.namespace}/workflows?query=${encodeURIComponent(query)}`);
      // The list is filtered by the query; visibility may lag the upsert by a moment: reload until listed.
      const link = page.getByRole('link', { name: moveWorkflowId(tenant), exact: true }).first();
      for (let i = 0; i < 8; i++) {
        if (
          await link.waitFor({ state: 'visible', timeout: 5000 }).then(
            () => true,
            () => false,
          )
        )
          break;
        await page.reload();
      }
      // The list is the query's: the UI keeps it in the URL it shows.
      expect(decodeURIComponent(page.url().replace(/\+/g, ' '))).toContain(query);
      await link.click({ timeout: 30_000 });
      await page.waitForURL(/\/workflows\/move-/, { timeout: 30_000 });
      // The page's text, with the markdown the UI renders in sandboxed iframes (summary, details).
      const text = async () => {
        const parts = [await page.locator('main').innerText()];
        for (const f of page.frames())
          if (f !== page.mainFrame())
            parts.push(
              await f
                .locator('body')
                .innerText()
                .catch(() => ''),
            );
        return parts.join('\n');
      };
      // The page opens on its timeline, where each activity shows its summary.
      await expect.poll(text, { timeout: 30_000, interval: 1000 }).toContain('copy table public.accounts');
      // UI 2.5x: the static summary and details and the current details are on "User Metadata".
      await page
        .getByRole('link', { name: 'User Metadata' })
        .or(page.getByRole('tab', { name: 'User Metadata' }))
        .first()
        .click();
      const summary = `move ${tenant}: shard-a → shard-b, started by alice`;
      await expect.poll(text, { timeout: 30_000, interval: 1000 }).toContain(summary);
      // The blocked reason, from the current details the workflow set (read by the UI's metadata query).
      await expect.poll(text, { timeout: 30_000, interval: 1000 }).toContain(s.blockedReason);
      fs.mkdirSync(path.dirname(shot), { recursive: true });
      await page.screenshot({ path: shot, fullPage: true });
      // And as the search attribute the list was filtered by.
      await page
        .getByRole('link', { name: 'Search Attributes' })
        .or(page.getByRole('tab', { name: 'Search Attributes' }))
        .first()
        .click();
      await expect.poll(text, { timeout: 30_000, interval: 1000 }).toContain('ShardctlBlockedReason');
      expect(await text()).toContain(s.blockedReason);
      await page.screenshot({ path: shot.replace(/\.png$/, '-search-attributes.png'), fullPage: true });
      expect(fs.statSync(shot).size).toBeGreaterThan(10_000);
    } finally {
      if (!fs.existsSync(shot)) {
        const pages = browser.contexts().flatMap((c) => c.pages());
        if (pages[0]) await pages[0].screenshot({ path: shot.replace(/\.png$/, '-failed.png'), fullPage: true }).catch(() => undefined);
      }
      await browser.close();
      await h.executeUpdate(M.cancelUpdate, { args: [op] });
      await H.waitPhase(h, 'cancelled', 120_000);
    }
  });
});
