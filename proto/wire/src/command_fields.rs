//! The top-level fields each command takes, as MongoDB's IDL parser knows them: a field
//! that is neither one of the command's nor a generic argument is refused with 40415
//! ("BSON field 'find.fitler' is an unknown field."), never ignored. An ignored misspelt
//! `fitler` would run the command over the whole collection.
//!
//! Only commands MongoDB parses strictly are listed; the others (`collStats`, `dbStats`,
//! `validate`, `dbHash`, administration commands) take any field there too.

use bson::Document;

use crate::{ErrorCode, MongoError, MongoResult};

/// The field of a transaction's first reply on a shard that names the time the
/// transaction reads at there: a router reads the transaction's other shards at the same
/// time, and removes the field before the client sees the reply.
pub const TXN_READ_TIME: &str = "$txnReadTime";

/// Arguments every command takes (MongoDB's generic arguments, stable and unstable).
const GENERIC: &[&str] = &[
    "apiVersion",
    "apiStrict",
    "apiDeprecationErrors",
    "$db",
    "maxTimeMS",
    "readConcern",
    "writeConcern",
    "lsid",
    "clientOperationKey",
    "txnNumber",
    "autocommit",
    "startTransaction",
    "stmtId",
    "comment",
    "$readPreference",
    "$clusterTime",
    "$audit",
    "$client",
    "$configServerState",
    "allowImplicitCollectionCreation",
    "$oplogQueryData",
    "$queryOptions",
    "$replData",
    "databaseVersion",
    "shardVersion",
    "tracking_info",
    "coordinator",
    "maxTimeMSOpOnly",
    "$configTime",
    "$topologyTime",
    "txnRetryCounter",
    "mayBypassWriteBlocking",
    "$tenant",
    "expectPrefix",
];

/// Fields of every write command (`insert`, `update`, `delete`).
const WRITE_BASE: &[&str] = &[
    "ordered",
    "bypassDocumentValidation",
    "stmtIds",
    "isTimeseriesNamespace",
    "collectionUUID",
    "encryptionInformation",
];

const FIND: &[&str] = &[
    "filter",
    "projection",
    "sort",
    "hint",
    "collation",
    "skip",
    "limit",
    "batchSize",
    "ntoreturn",
    "singleBatch",
    "allowDiskUse",
    "min",
    "max",
    "returnKey",
    "showRecordId",
    "tailable",
    "oplogReplay",
    "noCursorTimeout",
    "awaitData",
    "allowPartialResults",
    "let",
    "options",
    "term",
    "readOnce",
    "allowSpeculativeMajorityRead",
    "$_requestResumeToken",
    "$_resumeAfter",
    "runtimeConstants",
    "collectionUUID",
];

const AGGREGATE: &[&str] = &[
    "pipeline",
    "explain",
    "allowDiskUse",
    "cursor",
    "bypassDocumentValidation",
    "collation",
    "hint",
    "let",
    "needsMerge",
    "fromMongos",
    "fromRouter",
    "$_requestReshardingResumeToken",
    "isMapReduceCommand",
    "collectionUUID",
    "exchange",
    "runtimeConstants",
    "encryptionInformation",
    "$_generateV2ResumeTokens",
    "$_passthroughToShard",
];

const FIND_AND_MODIFY: &[&str] = &[
    "query",
    "fields",
    "sort",
    "hint",
    "collation",
    "arrayFilters",
    "remove",
    "update",
    "new",
    "upsert",
    "bypassDocumentValidation",
    "let",
    "runtimeConstants",
    "encryptionInformation",
    "isTimeseriesNamespace",
];

const COUNT: &[&str] = &[
    "query",
    "limit",
    "skip",
    "hint",
    "collation",
    "fields",
    "encryptionInformation",
    "mirrored",
    "sampleId",
];

const DISTINCT: &[&str] = &["key", "query", "collation", "hint", "mirrored", "sampleId"];

const CREATE: &[&str] = &[
    "capped",
    "autoIndexId",
    "idIndex",
    "size",
    "max",
    "storageEngine",
    "validator",
    "validationLevel",
    "validationAction",
    "indexOptionDefaults",
    "viewOn",
    "pipeline",
    "collation",
    "timeseries",
    "clusteredIndex",
    "recordPreImages",
    "changeStreamPreAndPostImages",
    "expireAfterSeconds",
    "encryptedFields",
    "temp",
    "flags",
];

const CREATE_INDEXES: &[&str] = &[
    "indexes",
    "commitQuorum",
    "ignoreUnknownIndexOptions",
    "isTimeseriesNamespace",
    "collectionUUID",
    "returnOnStart",
];

const DROP_INDEXES: &[&str] = &["index", "collectionUUID", "isTimeseriesNamespace"];

const LIST_INDEXES: &[&str] = &[
    "cursor",
    "collectionUUID",
    "includeBuildUUIDs",
    "includeIndexBuildInfo",
    "isTimeseriesNamespace",
];

