//! MongoDB's rules for database and collection names, checked where a name enters the
//! router (`$db`, a command's collection) and again where the shard turns one into a
//! table. A name that breaks them is `InvalidNamespace` (73): a dotted `$db` would
//! otherwise name another database's collection (`$db: "admin.system"` with
//! `find: "users"` is `admin.system.users`).

use crate::error::{ErrorCode, MongoError, MongoResult};

/// MongoDB's longest database name.
pub const MAX_DB_NAME_BYTES: usize = 63;
/// MongoDB's longest `db.collection`.
pub const MAX_NAMESPACE_BYTES: usize = 255;

fn invalid(message: String) -> MongoError {
    MongoError::new(ErrorCode::InvalidNamespace, message)
}

/// A database name: non-empty, at most 63 bytes, none of `/\. "$` or NUL.
pub fn check_db(db: &str) -> MongoResult<()> {
    if db.is_empty() {
        return Err(invalid("Invalid empty database name".into()));
    }
    if db.len() > MAX_DB_NAME_BYTES {
        return Err(invalid(format!(
            "db name is too long: '{}...' is more than {MAX_DB_NAME_BYTES} bytes",
            printable(db)
        )));
    }
    if db.contains(['/', '\\', '.', ' ', '"', '$', '\0']) {
        return Err(invalid(format!(
            "Invalid database name: '{}'",
            printable(db)
        )));
    }
    Ok(())
}

/// A collection name: non-empty, no `$` or NUL, not starting with a dot.
pub fn check_collection(coll: &str) -> MongoResult<()> {
    if coll.is_empty() {
        return Err(invalid("Invalid empty namespace specified".into()));
    }
    if coll.contains(['$', '\0']) || coll.starts_with('.') {
        return Err(invalid(format!(
            "Invalid collection name: {}",
            printable(coll)
        )));
    }
    Ok(())
}

/// `db.coll` as a whole: both names valid and the namespace at most 255 bytes.
pub fn check(db: &str, coll: &str) -> MongoResult<()> {
    check_db(db)?;
    check_collection(coll)?;
    if db.len() + 1 + coll.len() > MAX_NAMESPACE_BYTES {
        return Err(invalid(format!(
            "Fully qualified namespace is too long. Namespace: {}.{} Max: {MAX_NAMESPACE_BYTES}",
            printable(db),
            printable(coll)
        )));
    }
    Ok(())
}

/// A name for an error message: bounded, so a hostile name cannot make a huge reply.
fn printable(name: &str) -> String {
    name.chars().take(128).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn databases() {
        for ok in ["a", "test", "admin", "x-y_z", &"d".repeat(63)] {
            assert!(check_db(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "admin.system",
            "a/b",
            "a\\b",
            "a b",
            "a\"b",
            "a$b",
            "a\0b",
        ] {
            let e = check_db(bad).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidNamespace as i32, "{bad:?}");
        }
        assert!(check_db(&"d".repeat(64)).is_err());
    }

    #[test]
    fn collections_and_namespaces() {
        for ok in ["c", "system.users", "a.b.c", "a b"] {
            assert!(check("db", ok).is_ok(), "{ok}");
        }
        for bad in ["", ".a", "a$b", "a\0b"] {
            assert!(check_collection(bad).is_err(), "{bad:?}");
        }
        assert!(check("db", &"c".repeat(252)).is_ok());
        assert!(check("db", &"c".repeat(253)).is_err());
    }
}
