//! The authorization matrix: every built-in role against every operation of
//! `tests/authz-matrix.tsv`, one user per role on one cluster with authorization on.
//!
//! `allow` rows must succeed (never Unauthorized), `deny` rows must fail with exactly
//! Unauthorized (13), `known-gap` rows are printed and never fail. Every disagreement is
//! collected and reported at once. The table is parsed at run time and must name exactly
//! the roles and operations this file knows, every pair once, so the two cannot drift.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::time::Instant;

use bson::{doc, Bson, Document};
use mongodb::error::{ErrorKind, WriteFailure};
use mongodb::options::AuthMechanism;
use mongodb::Client;
use tests::TestCluster;

const TABLE: &str = include_str!("../authz-matrix.tsv");
const ROOT: (&str, &str) = ("root", "root-password");
const PASSWORD: &str = "matrix-password";
const UNAUTHORIZED: i32 = 13;

/// Each built-in role of the table and the database it is granted on.
const ROLES: &[(&str, &str)] = &[
    ("read", "app"),
    ("readWrite", "app"),
    ("dbAdmin", "app"),
    ("userAdmin", "app"),
    ("dbOwner", "app"),
    ("readAnyDatabase", "admin"),
    ("readWriteAnyDatabase", "admin"),
    ("dbAdminAnyDatabase", "admin"),
    ("userAdminAnyDatabase", "admin"),
    ("clusterMonitor", "admin"),
    ("clusterManager", "admin"),
    ("clusterAdmin", "admin"),
    ("root", "admin"),
];

/// Every operation the test can run, in the order it runs them for each role (each has
/// an arm in [`command`]).
const OPERATIONS: &[&str] = &[
    "find",
    "insert",
    "update",
    "delete",
    "findAndModify",
    "count",
    "distinct",
    "explain.find",
    "aggregate.$match",
    "aggregate.$lookup",
    "aggregate.$graphLookup",
    "aggregate.$unionWith",
    "aggregate.$facet.$lookup",
    "aggregate.$out",
    "aggregate.$merge",
    "aggregate.$lookup.admin.system.users",
    "create",
    "drop",
    "createIndexes",
    "dropIndexes",
    "listIndexes",
    "listCollections",
    "collStats",
    "dbStats",
    "renameCollection",
    "dropDatabase",
    "createUser",
    "dropUser",
    "usersInfo",
    "createRole",
    "grantRolesToUser",
    "find.config",
    "insert.config",
    "serverStatus",
    "listDatabases",
    "listDatabases.all",
    "currentOp",
    "currentOp.$ownOps",
    "killOp",
    "replSetGetStatus",
    "hostInfo",
    "getLog",
    "getCmdLineOpts",
];

/// Allowed operations that may fail after authorization passed, for a reason of the test
/// cluster's own: (operation, error code, why). Any other failure of an `allow` row is a
/// mismatch.
const TOLERATED: &[(&str, i32, &str)] = &[(
    "replSetGetStatus",
    76,
    "NoReplicationEnabled: the test cluster's shard is a single node without replication, \
     which answers as mongod without --replSet does, once the router has authorized the command",
)];