/// Each strictly parsed command with its own fields (besides its name and the generic
/// arguments).
const STRICT: &[(&str, &[&str])] = &[
    ("find", FIND),
    ("aggregate", AGGREGATE),
    ("insert", &["documents"]),
    ("update", &["updates", "let", "runtimeConstants"]),
    ("delete", &["deletes", "let", "runtimeConstants"]),
    ("findAndModify", FIND_AND_MODIFY),
    ("findandmodify", FIND_AND_MODIFY),
    ("count", COUNT),
    ("distinct", DISTINCT),
    (
        "getMore",
        &[
            "collection",
            "batchSize",
            "term",
            "lastKnownCommittedOpTime",
            "includeQueryStatsMetrics",
        ],
    ),
    ("killCursors", &["cursors"]),
    ("create", CREATE),
    ("drop", &["collectionUUID"]),
    ("dropDatabase", &[]),
    ("createIndexes", CREATE_INDEXES),
    ("dropIndexes", DROP_INDEXES),
    ("deleteIndexes", DROP_INDEXES),
    ("listIndexes", LIST_INDEXES),
    (
        "listCollections",
        &[
            "filter",
            "nameOnly",
            "authorizedCollections",
            "cursor",
            "includePendingDrops",
        ],
    ),
    (
        "listDatabases",
        &["filter", "nameOnly", "authorizedDatabases"],
    ),
    (
        "renameCollection",
        &["to", "dropTarget", "stayTemp", "collectionUUID"],
    ),
    ("explain", &["verbosity"]),
];

/// Whether `field` is a generic argument, which any command may carry.
pub fn is_generic(field: &str) -> bool {
    GENERIC.contains(&field)
}

/// Refuses a field of a strictly parsed command that MongoDB does not know, with 40415
/// and MongoDB's message; commands not parsed strictly pass. The command `explain`
/// wraps is checked too.
pub fn check(name: &str, cmd: &Document) -> MongoResult<()> {
    if name == "explain" {
        if let Some((inner, bson::Bson::Document(d))) = cmd.iter().next() {
            if let Some(inner_name) = d.keys().next().filter(|_| inner == "explain") {
                check(inner_name, d)?;
            }
        }
    }
    let Some((_, own)) = STRICT.iter().find(|(n, _)| *n == name) else {
        return Ok(());
    };
    let write_base = matches!(name, "insert" | "update" | "delete");
    let known = |k: &str| {
        k == name
            || own.contains(&k)
            || GENERIC.contains(&k)
            || (write_base && WRITE_BASE.contains(&k))
    };
    match cmd.keys().find(|k| !known(k)) {
        None => Ok(()),
        Some(k) => Err(MongoError::new(
            ErrorCode::UnknownField,
            format!("BSON field '{name}.{k}' is an unknown field."),
        )),
    }
}

#[cfg(test)]
mod tests {
    use bson::doc;

    use super::*;

    fn code(name: &str, cmd: Document) -> Option<i32> {
        check(name, &cmd).err().map(|e| e.code)
    }

    #[test]
    fn a_misspelt_field_is_refused() {
        assert_eq!(
            code("find", doc! {"find": "c", "fitler": {"a": 1}}),
            Some(40415)
        );
        let e = check(
            "update",
            &doc! {"update": "c", "updates": [], "upsert": true},
        )
        .unwrap_err();
        assert_eq!(e.message, "BSON field 'update.upsert' is an unknown field.");
    }

    #[test]
    fn driver_fields_pass() {
        let cmd = doc! {
            "insert": "c", "documents": [], "ordered": true, "lsid": {}, "txnNumber": 1i64,
            "$clusterTime": {}, "$db": "d", "writeConcern": {"w": "majority"},
            "$readPreference": {"mode": "primary"}, "apiVersion": "1", "comment": "x",
        };
        assert_eq!(code("insert", cmd), None);
        assert_eq!(
            code(
                "find",
                doc! {"find": "c", "filter": {}, "maxTimeMS": 5, "let": {}}
            ),
            None
        );
    }

    #[test]
    fn write_base_fields_belong_to_writes_only() {
        assert_eq!(
            code("find", doc! {"find": "c", "ordered": true}),
            Some(40415)
        );
        assert_eq!(code("delete", doc! {"delete": "c", "ordered": true}), None);
    }

    #[test]
    fn the_command_explain_wraps_is_checked() {
        let cmd = doc! {"explain": {"find": "c", "fitler": {}}, "verbosity": "queryPlanner"};
        assert_eq!(code("explain", cmd), Some(40415));
    }

    #[test]
    fn commands_mongodb_parses_loosely_pass() {
        assert_eq!(
            code("collStats", doc! {"collStats": "c", "anything": 1}),
            None
        );
    }
}
