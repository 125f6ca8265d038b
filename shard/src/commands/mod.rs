//! The shard's command table: one command per file, registered here with its metadata.

use bson::Document;
use wire::MongoResult;

use crate::node::Ctx;

mod abort_transaction;
mod aggregate;
mod aggregate_output;
mod apply_moved;
pub mod args;
mod begin_move;
mod coll_mod;
mod coll_stats;
mod commit_transaction;
mod count;
mod create;
mod create_indexes;
mod critical_section;
mod current_op;
mod db_hash;
mod db_placement;
mod db_stats;
mod decide_transaction;
mod delete;
mod delete_if_unchanged;
mod delete_range;
mod distinct;
mod drop;
mod drop_database;
mod drop_indexes;
mod end_move;
mod explain;
mod find;
mod find_and_modify;
mod get_more;
mod hello;
pub mod insert;
mod kill_cursors;
mod kill_op;
mod list_collections;
mod list_databases;
mod list_indexes;
mod list_prepared_transactions;
mod merge_sessions;
mod move_clone;
mod move_log;
mod move_mods;
mod move_sessions;
mod pending_moves;
mod prepare_transaction;
mod prune_transaction_decisions;
mod range_readers;
mod reach_time;
mod rename_collection;
mod repl_set_freeze;
mod repl_set_get_status;
mod repl_set_step_down;
mod repl_set_step_up;
mod resolve_prepared_transaction;
mod server_status;
mod set_ownership;
mod sleep;
mod split_points;
pub mod transaction_statement;
mod unsupported;
pub mod update;
mod validate;

pub type Handler = fn(&Ctx, &Document) -> MongoResult<Document>;

/// Commands that end prepared transactions, or find those to end. Reads that meet a
/// prepared transaction wait holding their tickets, so these never queue for one: behind
/// such readers they would wait for the readers' limits before releasing them.
pub const RESOLVES_PREPARED: &[&str] = &[
    "commitTransaction",
    "abortTransaction",
    "decideTransaction",
    "resolvePreparedTransaction",
    "listPreparedTransactions",
];

pub struct CommandSpec {
    pub name: &'static str,
    pub run: Handler,
    /// Writes data or metadata (replication and admission treat these differently).
    pub writes: bool,
    /// Runs on any replica-set member whatever its state (replica-set administration).
    pub anywhere: bool,
}

const COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: "currentOp",
        run: current_op::run,
        writes: false,
        anywhere: true,
    },
    CommandSpec {
        name: "killOp",
        run: kill_op::run,
        writes: false,
        anywhere: true,
    },
    CommandSpec {
        name: "serverStatus",
        run: server_status::run,
        writes: false,
        anywhere: true,
    },
    CommandSpec {
        name: "sleep",
        run: sleep::run,
        writes: false,
        anywhere: false,
    },
    CommandSpec {
        name: "hello",
        run: hello::run,
        writes: false,
        anywhere: true,
    },
    CommandSpec {
        name: "replSetGetStatus",
        run: repl_set_get_status::run,
        writes: false,
        anywhere: true,
    },
    CommandSpec {
        name: "replSetStepDown",
        run: repl_set_step_down::run,
        writes: false,
        anywhere: true,
    },
    CommandSpec {
        name: "replSetFreeze",
        run: repl_set_freeze::run,
        writes: false,
        anywhere: true,
    },
    CommandSpec {
        name: "replSetStepUp",
        run: repl_set_step_up::run,
        writes: false,
        anywhere: true,
    },
    CommandSpec {
        name: "insert",
        run: insert::run,
        writes: true,
        anywhere: false,
    },
    CommandSpec {
        name: "update",
        run: update::run,
        writes: true,
        anywhere: false,
    },
    CommandSpec {
        name: "delete",
        run: delete::run,
        writes: true,
        anywhere: false,
    },
    CommandSpec {
        name: "findAndModify",
        run: find_and_modify::run,
        writes: true,
        anywhere: false,
    },
    CommandSpec {
        name: "findandmodify",
        run: find_and_modify::run,
        writes: true,
        anywhere: false,
    },
    CommandSpec {
        name: "commitTransaction",
        run: commit_transaction::run,
        writes: true,
        anywhere: false,
    },
    CommandSpec {
        name: "abortTransaction",
        run: abort_transaction::run,
        writes: true,
        anywhere: false,
    },
    CommandSpec {
        name: "prepareTransaction",
        run: prepare_transaction::run,
        writes: true,
        anywhere: false,
    },
    CommandSpec {
        name: "decideTransaction",
        run: decide_transaction::run,
        writes: true,
        anywhere: false,
    },
    CommandSpec {
        name: "resolvePreparedTransaction",
        run: resolve_prepared_transaction::run,
        writes: true,
        anywhere: false,
    },
    CommandSpec {
        name: "pruneTransactionDecisions",
        run: prune_transaction_decisions::run,
        writes: true,
        anywhere: false,
    },
    CommandSpec {
        name: "listPreparedTransactions",
        run: list_prepared_transactions::run,
        writes: false,
        anywhere: false,
    },
    CommandSpec {
        name: "find",
        run: find::run,
        writes: false,
        anywhere: false,
    },
    CommandSpec {
        name: "getMore",
        run: get_more::run,
        writes: false,
        anywhere: false,
    },
    CommandSpec {
        name: "killCursors",
        run: kill_cursors::run,
        writes: false,
        anywhere: false,
    },
    CommandSpec {
        name: "count",
        run: count::run,
        writes: false,
        anywhere: false,
    },
    CommandSpec {
        name: "distinct",
        run: distinct::run,
        writes: false,
        anywhere: false,
    },
    CommandSpec {
        name: "aggregate",
        run: aggregate::run,
        writes: false,
        anywhere: false,
    },
    CommandSpec {
        name: "explain",
        run: explain::run,
        writes: false,
        anywhere: false,
    },
    CommandSpec {
        name: "create",
        run: create::run,
        writes: true,
        anywhere: false,
    },
    CommandSpec {
        name: "_shardsvrReachTime",
        run: reach_time::run,
        writes: true,
        anywhere: false,
    },
    CommandSpec {
        name: "collMod",
        run: coll_mod::run,
        writes: true,
        anywhere: false,
    },
    CommandSpec {
        name: "drop",
        run: drop::run,
        writes: true,
        anywhere: false,
    },
    CommandSpec {
        name: "dropDatabase",
        run: drop_database::run,
        writes: true,
        anywhere: false,
    },
    CommandSpec {
        name: "renameCollection",
        run: rename_collection::run,
        writes: true,
        anywhere: false,
    },
    CommandSpec {
        name: "listCollections",
        run: list_collections::run,
        writes: false,
        anywhere: false,
    },
    CommandSpec {
        name: "listDatabases",
        run: list_databases::run,
        writes: false,
        anywhere: false,
    },
    CommandSpec {
        name: "createIndexes",
        run: create_indexes::run,
        writes: true,
        anywhere: false,
    },
    CommandSpec {
        name: "listIndexes",
        run: list_indexes::run,
        writes: false,
        anywhere: false,
    },
    CommandSpec {
        name: "dropIndexes",
        run: drop_indexes::run,
        writes: true,
        anywhere: false,
    },
    CommandSpec {
        name: "deleteIndexes",
        run: drop_indexes::run,
        writes: true,
        anywhere: false,
    },
    CommandSpec {
        name: "collStats",
        run: coll_stats::run,
        writes: false,
        anywhere: false,
    },
    CommandSpec {
        name: "dbStats",
        run: db_stats::run,
        writes: false,
        anywhere: false,
    },
    CommandSpec {
        name: "dbHash",
        run: db_hash::run,
        writes: false,
        anywhere: false,
    },
    CommandSpec {
        name: "validate",
        run: validate::run,
        writes: false,
        anywhere: false,
    },
    CommandSpec {
        name: "_shardsvrSetOwnership",
        run: set_ownership::run,
        writes: true,
        anywhere: false,
    },
    CommandSpec {
        name: "_shardsvrCriticalSection",
        run: critical_section::run,
        writes: true,
        anywhere: false,
    },
    CommandSpec {
        name: "_shardsvrDeleteIfUnchanged",
        run: delete_if_unchanged::run,
        writes: true,
        anywhere: false,
    },
    CommandSpec {
        name: "_shardsvrDbPlacement",
        run: db_placement::run,
        writes: true,
        anywhere: false,
    },
    CommandSpec {
        name: "_shardsvrMoveLog",
        run: move_log::run,
        writes: true,
        anywhere: false,
    },
    CommandSpec {
        name: "_shardsvrMoveClone",
        run: move_clone::run,
        writes: true,
        anywhere: false,
    },
    CommandSpec {
        name: "_shardsvrMoveMods",
        run: move_mods::run,
        writes: true,
        anywhere: false,
    },
    CommandSpec {
        name: "_shardsvrApplyMoved",
        run: apply_moved::run,
        writes: true,
        anywhere: false,
    },
    CommandSpec {
        name: "_shardsvrDeleteRange",
        run: delete_range::run,
        writes: true,
        anywhere: false,
    },
    CommandSpec {
        name: "_shardsvrBeginMove",
        run: begin_move::run,
        writes: true,
        anywhere: false,
    },
    CommandSpec {
        name: "_shardsvrEndMove",
        run: end_move::run,
        writes: true,
        anywhere: false,
    },
    CommandSpec {
        name: "_shardsvrPendingMoves",
        run: pending_moves::run,
        writes: false,
        anywhere: false,
    },
    CommandSpec {
        name: "_shardsvrRangeReaders",
        run: range_readers::run,
        writes: false,
        anywhere: true,
    },
    CommandSpec {
        name: "_shardsvrSplitPoints",
        run: split_points::run,
        writes: true,
        anywhere: false,
    },
    CommandSpec {
        name: "_shardsvrMoveSessions",
        run: move_sessions::run,
        writes: true,
        anywhere: false,
    },
    CommandSpec {
        name: "_shardsvrMergeSessions",
        run: merge_sessions::run,
        writes: true,
        anywhere: false,
    },
];

pub fn lookup(name: &str) -> Option<&'static CommandSpec> {
    COMMANDS.iter().find(|c| c.name == name)
}

pub fn names() -> impl Iterator<Item = &'static str> {
    COMMANDS.iter().map(|c| c.name)
}
