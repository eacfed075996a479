// The demo tenant application's schema: what shardctl moves in the demo and most tests.
// Composite primary keys led by tenant_id; ids are client-generated uuids (never per-shard
// sequences, which would collide after a move). Installed like a user's schema, then
// `shards prepare` puts the fence on it.
export const DEMO_TABLES = ['accounts', 'documents', 'events', 'jobs'] as const;

export const DEMO_SCHEMA_SQL = `
create table if not exists public.accounts (
  tenant_id text not null,
  id uuid not null default gen_random_uuid(),
  name text not null,
  balance numeric(14,2) not null default 0,
  updated_at timestamptz not null default now(),
  primary key (tenant_id, id)
);
create table if not exists public.documents (
  tenant_id text not null,
  id uuid not null default gen_random_uuid(),
  account_id uuid,
  title text not null,
  body text,
  blob_key text,
  version int not null default 1,
  updated_at timestamptz not null default now(),
  primary key (tenant_id, id),
  foreign key (tenant_id, account_id) references public.accounts (tenant_id, id) on delete cascade
);
alter table public.documents alter column body set storage extended;
create table if not exists public.events (
  tenant_id text not null,
  id uuid not null default gen_random_uuid(),
  kind text not null,
  payload jsonb not null default '{}',
  at timestamptz not null default now(),
  primary key (tenant_id, id)
);
create table if not exists public.jobs (
  tenant_id text not null,
  id uuid not null default gen_random_uuid(),
  kind text not null,
  state text not null default 'queued' check (state in ('queued', 'running', 'done', 'failed')),
  run_at timestamptz not null default now(),
  attempts int not null default 0,
  payload jsonb not null default '{}',
  locked_by text,
  updated_at timestamptz not null default now(),
  primary key (tenant_id, id)
);
create index if not exists jobs_claim on public.jobs (tenant_id, state, run_at);
`;