/// The concrete command for `op`, run as the role's user: the database and the command.
/// `tag` (the role's name) keeps what each role creates, drops or renames apart from what
/// the other roles do. `None` for an operation this test does not know.
fn command(op: &str, tag: &str) -> Option<(&'static str, Document)> {
    let agg = |pipeline: Bson| doc! {"aggregate": "c", "pipeline": pipeline, "cursor": {}};
    let lookup_other =
        || doc! {"$lookup": {"from": "other", "localField": "k", "foreignField": "k", "as": "o"}};
    Some(match op {
        "find" => ("app", doc! {"find": "c", "filter": {}}),
        "insert" => (
            "app",
            doc! {"insert": "c", "documents": [{"_id": format!("ins_{tag}"), "k": 9}]},
        ),
        "update" => (
            "app",
            doc! {"update": "c", "updates": [{"q": {"_id": 1}, "u": {"$inc": {"n": 1}}}]},
        ),
        "delete" => (
            "app",
            doc! {"delete": "c", "deletes": [{"q": {"_id": format!("del_{tag}")}, "limit": 1}]},
        ),
        "findAndModify" => (
            "app",
            doc! {"findAndModify": "c", "query": {"_id": 1}, "update": {"$inc": {"n": 1}}},
        ),
        "count" => ("app", doc! {"count": "c", "query": {}}),
        "distinct" => ("app", doc! {"distinct": "c", "key": "k"}),
        "explain.find" => ("app", doc! {"explain": {"find": "c", "filter": {"k": 1}}}),
        "aggregate.$match" => ("app", agg(bson::bson!([{"$match": {"k": 1}}]))),
        "aggregate.$lookup" => ("app", agg(bson::bson!([lookup_other()]))),
        "aggregate.$graphLookup" => (
            "app",
            agg(
                bson::bson!([{"$graphLookup": {"from": "other", "startWith": "$k", "connectFromField": "k", "connectToField": "k", "as": "o"}}]),
            ),
        ),
        "aggregate.$unionWith" => ("app", agg(bson::bson!([{"$unionWith": {"coll": "other"}}]))),
        "aggregate.$facet.$lookup" => (
            "app",
            agg(bson::bson!([{"$facet": {"f": [lookup_other()]}}])),
        ),
        "aggregate.$out" => ("app", agg(bson::bson!([{"$match": {}}, {"$out": "out"}]))),
        "aggregate.$merge" => ("app", agg(bson::bson!([{"$merge": {"into": "out"}}]))),
        "aggregate.$lookup.admin.system.users" => (
            "admin",
            doc! {"aggregate": 1, "pipeline": [{"$documents": [{}]}, {"$lookup": {"from": "system.users", "pipeline": [], "as": "u"}}], "cursor": {}},
        ),
        "create" => ("app", doc! {"create": format!("new_{tag}")}),
        "drop" => ("app", doc! {"drop": format!("drop_{tag}")}),
        "createIndexes" => (
            "app",
            doc! {"createIndexes": "c", "indexes": [{"key": {format!("ci_{tag}"): 1}, "name": format!("ci_{tag}")}]},
        ),
        "dropIndexes" => (
            "app",
            doc! {"dropIndexes": "c", "index": format!("di_{tag}")},
        ),
        "listIndexes" => ("app", doc! {"listIndexes": "c"}),
        "listCollections" => ("app", doc! {"listCollections": 1}),
        "collStats" => ("app", doc! {"collStats": "c"}),
        "dbStats" => ("app", doc! {"dbStats": 1}),
        "renameCollection" => (
            "admin",
            doc! {"renameCollection": format!("app.ren_{tag}"), "to": format!("app.renamed_{tag}")},
        ),
        "dropDatabase" => ("app", doc! {"dropDatabase": 1}),
        "createUser" => (
            "app",
            doc! {"createUser": format!("new_{tag}"), "pwd": PASSWORD, "roles": []},
        ),
        "dropUser" => ("app", doc! {"dropUser": format!("victim_{tag}")}),
        "usersInfo" => ("app", doc! {"usersInfo": 1}),
        "createRole" => (
            "app",
            doc! {"createRole": format!("role_{tag}"), "privileges": [], "roles": []},
        ),
        "grantRolesToUser" => (
            "app",
            doc! {"grantRolesToUser": format!("grantee_{tag}"), "roles": [{"role": "read", "db": "app"}]},
        ),
        "find.config" => ("config", doc! {"find": "chunks", "filter": {}}),
        "insert.config" => (
            "config",
            doc! {"insert": "matrix", "documents": [{"_id": format!("ins_{tag}")}]},
        ),
        "serverStatus" => ("admin", doc! {"serverStatus": 1}),
        "listDatabases" => ("admin", doc! {"listDatabases": 1}),
        "listDatabases.all" => (
            "admin",
            doc! {"listDatabases": 1, "authorizedDatabases": false},
        ),
        "currentOp" => ("admin", doc! {"currentOp": 1}),
        "currentOp.$ownOps" => ("admin", doc! {"currentOp": 1, "$ownOps": true}),
        // An operation id nothing in this test runs: no user kills its own operation here.
        "killOp" => ("admin", doc! {"killOp": 1, "op": 987_654_321}),
        "replSetGetStatus" => ("admin", doc! {"replSetGetStatus": 1}),
        "hostInfo" => ("admin", doc! {"hostInfo": 1}),
        "getLog" => ("admin", doc! {"getLog": "global"}),
        "getCmdLineOpts" => ("admin", doc! {"getCmdLineOpts": 1}),
        _ => return None,
    })
}

