/*
 * shardctl_fence: the shard's write gate (DESIGN.md §3) in C, an optional twin of the plpgsql
 * functions in lib/shard/fence-sql.ts. `shards prepare` installs it when the configuration names
 * the library (`fence.library`); otherwise the plpgsql fence is used. Same protocol, same errors:
 *
 *  - shardctl.open_unit_write(unit, epoch), a procedure (SECURITY DEFINER: the fence read runs as
 *    the schema's owner): sets shardctl.unit / shardctl.epoch for the transaction, takes the
 *    unit's advisory lock shared, reads the fence (read committed: a fresh snapshot after the
 *    lock; repeatable read / serializable: FOR SHARE, which fails with 40001 if the fence changed
 *    after the snapshot), refuses with SC421 / SC423 / SC428, and marks the transaction checked.
 *  - shardctl.checked_unit(), IMMUTABLE on purpose (the fence triggers' WHEN folds it once per
 *    statement): the checked unit if this transaction holds a mark; otherwise the whole check
 *    (shardctl.check_unrouted_write(), plpgsql, which marks through shardctl.native_mark).
 *  - shardctl.native_mark(unit): marks the transaction; EXECUTE revoked from PUBLIC, called only by
 *    the owner's SECURITY DEFINER checks.
 *
 * The mark lives in this backend's memory, not in a setting or a sequence: no SQL can set it but
 * the checks above (native_mark refuses anyone but the schema's owner, whatever the grants), so it
 * needs no proof. It holds for the local transaction that set it and only while the lock taken
 * with it is held: the lock is taken for the (sub)transaction, never for the portal running the
 * statement; rolling back the subtransaction that set it (which releases that lock) clears it, and
 * committing that subtransaction hands it to the parent, as the lock is. Any end of the top
 * transaction (commit, abort, prepare) clears it. And each statement that uses it takes the lock
 * again (only counted when held) and compares the fence generation with the one its check read,
 * so a fence change that took no unit lock (TRUNCATE) makes the statement run the whole check.
 *
 * A session's repeated check of the same unit at the same epoch skips the fence read (read
 * committed only) when the fence generation (shardctl.fence_gen, advanced by a trigger on every
 * fence row change after taking the unit's lock exclusively) is the one an earlier check of this
 * session read before its read passed, the sequence itself unchanged (its OID): no fence row has
 * changed since.
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_collation.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "nodes/pg_list.h"
#include "parser/parse_func.h"
#include "storage/proc.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/resowner.h"
#include "catalog/pg_namespace.h"
#include "utils/fmgrprotos.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"

PG_MODULE_MAGIC;

#define FENCE_LOCK_CLASS 421
#define SC421 MAKE_SQLSTATE('S', 'C', '4', '2', '1')
#define SC423 MAKE_SQLSTATE('S', 'C', '4', '2', '3')
#define SC428 MAKE_SQLSTATE('S', 'C', '4', '2', '8')

/* The transaction's mark. */
static bool mark_valid = false;
static LocalTransactionId mark_lxid = InvalidLocalTransactionId;
static int mark_level = 0;
static char *mark_unit = NULL;
static int64 mark_gen = 0;   /* the fence generation read under the lock by the check that set the mark */
static Oid mark_gen_seq = InvalidOid;

/* What this session's last passing read committed check read: unit, epoch, generation, and the generation sequence. */
static bool seen_valid = false;
static char *seen_unit = NULL;
static int64 seen_epoch = 0;
static int64 seen_gen = 0;
static Oid seen_gen_seq = InvalidOid;

/* The fence read, planned once per session (read committed; for share). */
static SPIPlanPtr read_plan = NULL;
static SPIPlanPtr read_for_share_plan = NULL;

static bool callbacks_registered = false;

static Oid gen_sequence(void);
static int64 gen_value(Oid seq);

static void
set_str(char **slot, const char *value)
{
	char *copy = MemoryContextStrdup(TopMemoryContext, value);

	if (*slot)
		pfree(*slot);
	*slot = copy;
}

