//! Whether this shard is the primary shard of a database (the shard holding its unsharded
//! collections), as far as `movePrimary` has told it.
//!
//! Routers attach the version of the database they routed with (`databaseVersion:
//! {lastMod}`, from `config.databases`) to every command they send to a database's primary
//! shard. A shard that a `movePrimary` moved the database away from, or to at a newer
//! version, refuses such commands with `StaleDbVersion` (249), and the router reads the
//! database's primary again. While the move copies the data (its critical section) the
//! donor refuses writes the same way, marked `critical`, and routers wait.
//!
//! A shard no move ever involved has no placement and serves every command, so a cluster
//! that never ran `movePrimary` pays one relaxed load of a flag nobody writes.

use bson::{doc, Bson, Document};
use wire::{ErrorCode, MongoError, MongoResult};

/// What a `movePrimary` left on this shard for one database. Stored in the catalog table
/// (under the database's name, which has no dot, so no namespace collides) and replicated
/// with it, so a new primary member knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DbPlacement {
    /// This shard is the database's primary shard.
    pub primary: bool,
    /// The database version (`config.databases.version.lastMod`) this holds from.
    pub last_mod: i64,
    /// A move out of this shard is copying the database: writes wait.
    pub critical: bool,
}

impl DbPlacement {
    pub fn to_document(self, db: &str) -> Document {
        doc! {
            "kind": "database", "db": db, "primary": self.primary,
            "lastMod": self.last_mod, "critical": self.critical,
        }
    }

    /// The placement in a catalog entry, or `None` when the entry is a collection's.
    pub fn from_document(d: &Document) -> MongoResult<Option<(String, DbPlacement)>> {
        if d.get_str("kind") != Ok("database") {
            return Ok(None);
        }
        let corrupt = || MongoError::internal("corrupt database placement in the catalog");
        let db = d.get_str("db").map_err(|_| corrupt())?.to_string();
        Ok(Some((
            db,
            DbPlacement {
                primary: d.get_bool("primary").map_err(|_| corrupt())?,
                last_mod: d.get_i64("lastMod").map_err(|_| corrupt())?,
                critical: d.get_bool("critical").unwrap_or(false),
            },
        )))
    }
}

/// The database version a router attached (`databaseVersion: {lastMod}`), if any.
pub fn received(cmd: &Document) -> MongoResult<Option<i64>> {
    match cmd.get("databaseVersion") {
        None => Ok(None),
        Some(Bson::Document(d)) => match d.get("lastMod") {
            Some(Bson::Int64(n)) => Ok(Some(*n)),
            Some(Bson::Int32(n)) => Ok(Some(i64::from(*n))),
            _ => Err(MongoError::type_mismatch(
                "databaseVersion.lastMod must be an integer",
            )),
        },
        Some(_) => Err(MongoError::type_mismatch(
            "databaseVersion must be an object",
        )),
    }
}

/// Runs a command routed to `db`'s primary shard at version `received` only if this shard
/// is that primary at that version or newer (or the database left it at an older one),
/// and, for a write, no move out is copying.
pub fn check(
    db: &str,
    placement: Option<DbPlacement>,
    received: i64,
    writes: bool,
) -> MongoResult<()> {
    let Some(p) = placement else {
        return Ok(());
    };
    // A shard the database left at `last_mod` (or where it was dropped at it) is primary
    // again only for a newer version: one a move here, or a new database, began.
    let current = if p.primary {
        received >= p.last_mod
    } else {
        received > p.last_mod
    };
    let critical = writes && p.critical;
    if current && !critical {
        return Ok(());
    }
    let mut info = doc! {
        "db": db,
        "vReceived": {"lastMod": received},
        "vWanted": if p.primary { Bson::Document(doc! {"lastMod": p.last_mod}) } else { Bson::Null },
    };
    if critical {
        info.insert("critical", true);
    }
    let why = if critical {
        "its primary shard is moving: writes wait until the move is done"
    } else if p.primary {
        "the router's version of its primary shard is older than this shard's"
    } else {
        "this shard is no longer its primary shard"
    };
    Err(
        MongoError::new(ErrorCode::StaleDbVersion, format!("database {db}: {why}"))
            .with_extra(doc! {"errInfo": info}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(r: MongoResult<()>) -> Option<i32> {
        r.err().map(|e| e.code)
    }

    #[test]
    fn a_shard_refuses_what_it_no_longer_owns_and_writes_while_moving() {
        let stale = Some(ErrorCode::StaleDbVersion as i32);
        // Never involved in a move: everything runs.
        assert_eq!(code(check("d", None, 1, true)), None);
        let here = DbPlacement {
            primary: true,
            last_mod: 3,
            critical: false,
        };
        assert_eq!(code(check("d", Some(here), 3, true)), None);
        assert_eq!(code(check("d", Some(here), 4, false)), None);
        // A router that still routes by an older version is sent to read it again.
        assert_eq!(code(check("d", Some(here), 2, false)), stale);
        let gone = DbPlacement {
            primary: false,
            ..here
        };
        assert_eq!(code(check("d", Some(gone), 3, false)), stale);
        assert_eq!(code(check("d", Some(gone), 2, false)), stale);
        // A database of the same name created after a drop, at a newer version.
        assert_eq!(code(check("d", Some(gone), 9, false)), None);
        let moving = DbPlacement {
            critical: true,
            ..here
        };
        assert_eq!(code(check("d", Some(moving), 3, false)), None);
        let e = check("d", Some(moving), 3, true).unwrap_err();
        assert_eq!(e.code, ErrorCode::StaleDbVersion as i32);
        let info = e.extra.unwrap();
        assert_eq!(
            info.get_document("errInfo").unwrap().get_bool("critical"),
            Ok(true)
        );
    }

    #[test]
    fn a_placement_survives_the_catalog_and_collections_are_not_placements() {
        let p = DbPlacement {
            primary: false,
            last_mod: 7,
            critical: true,
        };
        let read = DbPlacement::from_document(&p.to_document("sales")).unwrap();
        assert_eq!(read, Some(("sales".to_string(), p)));
        assert_eq!(
            DbPlacement::from_document(&doc! {"db": "sales", "name": "c"}).unwrap(),
            None
        );
        assert_eq!(received(&doc! {"find": "c"}).unwrap(), None);
        assert_eq!(
            received(&doc! {"find": "c", "databaseVersion": {"lastMod": 4_i64}}).unwrap(),
            Some(4)
        );
        assert!(received(&doc! {"find": "c", "databaseVersion": 4}).is_err());
    }
}
