//! The `failCommand` fail point (`configureFailPoint`, test commands only): makes the
//! next commands of given names fail with an error, a write concern error or a closed
//! connection, or wait first. Drivers' specification tests use it to check their retry
//! and error-label handling against a real server.
//!
//! Checked on every command, so the idle case is one relaxed load of a flag that only
//! `configureFailPoint` writes.
//!
//! Bulwark's own `shedCommands` (`mode: "alwaysOn"` or `"off"`) makes the router refuse
//! every command it could shed (forwarded, with `maxTimeMS`) as overloaded, by the path a
//! real refusal takes (`Session::shed`): the overload experiment prices a refusal with it
//! (`chaos/src/refusal_cost.rs`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use bson::{Bson, Document};
use wire::{MongoError, MongoResult};

#[derive(Default)]
pub struct FailPoints {
    armed: AtomicBool,
    fail_command: Mutex<Option<FailCommand>>,
    /// `shedCommands`.
    shed_commands: AtomicBool,
}

#[derive(Debug, Clone, Default)]
struct FailCommand {
    /// `None`: alwaysOn; `Some(n)`: the next n matching commands.
    remaining: Option<u64>,
    /// Matching commands to let through first (`mode: {skip: n}`).
    skip: u64,
    commands: Vec<String>,
    app_name: Option<String>,
    effect: Effect,
}

/// What a triggered fail point does to one command.
#[derive(Debug, Clone, Default)]
pub struct Effect {
    pub close_connection: bool,
    pub block: Option<Duration>,
    pub error_code: Option<i32>,
    pub error_labels: Option<Vec<String>>,
    pub write_concern_error: Option<Document>,
}

impl FailPoints {
    /// `configureFailPoint: "failCommand"`; returns how many times the previous setting
    /// was still due to fire (MongoDB's `count`).
    pub fn configure(&self, cmd: &Document) -> MongoResult<i64> {
        let name = cmd.get_str("configureFailPoint").unwrap_or_default();
        if name == "shedCommands" {
            return self.configure_shed(cmd);
        }
        // mongod's fail point that fails a `getMore` once it holds the cursor, labelled as
        // the server labels a change stream's errors: here, failCommand on `getMore`.
        let checkout = name == "failGetMoreAfterCursorCheckout";
        if name != "failCommand" && !checkout {
            return Err(MongoError::bad_value(format!(
                "Cannot find failpoint: {name} (failCommand, failGetMoreAfterCursorCheckout \
                 and shedCommands are implemented)"
            )));
        }
        let mut next = FailCommand::default();
        let on = match cmd.get("mode") {
            Some(Bson::String(m)) if m == "off" => false,
            Some(Bson::String(m)) if m == "alwaysOn" => true,
            Some(Bson::Document(m)) => {
                if let Some(n) = m.get("times").and_then(as_u64) {
                    next.remaining = Some(n);
                } else if let Some(n) = m.get("skip").and_then(as_u64) {
                    next.skip = n;
                } else {
                    return Err(MongoError::bad_value(
                        "mode must be off, alwaysOn, {times: n} or {skip: n}",
                    ));
                }
                next.remaining != Some(0)
            }
            _ => {
                return Err(MongoError::bad_value(
                    "mode must be off, alwaysOn, {times: n} or {skip: n}",
                ))
            }
        };
        if on {
            let data = cmd
                .get_document("data")
                .map_err(|_| MongoError::bad_value("failCommand needs data.failCommands"))?;
            next.commands = match checkout {
                true => vec!["getMore".to_string()],
                false => data
                    .get_array("failCommands")
                    .map_err(|_| MongoError::bad_value("failCommand needs data.failCommands"))?
                    .iter()
                    .filter_map(|c| c.as_str().map(str::to_string))
                    .collect(),
            };
            next.app_name = data.get_str("appName").ok().map(str::to_string);
            next.effect = Effect {
                close_connection: data.get_bool("closeConnection").unwrap_or(false),
                block: (data.get_bool("blockConnection").unwrap_or(false)).then(|| {
                    Duration::from_millis(data.get("blockTimeMS").and_then(as_u64).unwrap_or(0))
                }),
                error_code: data.get("errorCode").and_then(as_u64).map(|c| c as i32),
                error_labels: data.get_array("errorLabels").ok().map(|a| {
                    a.iter()
                        .filter_map(|l| l.as_str().map(str::to_string))
                        .collect()
                }),
                write_concern_error: data.get_document("writeConcernError").ok().cloned(),
            };
            if checkout {
                let label = next
                    .effect
                    .error_code
                    .and_then(crate::sharding::change_stream::label_for);
                next.effect.error_labels = label.map(|l| vec![l.to_string()]);
            }
        }
        let mut slot = self.lock();
        let previous = slot.as_ref().map_or(0, |f| f.remaining.unwrap_or(0) as i64);
        *slot = on.then_some(next);
        self.armed.store(on, Ordering::Release);
        Ok(previous)
    }