/// What root sets up before `op` runs for the role tagged `tag`: whatever the operation
/// drops, renames or deletes, so that an allowed one succeeds.
async fn prepare(root: &Client, op: &str, tag: &str) {
    let app = root.database("app");
    let setup = match op {
        "delete" => doc! {"insert": "c", "documents": [{"_id": format!("del_{tag}"), "k": 9}]},
        "drop" => doc! {"create": format!("drop_{tag}")},
        "dropIndexes" => {
            doc! {"createIndexes": "c", "indexes": [{"key": {format!("di_{tag}"): 1}, "name": format!("di_{tag}")}]}
        }
        "renameCollection" => {
            doc! {"insert": format!("ren_{tag}"), "documents": [{"_id": 1}]}
        }
        "dropUser" => doc! {"createUser": format!("victim_{tag}"), "pwd": PASSWORD, "roles": []},
        "grantRolesToUser" => {
            doc! {"createUser": format!("grantee_{tag}"), "pwd": PASSWORD, "roles": []}
        }
        _ => return,
    };
    run_as_root(&app, setup).await;
}

/// What root restores after `op` ran: a dropped `app` is seeded again.
async fn restore(root: &Client, op: &str) {
    if op == "dropDatabase" {
        seed(root).await;
    }
}

/// The shared fixtures: `app.c` and `app.other`, joined on `k`. Idempotent.
async fn seed(root: &Client) {
    let app = root.database("app");
    for (coll, docs) in [
        ("c", bson::bson!([{"_id": 1, "k": 1}, {"_id": 2, "k": 2}])),
        (
            "other",
            bson::bson!([{"_id": 1, "k": 1}, {"_id": 2, "k": 3}]),
        ),
    ] {
        for d in docs.as_array().unwrap() {
            let id = d.as_document().unwrap().get("_id").unwrap().clone();
            run_as_root(
                &app,
                doc! {"update": coll, "updates": [{"q": {"_id": id}, "u": d.clone(), "upsert": true}]},
            )
            .await;
        }
    }
}

async fn run_as_root(db: &mongodb::Database, cmd: Document) {
    let shown = cmd.to_string();
    match db.run_command(cmd).await {
        Ok(reply) if reply.contains_key("writeErrors") => {
            panic!("setup as root failed: {shown}: {reply}")
        }
        Ok(_) => {}
        Err(e) => panic!("setup as root failed: {shown}: {e}"),
    }
}

/// What a command did.
#[derive(Debug)]
enum Got {
    Ok,
    Failed { code: i32, message: String },
}

impl Got {
    fn unauthorized(&self) -> bool {
        matches!(self, Got::Failed { code, .. } if *code == UNAUTHORIZED)
    }

    fn outcome(&self) -> &'static str {
        match self {
            Got::Ok => "allow",
            _ if self.unauthorized() => "deny",
            Got::Failed { .. } => "error",
        }
    }
}

impl std::fmt::Display for Got {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Got::Ok => write!(f, "ok"),
            Got::Failed { code, message } => write!(f, "error {code}: {message}"),
        }
    }
}