static void
xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PREPARE:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_PARALLEL_ABORT:
			mark_valid = false;
			break;
		default:
			break;
	}
}

static void
subxact_callback(SubXactEvent event, SubTransactionId mySubid, SubTransactionId parentSubid, void *arg)
{
	int level;

	if (!mark_valid)
		return;
	level = GetCurrentTransactionNestLevel();
	if (event == SUBXACT_EVENT_ABORT_SUB && level <= mark_level)
		mark_valid = false; /* the lock taken with the mark is released */
	else if (event == SUBXACT_EVENT_COMMIT_SUB && level == mark_level)
		mark_level = level - 1; /* the lock goes to the parent, and so does the mark */
}

static void
ensure_callbacks(void)
{
	if (callbacks_registered)
		return;
	RegisterXactCallback(xact_callback, NULL);
	RegisterSubXactCallback(subxact_callback, NULL);
	callbacks_registered = true;
}

/* This backend's local transaction id (PostgreSQL 17 moved it into MyProc->vxid). */
#if PG_VERSION_NUM >= 170000
#define CURRENT_LXID (MyProc->vxid.lxid)
#else
#define CURRENT_LXID (MyProc->lxid)
#endif

static void
mark(const char *unit, int64 gen, Oid gen_seq)
{
	ensure_callbacks();
	set_str(&mark_unit, unit);
	mark_gen = gen;
	mark_gen_seq = gen_seq;
	mark_lxid = CURRENT_LXID;
	mark_level = GetCurrentTransactionNestLevel();
	mark_valid = true;
}


static bool
marked(void)
{
	return mark_valid && mark_lxid == CURRENT_LXID;
}

static Oid
gen_sequence(void)
{
	Oid nsp = get_namespace_oid("shardctl", false);
	Oid seq = get_relname_relid("fence_gen", nsp);

	if (!OidIsValid(seq))
		ereport(ERROR, (errmsg("shardctl: sequence shardctl.fence_gen is missing: run shards prepare")));
	return seq;
}

static int64
gen_value(Oid seq)
{
	LOCAL_FCINFO(fc, 1);
	Datum d;

	InitFunctionCallInfoData(*fc, NULL, 1, InvalidOid, NULL, NULL);
	fc->args[0].value = ObjectIdGetDatum(seq);
	fc->args[0].isnull = false;
	d = pg_sequence_last_value(fc);
	return fc->isnull ? 0 : DatumGetInt64(d);
}

/*
 * The unit's advisory lock, shared, held by the (sub)transaction, not by whatever portal runs
 * the statement: a lock taken while a cursor's portal is current would belong to that portal, and
 * a failed fetch of it inside a savepoint would release the lock when the savepoint rolls back
 * while the transaction's mark stays (found in review). Taking it again when held only counts it.
 */
static void
lock_unit_shared(text *unit)
{
	int32 hash = DatumGetInt32(DirectFunctionCall1Coll(hashtext, DEFAULT_COLLATION_OID, PointerGetDatum(unit)));
	ResourceOwner saved = CurrentResourceOwner;

	CurrentResourceOwner = CurTransactionResourceOwner;
	PG_TRY();
	{
		(void) DirectFunctionCall2(pg_advisory_xact_lock_shared_int4, Int32GetDatum(FENCE_LOCK_CLASS), Int32GetDatum(hash));
	}
	PG_FINALLY();
	{
		CurrentResourceOwner = saved;
	}
	PG_END_TRY();
}

