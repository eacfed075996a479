// The demo tenant application's schema: what shardctl moves in the demo and most tests.
// Composite primary keys led by tenant_id; ids are client-generated uuids (never per-shard
// sequences, which would collide after a move). Installed like a user's schema, then
// `shards prepare` puts the fence on it.
import { createIndexOnce, setStorageOnce } from '../shard/ddl-once';

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
${setStorageOnce('public.documents', 'body', 'extended')}
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
  state text not null default 'queued' constraint jobs_state_check check (state in ('queued', 'running', 'done', 'failed', 'dead')),
  run_at timestamptz not null default now(),
  attempts int not null default 0,
  payload jsonb not null default '{}',
  locked_by text,
  updated_at timestamptz not null default now(),
  last_error text,
  primary key (tenant_id, id)
);
-- Tables created before the dead-letter state: altered once (no lock taken when already current).
do $$
begin
  if exists (select 1 from pg_catalog.pg_constraint where conrelid = 'public.jobs'::regclass and conname = 'jobs_state_check'
              and pg_catalog.pg_get_constraintdef(oid) not like '%dead%') then
    alter table public.jobs drop constraint jobs_state_check,
      add constraint jobs_state_check check (state in ('queued', 'running', 'done', 'failed', 'dead'));
  end if;
  if not exists (select 1 from pg_catalog.pg_attribute where attrelid = 'public.jobs'::regclass and attname = 'last_error' and not attisdropped) then
    alter table public.jobs add column last_error text;
  end if;
end $$;
${createIndexOnce('public', 'jobs_claim', 'public.jobs (tenant_id, state, run_at)')}
`;