async fn run(client: &Client, db: &str, cmd: Document) -> Got {
    match client.database(db).run_command(cmd).await {
        // Write commands report a refused or failed write inside an ok reply.
        Ok(reply) => match reply
            .get_array("writeErrors")
            .ok()
            .and_then(|e| e.first())
            .and_then(Bson::as_document)
            .or_else(|| reply.get_document("writeConcernError").ok())
        {
            Some(e) => Got::Failed {
                code: e.get_i32("code").unwrap_or(-1),
                message: e.get_str("errmsg").unwrap_or_default().to_string(),
            },
            None => Got::Ok,
        },
        Err(e) => {
            let (code, message) = match e.kind.as_ref() {
                ErrorKind::Command(c) => (c.code, c.message.clone()),
                ErrorKind::Write(WriteFailure::WriteError(w)) => (w.code, w.message.clone()),
                ErrorKind::Write(WriteFailure::WriteConcernError(w)) => (w.code, w.message.clone()),
                _ => (-1, e.to_string()),
            };
            Got::Failed { code, message }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expected {
    Allow,
    Deny,
    /// Bulwark differs from MongoDB, whose outcome is this.
    KnownGap {
        mongodb_allows: bool,
    },
}

#[derive(Debug)]
struct Row {
    line: usize,
    expected: Expected,
    note: String,
}

/// The table by (role, operation), or every problem found in it.
fn parse(table: &str) -> Result<BTreeMap<(String, String), Row>, Vec<String>> {
    let roles: BTreeSet<&str> = ROLES.iter().map(|r| r.0).collect();
    let ops: BTreeSet<&str> = OPERATIONS.iter().copied().collect();
    let mut rows = BTreeMap::new();
    let mut problems = Vec::new();
    for (i, text) in table.lines().enumerate() {
        let line = i + 1;
        if text.trim().is_empty() || text.starts_with('#') {
            continue;
        }
        let cols: Vec<&str> = text.split('\t').collect();
        if cols.len() < 3 || cols.len() > 4 {
            problems.push(format!(
                "line {line}: expected role, operation, expected[, note] separated by tabs: {text:?}"
            ));
            continue;
        }
        let (role, op, note) = (cols[0], cols[1], cols.get(3).copied().unwrap_or(""));
        if !roles.contains(role) {
            problems.push(format!("line {line}: unknown role {role:?}"));
        }
        if !ops.contains(op) {
            problems.push(format!(
                "line {line}: operation {op:?} is unknown to tests/tests/authz_matrix.rs"
            ));
        }
        let expected = match cols[2] {
            "allow" => Expected::Allow,
            "deny" => Expected::Deny,
            "known-gap" => match note.split_whitespace().next() {
                Some("allow") => Expected::KnownGap {
                    mongodb_allows: true,
                },
                Some("deny") => Expected::KnownGap {
                    mongodb_allows: false,
                },
                _ => {
                    problems.push(format!(
                        "line {line}: a known-gap row's note must start with MongoDB's outcome, allow or deny"
                    ));
                    continue;
                }
            },
            other => {
                problems.push(format!(
                    "line {line}: expected must be allow, deny or known-gap, not {other:?}"
                ));
                continue;
            }
        };
        let row = Row {
            line,
            expected,
            note: note.to_string(),
        };
        if let Some(first) = rows.insert((role.to_string(), op.to_string()), row) {
            problems.push(format!(
                "line {line}: {role} / {op} already has a row (line {})",
                first.line
            ));
        }
    }
    for (role, _) in ROLES {
        for op in OPERATIONS {
            if !rows.contains_key(&(role.to_string(), op.to_string())) {
                problems.push(format!("no row for role {role}, operation {op}"));
            }
        }
    }
    for (op, _, _) in TOLERATED {
        if !OPERATIONS.contains(op) {
            problems.push(format!("TOLERATED names {op}, which is no operation"));
        }
    }
    for op in OPERATIONS {
        if command(op, "x").is_none() {
            problems.push(format!("operation {op} has no command in the test"));
        }
    }
    if problems.is_empty() {
        Ok(rows)
    } else {
        Err(problems)
    }
}

fn table() -> BTreeMap<(String, String), Row> {
    parse(TABLE).unwrap_or_else(|problems| {
        panic!(
            "tests/authz-matrix.tsv does not match the test:\n  {}",
            problems.join("\n  ")
        )
    })
}

/// Written to the real stderr, past the test harness's capture: a passing run still shows
/// its known gaps.
fn report(text: &str) {
    let _ = std::io::stderr().write_all(text.as_bytes());
}

#[test]
fn table_names_every_pair_once_and_only_known_operations() {
    let rows = table();
    assert_eq!(rows.len(), ROLES.len() * OPERATIONS.len());
    // The checks themselves: an unknown operation, a missing pair and a duplicate are all
    // reported.
    let broken = "read\tfind\tallow\nread\tfind\tdeny\nread\tfly\tallow\nroot\tfind\tknown-gap\n";
    let problems = parse(broken).unwrap_err().join("\n");
    for want in [
        "already has a row",
        "operation \"fly\" is unknown",
        "no row for role readWrite, operation find",
        "known-gap row's note must start",
    ] {
        assert!(problems.contains(want), "{want} in:\n{problems}");
    }
}

#[tokio::test]
async fn every_builtin_role_against_every_operation() {
    let rows = table();
    let started = Instant::now();
    let c = TestCluster::builder()
        .auth()
        .admin(ROOT.0, ROOT.1)
        .memory()
        .start()
        .await;
    let root = c
        .client_as(ROOT.0, ROOT.1, "admin", AuthMechanism::ScramSha256)
        .await;
    seed(&root).await;
    let mut mismatches = Vec::new();
    let mut gaps = Vec::new();
    for (role, db) in ROLES {
        let user = format!("matrix_{role}");
        run_as_root(
            &root.database("admin"),
            doc! {"createUser": &user, "pwd": PASSWORD, "roles": [{"role": *role, "db": *db}]},
        )
        .await;
        let client = c
            .client_as(&user, PASSWORD, "admin", AuthMechanism::ScramSha256)
            .await;
        for op in OPERATIONS {
            let row = &rows[&(role.to_string(), op.to_string())];
            let (cmd_db, cmd) = command(op, role).expect("checked by parse");
            prepare(&root, op, role).await;
            let got = run(&client, cmd_db, cmd).await;
            restore(&root, op).await;
            let ok = match row.expected {
                Expected::Allow => match &got {
                    Got::Ok => true,
                    Got::Failed { code, .. } => {
                        TOLERATED.iter().any(|t| t.0 == *op && t.1 == *code)
                    }
                },
                Expected::Deny => got.unauthorized(),
                Expected::KnownGap { mongodb_allows } => {
                    let mongodb = if mongodb_allows { "allow" } else { "deny" };
                    let state = if got.outcome() == mongodb {
                        "now agrees with MongoDB: make the row allow/deny"
                    } else {
                        "still differs"
                    };
                    let evidence = row.note.split_once(' ').map_or("", |(_, e)| e);
                    gaps.push(format!(
                        "  {role:<22} {op:<38} MongoDB {mongodb}, got {got} ({state}); line {}: {evidence}",
                        row.line
                    ));
                    true
                }
            };
            if !ok {
                let expected = match row.expected {
                    Expected::Allow => "allow",
                    _ => "deny",
                };
                mismatches.push(format!(
                    "  {role:<22} {op:<38} expected {expected:<5} got {got} (line {})",
                    row.line
                ));
            }
        }
    }
    let mut summary = format!(
        "authz matrix: {} roles x {} operations = {} rows checked in {:.1?}, {} mismatches, {} known gaps\n",
        ROLES.len(),
        OPERATIONS.len(),
        rows.len(),
        started.elapsed(),
        mismatches.len(),
        gaps.len()
    );
    if !gaps.is_empty() {
        summary += &format!("known gaps (not failing):\n{}\n", gaps.join("\n"));
    }
    report(&summary);
    assert!(
        mismatches.is_empty(),
        "{} of {} rows of tests/authz-matrix.tsv disagree (role, operation, expected, got):\n{}",
        mismatches.len(),
        rows.len(),
        mismatches.join("\n")
    );
}