static SPIPlanPtr
fence_plan(bool for_share)
{
	SPIPlanPtr *slot = for_share ? &read_for_share_plan : &read_plan;

	if (*slot == NULL)
	{
		Oid types[1] = {TEXTOID};
		const char *sql = for_share
			? "select f.epoch, f.owned, f.frozen and (f.frozen_until is null or f.frozen_until operator(pg_catalog.>) pg_catalog.now())"
			  " from shardctl.fence f where f.unit operator(pg_catalog.=) $1 for share"
			: "select f.epoch, f.owned, f.frozen and (f.frozen_until is null or f.frozen_until operator(pg_catalog.>) pg_catalog.now())"
			  " from shardctl.fence f where f.unit operator(pg_catalog.=) $1";
		SPIPlanPtr plan = SPI_prepare(sql, 1, types);

		if (plan == NULL)
			elog(ERROR, "shardctl: cannot plan the fence read: %s", SPI_result_code_string(SPI_result));
		if (SPI_keepplan(plan) != 0)
			elog(ERROR, "shardctl: cannot keep the fence read's plan");
		*slot = plan;
	}
	return *slot;
}

/* The fence read and its refusals (SC421, SC423). */
static void
read_fence(text *unit, const char *unit_str, int64 epoch, bool for_share)
{
	Datum args[1];
	int rc;

	args[0] = PointerGetDatum(unit);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "shardctl: SPI_connect failed");
	rc = SPI_execute_plan(fence_plan(for_share), args, NULL, false, 1);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "shardctl: the fence read failed: %s", SPI_result_code_string(rc));
	if (SPI_processed == 0)
		ereport(ERROR, (errcode(SC421), errmsg("shardctl: stale route for unit %s at epoch " INT64_FORMAT " (shard has no fence)", unit_str, epoch)));
	else
	{
		HeapTuple row = SPI_tuptable->vals[0];
		TupleDesc desc = SPI_tuptable->tupdesc;
		bool isnull;
		int64 f_epoch = DatumGetInt64(SPI_getbinval(row, desc, 1, &isnull));
		bool epoch_null = isnull;
		bool owned = DatumGetBool(SPI_getbinval(row, desc, 2, &isnull));
		bool owned_null = isnull;
		bool frozen = DatumGetBool(SPI_getbinval(row, desc, 3, &isnull));
		bool frozen_null = isnull;

		/* As the plpgsql check: a NULL owned or epoch is not a pass. */
		if (owned_null || !owned)
			ereport(ERROR, (errcode(SC421), errmsg("shardctl: stale route for unit %s at epoch " INT64_FORMAT " (shard has no ownership)", unit_str, epoch)));
		if (epoch_null || f_epoch != epoch)
			ereport(ERROR, (errcode(SC421), errmsg("shardctl: stale route for unit %s at epoch " INT64_FORMAT " (shard has epoch %s)", unit_str, epoch,
															epoch_null ? "NULL" : psprintf(INT64_FORMAT, f_epoch))));
		if (!frozen_null && frozen)
			ereport(ERROR, (errcode(SC423), errmsg("shardctl: unit %s is frozen for cutover", unit_str)));
	}
	SPI_finish();
}

static void
set_local(const char *name, const char *value)
{
	(void) set_config_option(name, value, PGC_USERSET, PGC_S_SESSION, GUC_ACTION_LOCAL, true, 0, false);
}

PG_FUNCTION_INFO_V1(shardctl_open_unit_write);
Datum
shardctl_open_unit_write(PG_FUNCTION_ARGS)
{
	text *unit;
	char *unit_str;
	int64 epoch;
	char epoch_str[32];
	Oid seq;
	int64 gen;
	bool rc;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1) || VARSIZE_ANY_EXHDR(PG_GETARG_TEXT_PP(0)) == 0)
		ereport(ERROR, (errcode(SC428), errmsg("shardctl: a write transaction needs a unit and an epoch, got %s and %s",
											   PG_ARGISNULL(0) ? "<NULL>" : text_to_cstring(PG_GETARG_TEXT_PP(0)),
											   PG_ARGISNULL(1) ? "<NULL>" : psprintf(INT64_FORMAT, PG_GETARG_INT64(1)))));
	unit = PG_GETARG_TEXT_PP(0);
	unit_str = text_to_cstring(unit);
	epoch = PG_GETARG_INT64(1);
	snprintf(epoch_str, sizeof(epoch_str), INT64_FORMAT, epoch);
	set_local("shardctl.unit", unit_str);
	set_local("shardctl.epoch", epoch_str);

	lock_unit_shared(unit);
	seq = gen_sequence();
	gen = gen_value(seq);
	rc = XactIsoLevel == XACT_READ_COMMITTED;
	if (!(rc && seen_valid && seen_gen_seq == seq && seen_gen == gen && seen_epoch == epoch && strcmp(seen_unit, unit_str) == 0))
	{
		read_fence(unit, unit_str, epoch, !rc);
		if (rc)
		{
			set_str(&seen_unit, unit_str);
			seen_epoch = epoch;
			seen_gen = gen;
			seen_gen_seq = seq;
			seen_valid = true;
		}
	}
	mark(unit_str, gen, seq);
	set_local("shardctl.checked", unit_str);
	PG_RETURN_VOID();
}