    /// `configureFailPoint: "shedCommands"`; returns 1 when it was on (MongoDB's `count`
    /// for an `alwaysOn` fail point).
    fn configure_shed(&self, cmd: &Document) -> MongoResult<i64> {
        let on = match cmd.get_str("mode") {
            Ok("alwaysOn") => true,
            Ok("off") => false,
            _ => {
                return Err(MongoError::bad_value(
                    "shedCommands takes mode alwaysOn or off",
                ))
            }
        };
        Ok(self.shed_commands.swap(on, Ordering::Relaxed) as i64)
    }

    /// Whether `shedCommands` is on.
    pub fn shed_commands(&self) -> bool {
        self.shed_commands.load(Ordering::Relaxed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<FailCommand>> {
        self.fail_command.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the fail point fires for this command; counts it down if so.
    pub fn check(&self, command: &str, app_name: Option<&str>) -> Option<Effect> {
        if !self.armed.load(Ordering::Relaxed) || command == "configureFailPoint" {
            return None;
        }
        let mut slot = self.lock();
        let fp = slot.as_mut()?;
        if !fp.commands.iter().any(|c| c == command) {
            return None;
        }
        if fp.app_name.is_some() && fp.app_name.as_deref() != app_name {
            return None;
        }
        if fp.skip > 0 {
            fp.skip -= 1;
            return None;
        }
        let effect = fp.effect.clone();
        if let Some(n) = fp.remaining.as_mut() {
            *n -= 1;
            if *n == 0 {
                *slot = None;
                self.armed.store(false, Ordering::Release);
            }
        }
        Some(effect)
    }
}

fn as_u64(v: &Bson) -> Option<u64> {
    match v {
        Bson::Int32(n) if *n >= 0 => Some(*n as u64),
        Bson::Int64(n) if *n >= 0 => Some(*n as u64),
        Bson::Double(f) if *f >= 0.0 => Some(*f as u64),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn fires_the_given_number_of_times_on_matching_commands() {
        let fp = FailPoints::default();
        assert!(fp.check("insert", None).is_none());
        fp.configure(
            &doc! {"configureFailPoint": "failCommand", "mode": {"times": 2},
            "data": {"failCommands": ["insert"], "errorCode": 91}},
        )
        .unwrap();
        assert!(fp.check("find", None).is_none());
        assert_eq!(fp.check("insert", None).unwrap().error_code, Some(91));
        assert!(fp.check("insert", None).is_some());
        assert!(fp.check("insert", None).is_none());
    }

    #[test]
    fn app_name_skip_and_off() {
        let fp = FailPoints::default();
        fp.configure(
            &doc! {"configureFailPoint": "failCommand", "mode": {"skip": 1},
            "data": {"failCommands": ["find"], "closeConnection": true, "appName": "a"}},
        )
        .unwrap();
        assert!(fp.check("find", Some("b")).is_none());
        assert!(fp.check("find", Some("a")).is_none(), "skipped once");
        assert!(fp.check("find", Some("a")).unwrap().close_connection);
        fp.configure(&doc! {"configureFailPoint": "failCommand", "mode": "off"})
            .unwrap();
        assert!(fp.check("find", Some("a")).is_none());
        assert!(fp
            .configure(&doc! {"configureFailPoint": "other", "mode": "off"})
            .is_err());
    }

    #[test]
    fn shed_commands_turns_on_and_off() {
        let fp = FailPoints::default();
        assert!(!fp.shed_commands());
        let on = doc! {"configureFailPoint": "shedCommands", "mode": "alwaysOn"};
        assert_eq!(fp.configure(&on).unwrap(), 0);
        assert!(fp.shed_commands());
        // It leaves failCommand alone.
        assert!(fp.check("find", None).is_none());
        let off = doc! {"configureFailPoint": "shedCommands", "mode": "off"};
        assert_eq!(fp.configure(&off).unwrap(), 1);
        assert!(!fp.shed_commands());
        assert!(fp
            .configure(&doc! {"configureFailPoint": "shedCommands", "mode": {"times": 1}})
            .is_err());
    }
}
