//! The audit log (MongoDB has one only in its Enterprise edition): one JSON line per
//! authentication, authorization failure, user or role change and DDL command, in the
//! shape of MongoDB's audit events (`atype`, `ts`, `remote`, `users`, `param`, `result`).
//! On with `audit_log = "<path>"`. Its size is bounded: past `audit_log_max_mb` the file
//! moves to `<path>.1` (replacing the previous one) and a new one starts, so the log
//! never takes more than twice that. Passwords never appear: user-management events
//! carry the user or role name only.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::PathBuf;

use bson::{doc, Bson, Document};

/// Commands recorded when they succeed, with MongoDB's event names.
const EVENTS: &[(&str, &str)] = &[
    ("createUser", "createUser"),
    ("updateUser", "updateUser"),
    ("dropUser", "dropUser"),
    ("dropAllUsersFromDatabase", "dropAllUsersFromDatabase"),
    ("grantRolesToUser", "grantRolesToUser"),
    ("revokeRolesFromUser", "revokeRolesFromUser"),
    ("createRole", "createRole"),
    ("updateRole", "updateRole"),
    ("dropRole", "dropRole"),
    ("grantPrivilegesToRole", "grantPrivilegesToRole"),
    ("revokePrivilegesFromRole", "revokePrivilegesFromRole"),
    ("create", "createCollection"),
    ("drop", "dropCollection"),
    ("dropDatabase", "dropDatabase"),
    ("renameCollection", "renameCollection"),
    ("createIndexes", "createIndex"),
    ("dropIndexes", "dropIndex"),
    ("collMod", "collMod"),
    ("shardCollection", "shardCollection"),
    ("enableSharding", "enableSharding"),
];

/// `Unauthorized`: a command refused by authorization.
const UNAUTHORIZED: i32 = wire::ErrorCode::Unauthorized as i32;

pub struct AuditLog {
    path: PathBuf,
    max_bytes: u64,
    sink: parking_lot::Mutex<Sink>,
}

struct Sink {
    file: File,
    written: u64,
}

/// Who did it: the connection's peer and authenticated user.
pub struct Actor<'a> {
    pub peer: &'a str,
    pub user: Option<(&'a str, &'a str)>,
}

impl AuditLog {
    /// Opens (appends to) the log at `path`; `None` when `path` is empty (off).
    pub fn open(path: &str, max_mb: u64) -> Result<Option<AuditLog>, String> {
        if path.is_empty() {
            return Ok(None);
        }
        let path = PathBuf::from(path);
        let file = append(&path)?;
        let written = file.metadata().map(|m| m.len()).unwrap_or(0);
        Ok(Some(AuditLog {
            path,
            max_bytes: max_mb.max(1) * 1024 * 1024,
            sink: parking_lot::Mutex::new(Sink { file, written }),
        }))
    }

    /// What a finished command would record, taken before the command consumes its
    /// document: its name, database and first argument (never the rest: `pwd`).
    pub fn param(name: &str, db: &str, cmd: &Document) -> Document {
        let arg = match cmd.get(name) {
            Some(Bson::String(s)) => Bson::String(s.chars().take(256).collect()),
            Some(v @ (Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_))) => v.clone(),
            _ => Bson::Null,
        };
        doc! {"command": name, "db": db, "arg": arg}
    }

    /// Records a finished command: an authorization failure of any command, or the
    /// success of a user, role or DDL command.
    pub fn command(&self, actor: &Actor, name: &str, param: Document, code: Option<i32>) {
        match code {
            Some(UNAUTHORIZED) => self.record("authCheck", actor, param, UNAUTHORIZED),
            Some(_) => {}
            None => {
                if let Some((_, atype)) = EVENTS.iter().find(|e| e.0 == name) {
                    self.record(atype, actor, param, 0);
                }
            }
        }
    }

    /// Records an authentication attempt (`result` 0 or `AuthenticationFailed`, 18).
    pub fn authentication(&self, actor: &Actor, user: &str, db: &str, mechanism: &str, ok: bool) {
        let param = doc! {"user": user.chars().take(128).collect::<String>(), "db": db, "mechanism": mechanism};
        self.record("authenticate", actor, param, if ok { 0 } else { 18 });
    }

    fn record(&self, atype: &str, actor: &Actor, param: Document, result: i32) {
        let users: Vec<Bson> = actor
            .user
            .map(|(user, db)| Bson::Document(doc! {"user": user, "db": db}))
            .into_iter()
            .collect();
        let event = doc! {
            "atype": atype,
            "ts": bson::DateTime::now(),
            "remote": actor.peer,
            "users": users,
            "param": param,
            "result": result,
        };
        let mut line = Bson::Document(event).into_relaxed_extjson().to_string();
        line.push('\n');
        self.write(line.as_bytes());
    }

    fn write(&self, line: &[u8]) {
        let mut sink = self.sink.lock();
        if sink.written + line.len() as u64 > self.max_bytes && sink.written > 0 {
            let mut rotated = self.path.clone().into_os_string();
            rotated.push(".1");
            // A failed rotation keeps appending: losing audit events is worse than a
            // file past its bound.
            if std::fs::rename(&self.path, &rotated).is_ok() {
                if let Ok(file) = append(&self.path) {
                    *sink = Sink { file, written: 0 };
                }
            }
        }
        match sink.file.write_all(line) {
            Ok(()) => sink.written += line.len() as u64,
            Err(e) => {
                tracing::error!(error = %e, path = %self.path.display(), "writing the audit log")
            }
        }
    }
}

fn append(path: &PathBuf) -> Result<File, String> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| format!("opening audit_log {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(path: &std::path::Path) -> Vec<serde_json::Value> {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    #[test]
    fn events_are_json_lines_and_the_file_stays_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let log = AuditLog::open(path.to_str().unwrap(), 1).unwrap().unwrap();
        let actor = Actor {
            peer: "127.0.0.1:5000",
            user: Some(("alice", "admin")),
        };
        let create = doc! {"createUser": "bob", "pwd": "hunter2", "roles": []};
        log.command(
            &actor,
            "createUser",
            AuditLog::param("createUser", "admin", &create),
            None,
        );
        log.command(
            &actor,
            "find",
            AuditLog::param("find", "app", &doc! {"find": "c"}),
            Some(13),
        );
        log.command(
            &actor,
            "find",
            AuditLog::param("find", "app", &doc! {"find": "c"}),
            None,
        );
        log.authentication(&actor, "bob", "admin", "SCRAM-SHA-256", false);
        let got = lines(&path);
        let kinds: Vec<(&str, i64)> = got
            .iter()
            .map(|l| (l["atype"].as_str().unwrap(), l["result"].as_i64().unwrap()))
            .collect();
        assert_eq!(
            kinds,
            [("createUser", 0), ("authCheck", 13), ("authenticate", 18)]
        );
        assert_eq!(got[0]["users"][0]["user"], "alice");
        assert_eq!(got[0]["param"]["arg"], "bob");
        assert!(!std::fs::read_to_string(&path).unwrap().contains("hunter2"));
        // Past the bound the file rotates: at most twice the bound on disk.
        for _ in 0..20_000 {
            log.authentication(&actor, "bob", "admin", "SCRAM-SHA-256", true);
        }
        let size = |p: &std::path::Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
        let rotated = dir.path().join("audit.log.1");
        assert!(size(&rotated) > 0);
        assert!(size(&path) <= 1024 * 1024 && size(&rotated) <= 1024 * 1024);
    }
}