/*
 * Marks the transaction for a unit the caller has just checked (the plpgsql checks, as the
 * schema's owner: SECURITY DEFINER). Refused to anyone else whatever their grants (EXECUTE is
 * revoked from PUBLIC, but `grant execute on all routines in schema shardctl` would give it
 * back). Takes the unit's lock for the transaction itself, and reads the generation under it.
 */
PG_FUNCTION_INFO_V1(shardctl_native_mark);
Datum
shardctl_native_mark(PG_FUNCTION_ARGS)
{
	text *unit = PG_GETARG_TEXT_PP(0);
	Oid nsp = get_namespace_oid("shardctl", false);
	Oid seq;

#if PG_VERSION_NUM >= 160000
	if (!object_ownercheck(NamespaceRelationId, nsp, GetUserId()))
#else
	if (!pg_namespace_ownercheck(nsp, GetUserId()))
#endif
		ereport(ERROR, (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
						errmsg("shardctl: only the fence's own checks may mark a transaction (run as the owner of schema shardctl)")));
	lock_unit_shared(unit);
	seq = gen_sequence();
	mark(text_to_cstring(unit), gen_value(seq), seq);
	PG_RETURN_VOID();
}

PG_FUNCTION_INFO_V1(shardctl_checked_unit);
Datum
shardctl_checked_unit(PG_FUNCTION_ARGS)
{
	Oid fn;
	FmgrInfo flinfo;
	LOCAL_FCINFO(fc, 0);
	Datum result;

	if (marked())
	{
		/*
		 * The mark counts while its lock is the transaction's (taken again: only counted when held)
		 * and no fence row has changed since the check read the generation under it: a change that
		 * took no unit lock (TRUNCATE), or any way the lock was lost, makes the statement run the
		 * whole check, as the plpgsql twin does.
		 */
		text *unit = cstring_to_text(mark_unit);
		Oid seq;

		lock_unit_shared(unit);
		seq = gen_sequence();
		if (seq == mark_gen_seq && gen_value(seq) == mark_gen)
			PG_RETURN_TEXT_P(unit);
		mark_valid = false;
	}
	/* No mark: the whole check, in a volatile function of its own (its fence read takes a fresh snapshot). */
	fn = LookupFuncName(list_make2(makeString("shardctl"), makeString("check_unrouted_write")), 0, NULL, false);
	fmgr_info(fn, &flinfo);
	InitFunctionCallInfoData(*fc, &flinfo, 0, InvalidOid, NULL, NULL);
	result = FunctionCallInvoke(fc);
	if (fc->isnull)
		PG_RETURN_NULL();
	PG_RETURN_DATUM(result);
}

/* Whether this transaction holds a mark (for tests and `shards list`): the unit, or NULL. */
PG_FUNCTION_INFO_V1(shardctl_native_marked_unit);
Datum
shardctl_native_marked_unit(PG_FUNCTION_ARGS)
{
	if (!marked())
		PG_RETURN_NULL();
	PG_RETURN_TEXT_P(cstring_to_text(mark_unit));
}
